package convert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/quant"
)

// Limits of the executor. A job holds a source tile, a band of FP8 output,
// the tensor's block scales and its share of filewrite.NewPool's staging
// buffers, whatever the checkpoint's size, plus a small shard's held codes.
const (
	// tileBytes bounds the source bytes read at once for quantization: a
	// 128-row band, split into 128-column tiles when larger.
	tileBytes = 8 << 20
	// MaxJobs bounds --jobs.
	MaxJobs = 256
	// maxScaleBlocks bounds one tensor's scale count, so that a corrupt
	// shape cannot make the executor allocate without bound.
	maxScaleBlocks = 1 << 24
)

// progress receives the work done in bytes (source bytes read plus output
// bytes hashed); it must be safe for concurrent use.
type progress interface {
	Start(total int64) // once, before any work
	Add(n int64)
}

// ExecOptions control how a plan is carried out (not what it produces).
type ExecOptions struct {
	Jobs int // output files produced at once (default 1)
	// Resume skips files already finished under this plan whose size and
	// sha256 still match their record; Restart discards what an earlier run
	// of this plan left in DST and writes every file again.
	Resume, Restart bool
	// Worker and Workers select this process's slice of the files (--worker
	// I/N); Workers 0 means a single worker.
	Worker, Workers int
	NoSpaceCheck    bool     // skip comparing the output's size with DST's free space
	Progress        progress // if set, told about the work as it happens
	// Connections bounds the parallel range requests to a remote source,
	// shared by the files written at once (0: remote.DefaultConnections),
	// and sizes a bucket DST's connections.
	Connections int
	// StateDir is where a bucket DST's bookkeeping lives ("": a directory
	// named after DST in the user's cache).
	StateDir string
}

// Result reports what Execute did. Its counts are over this worker's files,
// those it wrote and those it kept from an earlier run's done records.
type Result struct {
	Written, Skipped []string // the files this worker produced or found done
	// Finalized: this worker found every file done and wrote the index,
	// configs and Manifest.
	Finalized bool
	Manifest  *dstManifest
	// ZeroedNonFinite counts source values replaced by 0 under NonFiniteZero.
	ZeroedNonFinite int64
	// ZeroScaleBlocks counts the 128×128 FP8 blocks that got scale 0 and
	// NaN codes (ModelOpt numerics: all-zero tiles, as NVIDIA writes them).
	ZeroScaleBlocks int64
	Cast            quant.CastStats // the MXFP4 → NVFP4 blocks
	// Decoded counts the quantized tensors decoded to BF16; DecodedNaN the
	// NaN values among them (NaN codes, or NaN codes × scale 0 as torch
	// computes them).
	Decoded    int
	DecodedNaN int64
	Packed     int             // BF16 tensors packed to MXFP4
	Pack       quant.PackStats // and their lossy groups
	FP8Experts fp8ExpertStats  // the routed experts' blocks --experts fp8 cast
	// Repack counts the MXFP4 groups decoded to BF16 and those whose bytes
	// packing the BF16 back would not restore.
	Repack quant.RepackStats
	// Uncounted is how many Skipped files came from a finished conversion's
	// manifest, which keeps no counts: the counts above leave them out.
	Uncounted int
	Network   *remote.Stats // the source bytes fetched (nil for a local source)
	// Report is the quantization_report.json the finalizing run wrote (nil
	// when it did not finalize, or nothing was quantized).
	Report *Report
}

// Execute carries out this worker's slice of the plan into dst, then, if
// every file of the plan is done, finalizes the conversion. It holds DST for
// the whole run (see lock.go). On any error the files in progress are
// removed (never left under their final names) and the error names the file
// and tensor.
func Execute(ctx context.Context, p *Plan, dst string, eo ExecOptions) (*Result, error) {
	jobs := cmp.Or(eo.Jobs, 1)
	if jobs < 1 || jobs > MaxJobs {
		return nil, fmt.Errorf("convert: jobs %d outside [1, %d]", jobs, MaxJobs)
	}
	if eo.Resume && eo.Restart {
		return nil, fmt.Errorf("convert: resume and restart exclude each other")
	}
	workers := max(eo.Workers, 1)
	units, err := p.slice(eo.Worker, workers)
	if err != nil {
		return nil, err
	}
	d, err := openDestination(ctx, dst, eo.StateDir, eo.Connections)
	if err != nil {
		return nil, err
	}
	if err := checkDestPath(p, d); err != nil {
		return nil, err
	}
	if err := fsx.MkdirAll(d.dir); err != nil {
		return nil, err
	}
	wait := time.Duration(0)
	if workers > 1 {
		wait = lockWait
	}
	lock, err := acquireDest(d.dir, wait)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	if workers == 1 {
		if err := checkNoWorkers(d.dir); err != nil {
			return nil, err
		}
	}
	if err := d.claim(); err != nil {
		return nil, err
	}
	// Read before DST is touched: a refused --restart must not have
	// discarded the finished conversion already there.
	var manifest *dstManifest
	var recs records
	if eo.Resume {
		manifest, _ = d.readManifest() // nil when there is none, or it does not read
		if recs, err = loadRecords(d.dir); err != nil {
			return nil, err
		}
	}
	if !eo.NoSpaceCheck {
		if err := checkSpace(d, p, units, recs, manifest, jobs); err != nil {
			return nil, err
		}
	}
	record, err := checkDest(p, d, eo.Restart)
	if err != nil {
		return nil, err
	}
	var state *pendingState
	var slice *dirlock.Lock
	own := units
	if workers == 1 {
		// A whole run holds DST to its end, so it records the plan while
		// its first files are produced (see pendingState), and no finalizer
		// writes DST's last files but this run.
		state = recordState(record)
		defer state.wait() // before the lock is released
		own = slices.Concat(units, finalNames)
	} else {
		if record != nil {
			if err := record(); err != nil {
				return nil, err
			}
		}
		if slice, err = lockSlice(d.dir, eo.Worker, workers); err != nil {
			return nil, err
		}
		defer slice.Release()
		lock.Release() // the workers of the split share DST from here
	}
	if err := d.abortOwn(own); err != nil {
		return nil, err
	}
	var early *earlyFiles
	if workers == 1 {
		early = stageEarly(p, d)
		defer early.abort()
	}
	log := newRecordLog(d.dir, eo.Worker, workers, state)
	res, err := run(ctx, p, d, units, recs, manifest, log, jobs, eo)
	if cerr := log.close(); err == nil && cerr != nil {
		err = fmt.Errorf("records in %s: %w", dst, cerr)
	}
	if err != nil {
		return nil, err
	}
	if err := state.wait(); err != nil {
		return nil, err
	}
	// A whole run recorded every unit it wrote or kept; a split reads every
	// worker's records, and the last worker to finish finalizes.
	var all records
	if workers == 1 {
		all = log.added()
	} else if all, err = loadRecords(d.dir); err != nil {
		return nil, err
	}
	if !all.allDone(p) {
		return res, nil
	}
	var m *dstManifest
	if workers == 1 {
		m, err = finalize(d, p.state(), all, early)
	} else {
		slice.Release()
		if m, err = finalizeLocked(d, lockWait); errors.Is(err, errInUse) {
			return res, nil
		}
	}
	if err != nil {
		return nil, err
	}
	res.Finalized, res.Manifest = true, m
	if _, ok := m.lookup(ReportName); ok {
		if res.Report, err = readReport(d); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// run writes (or verifies and skips) the units with jobs at once.
func run(ctx context.Context, p *Plan, d *destination, units []unit, recs records, manifest *dstManifest, log *recordLog, jobs int, eo ExecOptions) (*Result, error) {
	prog := meter{eo.Progress}
	var total int64
	for _, u := range units {
		total += u.Work
	}
	prog.start(total)

	written := make([]bool, len(units))
	counts := make([]*unitCounts, len(units))
	var net *netCounter
	if p.remote != nil {
		net = &netCounter{}
	}
	conns := cmp.Or(max(eo.Connections, 0), remote.DefaultConnections)
	bufs := filewrite.NewPool(jobs)
	defer bufs.Close() // its memory is outside the heap: give it back now, not when collected
	scratches := make([]*scratch, jobs)
	for j := range scratches {
		scratches[j] = &scratch{pool: bufs, out: d, conns: max(1, conns/jobs), net: net}
	}
	// Largest first: the last file to finish is a small one, so the jobs
	// end together instead of one writing the biggest file alone.
	order := make([]int, len(units))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(units[b].Work, units[a].Work) })
	// Jobs write and hash files' data; committers sync, rename and record
	// them, so that waiting for the disk overlaps the next file's work.
	err := filewrite.Run(ctx, jobs, len(order), func(ctx context.Context, job, k int) (func() error, error) {
		i, s := order[k], scratches[job]
		u := units[i]
		if eo.Resume {
			if ok, c, err := s.resumeUnit(ctx, p, d, u, recs, manifest, log, prog); err != nil || ok {
				counts[i] = c
				return nil, err
			}
		}
		var n int64
		var rec fileRecord
		var commit commitFunc
		var err error
		switch path := d.path(u.Name); {
		case u.File != nil:
			n, rec, commit, err = s.writeShard(ctx, p, path, u.File, prog)
		default:
			rec, commit, err = s.copyAux(ctx, p, u.Aux, path, prog)
		}
		if err != nil {
			return nil, err
		}
		c := s.takeCounts(n)
		return func() error {
			sum, err := commit(log.ready)
			if err != nil {
				return err
			}
			if rec.Size != u.Size {
				return fmt.Errorf("file %s: wrote %d bytes, planned %d", d.path(u.Name), rec.Size, u.Size)
			}
			rec.Name, rec.SHA256 = u.Name, sum
			written[i], counts[i] = true, c
			return log.add(doneRecord{Plan: p.ID, fileRecord: rec, ETag: d.etag(u.Name), Counts: c})
		}, nil
	})
	if err != nil {
		return nil, err
	}
	res := &Result{}
	for i, u := range units {
		if written[i] {
			res.Written = append(res.Written, u.Name)
		} else {
			res.Skipped = append(res.Skipped, u.Name)
			if u.File != nil && !recs.recorded(p.ID, u.Name) { // kept from a manifest
				res.Uncounted++
			}
		}
		res.add(counts[i])
	}
	if net != nil {
		res.Network = net.stats()
	}
	return res, nil
}

// meter passes the work done on to the caller's progress, if any.
type meter struct{ p progress }

func (m meter) start(total int64) {
	if m.p != nil {
		m.p.Start(total)
	}
}

func (m meter) add(n int64) {
	if m.p != nil {
		m.p.Add(n)
	}
}

// resumeUnit checks a unit finished earlier under this plan: it is skipped
// when its file still has the recorded size and sha256.
func (s *scratch) resumeUnit(ctx context.Context, p *Plan, d *destination, u unit, recs records, m *dstManifest, log *recordLog, prog meter) (bool, *unitCounts, error) {
	rec, ok := recs.finished(p.ID, u.Name, m)
	if !ok {
		return false, nil, nil
	}
	if err := ctx.Err(); err != nil {
		return false, nil, err
	}
	var etag string
	var c *unitCounts
	if recs.recorded(p.ID, u.Name) {
		etag, c = recs[u.Name].ETag, recs[u.Name].Counts
	}
	ok, etag, err := d.kept(u.Name, rec, etag, prog.add)
	if err != nil || !ok {
		return false, nil, err
	}
	prog.add(u.Work - rec.Size)
	// Re-record it, so Finalize sees it even when it came from a manifest.
	return true, c, log.add(doneRecord{Plan: p.ID, fileRecord: rec, ETag: etag, Counts: c})
}
