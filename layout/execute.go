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

// defaultJobs is the least default number of files written at once. Each
// job hands its file to a committer (fsync, rename) and goes on, so the
// disk flushes one file while the next is written.
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
	// Progress, if set, hears the run in tensor bytes written, as
	// convert.Progress does: Start once before the first write, after the
	// validation pass and the check of what an earlier run left, with the
	// bytes this run will write (the plan's less what it keeps), so that a
	// display's total and ETA are this run's; then Add as bytes are written
	// (from worker goroutines), adding up to Start's total.
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

// result says what Execute did.
type result struct {
	// Written and Kept count the safetensors files written now and those
	// kept from an earlier run of the same plan.
	Written, Kept int
	// Bytes is the tensor bytes written now.
	Bytes int64
	// Cleaned counts the temporaries of a killed run that were removed.
	Cleaned int
	// Changed counts the files an earlier run committed that were modified
	// (or replaced) since: they are written again, and counted in Written.
	Changed int
	// Network counts the source bytes fetched (nil for a local source).
	Network *remote.Stats
}

// Execute writes the plan under dst, holding dst's lock for the whole run
// (a second run on dst fails at once). A dst that is, holds or lies inside a
// local source is refused first (fsx.Disjoint). It runs the validation pass
// next, so that a failing check leaves dst untouched. Every file is written
// atomically; a directory is finished (index, side files, then its
// completion record) as soon as its last file is committed, and then holds
// no bookkeeping: two runs give identical trees. A rerun of the same plan
// after a kill resumes: files whose size and header match the plan and that
// are unchanged since their commit (same stamp: size, times, inode) are
// kept, others written again, temporaries removed. A rerun over a finished
// directory keeps every file whose name, size and header are the plan's
// (reassemble --check and verify read the bytes) and writes the others.
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
	runs := make([]*dirRun, len(p.Dirs))
	var jobs []writeJob
	for i := range p.Dirs {
		dr, err := prepareDir(p, &p.Dirs[i], filepath.Join(dst, p.Dirs[i].Dir), o.Restart)
		if err != nil {
			return nil, err
		}
		runs[i] = dr
		res.Kept += len(dr.d.files) - len(dr.todo)
		res.Cleaned += dr.cleaned
		res.Changed += dr.changed
		dr.left.Store(int32(len(dr.todo)))
		for _, of := range dr.todo {
			jobs = append(jobs, writeJob{of: of, path: filepath.Join(dr.dir, of.name), dr: dr})
		}
	}
	if !o.NoSpaceCheck {
		if err := checkSpace(dst, runs); err != nil {
			return nil, err
		}
	}
	committed := func(j writeJob, sum string) error {
		if err := j.dr.recordCommit(j.of.name, sum); err != nil {
			return err
		}
		if j.dr.left.Add(-1) == 0 {
			return j.dr.finish()
		}
		return nil
	}
	if err := p.runJobs(ctx, o, jobs, committed, res); err != nil {
		return nil, err
	}
	for _, dr := range runs {
		if len(dr.todo) == 0 && !dr.finished {
			if err := dr.finish(); err != nil {
				return nil, err
			}
		}
	}
	res.Written = len(jobs)
	return res, nil
}

// writeJob is one file to write and the directory it completes.
type writeJob struct {
	of   *outFile
	path string
	dr   *dirRun
	// create, when set, starts the file (an object of a bucket DST) instead
	// of a local temporary beside path; bd is then its directory.
	create func(pool *filewrite.Pool, prog func(int64)) (*filewrite.File, error)
	bd     *bucketDir
}

// finish writes the directory's finishFiles, the completion record last,
// and removes the run marker: a directory without the marker is complete.
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
	// The bookkeeping goes: the marker first (a run killed here leaves a
	// record that the rerun finds complete and removes), then the record.
	// The finished directory holds only the plan's files.
	for _, n := range []string{markerName, stampsName} {
		if err := os.Remove(filepath.Join(dr.dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	dr.finished = true
	return filewrite.SyncDir(dr.dir)
}

func jobsOr(n int) int {
	if n > 0 {
		return n
	}
	return max(defaultJobs, runtime.GOMAXPROCS(0))
}

// writeFiles writes the files with jobs at once through filewrite.Run: each
// job writes a file front to back, hashing its bytes as they go (but a
// local reassembly's, whose sums nobody records), a committer syncs and
// renames it, then committed records it with their sha256 ("" unhashed). It returns the tensor bytes committed. The first
// error cancels the rest.
func writeFiles(ctx context.Context, files []writeJob, jobs int, progress func(int64), committed func(j writeJob, sum string) error, net *netFetch) (int64, error) {
	pool := filewrite.NewPool(jobs)
	defer pool.Close()              // its memory is outside the heap: give it back now, not when collected
	windows := make([][]byte, jobs) // each job's read window, made on first use
	var total atomic.Int64
	err := filewrite.Run(ctx, jobs, len(files), func(ctx context.Context, job, i int) (func() error, error) {
		j := files[i]
		create := func(prog func(int64)) (*filewrite.File, error) {
			switch {
			case j.create != nil:
				return j.create(pool, prog)
			case j.dr.d.hasSums():
				return filewrite.Create(j.path, pool, prog)
			}
			return filewrite.CreateUnhashed(j.path, pool, prog) // a reassembly's file: no sum is recorded
		}
		f, err := writeFileTo(ctx, j.of, j.path, create, &windows[job], progress, net)
		if err != nil {
			return nil, err
		}
		return func() error {
			if err := f.Commit(); err != nil {
				return err
			}
			if err := committed(j, f.SHA256()); err != nil {
				return err
			}
			total.Add(j.of.tensorBytes())
			return nil
		}, nil
	})
	return total.Load(), err
}

// runJobs writes jobs with o's jobs and progress, reading a remote source
// over o's connections shared among the jobs; committed runs after each
// file is committed. It adds the bytes written and the network use to res.
func (p *Plan) runJobs(ctx context.Context, o ExecOptions, jobs []writeJob, committed func(j writeJob, sum string) error, res *result) error {
	var progress func(int64)
	if o.Progress != nil {
		var total int64
		for _, j := range jobs {
			total += j.of.tensorBytes()
		}
		o.Progress.Start(total)
		progress = o.Progress.Add
	}
	var net *netFetch
	if p.src.remote != nil {
		conns := o.Connections
		if conns <= 0 {
			conns = remote.DefaultConnections
		}
		net = &netFetch{src: p.src.remote, conns: max(1, conns/jobsOr(o.Jobs))}
	}
	n, err := writeFiles(ctx, jobs, jobsOr(o.Jobs), progress, committed, net)
	res.Bytes = n
	if err != nil {
		return err
	}
	if net != nil {
		res.Network = net.stats()
	}
	return nil
}
