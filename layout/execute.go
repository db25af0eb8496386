package layout

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/objstore"
	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// defaultJobs is the least default number of files written at once (one
// flushes while the next is written).
const defaultJobs = 4

// ExecOptions controls Execute.
type ExecOptions struct {
	// Jobs bounds how many files are written at once (0: GOMAXPROCS, at
	// least defaultJobs).
	Jobs int
	// Restart discards what an earlier, unfinished or different run left in
	// the output directories (only the files its records say it wrote);
	// without it such a run is resumed (same plan) or refused (different
	// plan). Files no run wrote are refused either way, never removed.
	Restart bool
	// Progress, if set, hears the run in tensor bytes written: Start once,
	// after validation and the check of what an earlier run left, with the
	// bytes this run writes; then Add (from workers), adding up to it.
	Progress interface {
		Start(total int64)
		Add(n int64)
	}
	// NoSpaceCheck skips comparing what the run writes with DST's free space.
	NoSpaceCheck bool
	// Connections bounds the parallel range requests to a remote source,
	// shared by the files written at once (0: remote.DefaultConnections).
	Connections int
	// StateDir is where the run records of an s3:// or gs:// dst live (""
	// for a directory under the user's cache directory, named after dst).
	StateDir string
}

type result struct {
	// Written and Kept count the safetensors files written now and those
	// kept from an earlier run of the same plan.
	Written, Kept int
	Bytes         int64 // tensor bytes written now
	Cleaned       int   // temporaries of a killed run removed
	// Changed counts the files an earlier run committed that were modified
	// since: they are written again, and counted in Written.
	Changed int
	Network *remote.Stats // source bytes fetched (nil for a local source)
}

// Execute writes the plan under dst (a local directory, or an s3:// or
// gs:// prefix), holding dst's lock. A dst overlapping a local source is
// refused, and the validation pass runs first, so a failing check leaves dst
// untouched. Every file is written atomically; a directory is finished
// (index, side files, then its completion record) as soon as its last file
// is committed. A rerun of the same plan resumes (see prepareDir).
func (p *Plan) Execute(ctx context.Context, dst string, o ExecOptions) (*result, error) {
	if p.src == nil {
		return nil, errors.New("layout: Execute of a plan not made by PlanExport or PlanReassemble")
	}
	if objstore.IsURL(dst) {
		return p.executeBucket(ctx, dst, o)
	}
	if p.src.remote == nil {
		if err := fsx.Disjoint(dst, p.src.Root); err != nil {
			return nil, err
		}
	}
	if err := p.Validate(ctx); err != nil {
		return nil, err
	}
	if err := fsx.MkdirAll(dst); err != nil {
		return nil, err
	}
	lock, err := dirlock.Acquire(dst, dirlock.LockName)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	if err := checkRoot(p, dst); err != nil {
		return nil, err
	}
	res := &result{}
	dirs := make([]outDir, len(p.Dirs))
	for i := range p.Dirs {
		dr, err := prepareDir(p, &p.Dirs[i], filepath.Join(dst, p.Dirs[i].Dir), o.Restart)
		if err != nil {
			return nil, err
		}
		dirs[i] = dr
		res.Cleaned += dr.cleaned
	}
	if !o.NoSpaceCheck {
		if err := checkSpace(dst, dirs); err != nil {
			return nil, err
		}
	}
	if err := p.runJobs(ctx, o, dirs, res); err != nil {
		return nil, err
	}
	return res, nil
}

type dirState struct {
	d          *dirPlan
	todo       []*outFile // files still to write
	left       atomic.Int32
	completion []byte // layout.json (export) or the index (reassembly)
	finished   bool
	changed    int // files committed earlier, modified since, written again
}

// outDir is an output directory being written: a local one (dirRun) or the
// objects under a bucket prefix (bucketDir).
type outDir interface {
	state() *dirState
	path(of *outFile) string // names the file in messages
	create(of *outFile, pool *filewrite.Pool, prog func(int64)) (*filewrite.File, error)
	// recordCommit records a file just committed, with its sha256; a run
	// killed before the record writes the file again.
	recordCommit(of *outFile, sum string) error
	// finish writes the directory's finishFiles, the completion record
	// last, and drops the run's bookkeeping.
	finish() error
}

func (s *dirState) state() *dirState { return s }

type writeJob struct {
	of  *outFile
	dir outDir
}

func (dr *dirRun) path(of *outFile) string { return filepath.Join(dr.dir, of.name) }

func (dr *dirRun) create(of *outFile, pool *filewrite.Pool, prog func(int64)) (*filewrite.File, error) {
	if dr.d.hasSums() {
		return filewrite.Create(dr.path(of), pool, prog)
	}
	return filewrite.CreateUnhashed(dr.path(of), pool, prog) // a reassembly's file: no sum is recorded
}

func (dr *dirRun) finish() error {
	fin, err := dr.d.finishFiles(dr.completion, dr.stamps.Sums)
	if err != nil {
		return err
	}
	for _, f := range fin {
		path := filepath.Join(dr.dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := filewrite.WriteFile(path, f.b, 0o644); err != nil {
			return err
		}
	}
	// The marker goes first (a run killed here leaves a record that the
	// rerun finds complete and removes), then the record.
	for _, n := range []string{markerName, stampsName} {
		if err := os.Remove(filepath.Join(dr.dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	dr.finished = true
	return filewrite.SyncDir(dr.dir)
}

// runJobs writes the directories' files, o.Jobs at once, sharing o's
// connections to a remote source; a directory's last commit finishes it.
func (p *Plan) runJobs(ctx context.Context, o ExecOptions, dirs []outDir, res *result) error {
	var jobs []writeJob
	var total int64
	for _, dir := range dirs {
		s := dir.state()
		res.Kept += len(s.d.files) - len(s.todo)
		res.Changed += s.changed
		s.left.Store(int32(len(s.todo)))
		for _, of := range s.todo {
			jobs = append(jobs, writeJob{of, dir})
			total += of.tensorBytes()
		}
	}
	var progress func(int64)
	if o.Progress != nil {
		o.Progress.Start(total)
		progress = o.Progress.Add
	}
	n := o.Jobs
	if n <= 0 {
		n = max(defaultJobs, runtime.GOMAXPROCS(0))
	}
	var net *netFetch
	if p.src.remote != nil {
		conns := o.Connections
		if conns <= 0 {
			conns = remote.DefaultConnections
		}
		net = &netFetch{src: p.src.remote, conns: max(1, conns/n)}
	}
	pool := filewrite.NewPool(n)
	defer pool.Close()           // its memory is outside the heap: give it back now, not when collected
	windows := make([][]byte, n) // each job's read window, made on first use
	var written atomic.Int64
	err := filewrite.Run(ctx, n, len(jobs), func(ctx context.Context, job, i int) (func() error, error) {
		j := jobs[i]
		create := func(prog func(int64)) (*filewrite.File, error) { return j.dir.create(j.of, pool, prog) }
		f, err := writeFileTo(ctx, j.of, j.dir.path(j.of), create, &windows[job], progress, net)
		if err != nil {
			return nil, err
		}
		return func() error {
			if err := f.Commit(); err != nil {
				return err
			}
			if err := j.dir.recordCommit(j.of, f.SHA256()); err != nil {
				return err
			}
			if j.dir.state().left.Add(-1) == 0 {
				if err := j.dir.finish(); err != nil {
					return err
				}
			}
			written.Add(j.of.tensorBytes())
			return nil
		}, nil
	})
	res.Bytes = written.Load()
	if err != nil {
		return err
	}
	if net != nil {
		res.Network = &net.sum // every stream is closed
	}
	for _, dir := range dirs {
		if !dir.state().finished {
			if err := dir.finish(); err != nil {
				return err
			}
		}
	}
	res.Written = len(jobs)
	return nil
}
