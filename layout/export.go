package layout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// ErrOutputExists: an output directory that already holds files.
var ErrOutputExists = errors.New("output directory is not empty")

// WindowSize is the read buffer of one export worker: a column split reads
// whole rows in windows of this size and keeps only the rank's columns, so
// memory is Jobs × 2 × WindowSize whatever the tensor size.
const WindowSize = 4 << 20

// MaxShardBytes is the size at which an output file is closed and the next
// begun (the 5 GB of huggingface's default max_shard_size).
const MaxShardBytes = 5_000_000_000

// DefaultJobs is the least default number of files written at once. Each
// writer hands its file to a committer (fsync, rename) and goes on, so the
// disk flushes one file while the next is written.
const DefaultJobs = 4

// commitsPerJob bounds files waiting for fsync per writer.
const commitsPerJob = 4

// directCopyMin is the contiguous run length from which a slice row is copied
// in the kernel (copy_file_range) instead of through the window.
const directCopyMin = 256 << 10

// PackFormat is how block-FP8 scales are stored in an export.
type PackFormat uint8

const (
	// PackNone keeps scales as in the source (F32 block grid).
	PackNone PackFormat = iota
	// PackUE8M0 stores scales in DeepGEMM's SM100 packed UE8M0 layout: int32
	// [⌈⌈K/128⌉/4⌉, align(N, 4)], one row per weight row.
	PackUE8M0
)

var packNames = [...]string{PackNone: "", PackUE8M0: "ue8m0"}

// String returns the flag value ("" for PackNone).
func (p PackFormat) String() string {
	if int(p) < len(packNames) {
		return packNames[p]
	}
	return fmt.Sprintf("PackFormat(%d)", uint8(p))
}

// ParsePackFormat reads a --pack-scales value ("", "none" or "ue8m0").
func ParsePackFormat(s string) (PackFormat, error) {
	switch s {
	case "", "none":
		return PackNone, nil
	case "ue8m0":
		return PackUE8M0, nil
	}
	return 0, fmt.Errorf("%w: unknown scale packing %q (want ue8m0)", ErrLayout, s)
}

// ExportOptions controls Export.
type ExportOptions struct {
	// Ranks selects the ranks to write (nil: all).
	Ranks []int
	// Pack stores block scales packed.
	Pack PackFormat
	// Jobs bounds how many files are written at once (0: GOMAXPROCS, at
	// least DefaultJobs); written files wait for fsync apart from the writers.
	Jobs int
	// Force replaces the content of existing output directories.
	Force bool
	// Progress, if set, is called with bytes written (from worker goroutines).
	Progress func(n int64)
}

// ExportResult summarizes an export.
type ExportResult struct {
	// Plan is the plan the export followed.
	Plan *Plan
	// Dirs are the directories written, one per rank.
	Dirs []string
	// Ranks summarizes each rank written, in the order of Dirs.
	Ranks []RankResult
	// Files is the number of safetensors files written.
	Files int
	// Bytes is the tensor bytes written.
	Bytes int64
	// Unaligned names the block-FP8 weights whose scales stayed replicated.
	Unaligned []string
}

// RankResult is what one rank directory holds.
type RankResult struct {
	// Rank and Stage place the directory; Layers is the stage's [first, end).
	Rank, Stage int
	Layers      [2]int
	// Tensors and Bytes count the pieces written (packed scales as stored).
	Tensors int
	Bytes   int64
}

// outTensor is one tensor of an output file and where its bytes come from.
type outTensor struct {
	spec  safetensors.TensorSpec // as stored
	src   tensorData
	shape []int64 // source shape
	held  Held
	axis  int
	start int64
	stop  int64
	pack  *packJob
}

// outFile is one safetensors file of one rank.
type outFile struct {
	path    string
	name    string
	meta    map[string]string
	tensors []outTensor
	// verbatim is a source shard this file copies whole: the rank holds all
	// its tensors unchanged and the shard is in canonical form, so the copy
	// is byte-identical to writing the tensors one by one, at cp speed.
	verbatim *safetensors.File
	// steps write the file in its data order (planned by planSteps).
	steps []fileStep
}

// fileStep is one write of an output file: a run of whole tensors that lie
// back to back, in the same order, in one source file and in the output
// (moved with one span writer and one copy), or one tensor written alone (a
// slice, packed scales, a tensor rebuilt from an export).
type fileStep struct {
	// first and last are output tensors, in the layout's data order.
	first, last int
	// tensor is a lone tensor's index in outFile.tensors, -1 for a run.
	tensor int
	// src, off and n are a run's source file, absolute offset and length.
	src    *safetensors.File
	off, n int64
}

// MaxRunBytes bounds one copy run, so that cancellation is never held up
// for long by one system call.
const MaxRunBytes = 256 << 20

// layout lays the file out canonically (deterministic: planning and
// writing get the same layout).
func (of *outFile) layout() (*safetensors.Layout, error) {
	specs := make([]safetensors.TensorSpec, len(of.tensors))
	for i, t := range of.tensors {
		specs[i] = t.spec
	}
	lay, err := safetensors.NewLayout(specs, of.meta)
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", of.path, err)
	}
	return lay, nil
}

// planSteps decides how the file is written: its tensors in the layout's
// data order, consecutive whole tensors that are also contiguous in one
// source file grouped into copy runs of up to MaxRunBytes. A run never
// includes a slice, a packed scale or a tensor rebuilt in memory.
func (of *outFile) planSteps() error {
	of.steps = nil
	if of.verbatim != nil {
		return nil
	}
	lay, err := of.layout()
	if err != nil {
		return err
	}
	at := make(map[string]int, len(of.tensors))
	for i, t := range of.tensors {
		at[t.spec.Name] = i
	}
	for i, lt := range lay.Tensors {
		k := at[lt.Name]
		t := of.tensors[k]
		ft, whole := t.src.(fileTensor)
		if !whole || t.held == HeldSlice || t.pack != nil || ft.t.Size() != lt.Size() {
			of.steps = append(of.steps, fileStep{first: i, last: i, tensor: k})
			continue
		}
		abs := ft.f.DataStart + ft.t.Begin
		if n := len(of.steps); n > 0 {
			last := &of.steps[n-1]
			if last.tensor < 0 && last.src == ft.f && last.last == i-1 && last.off+last.n == abs && last.n+lt.Size() <= MaxRunBytes {
				last.last, last.n = i, last.n+lt.Size()
				continue
			}
		}
		of.steps = append(of.steps, fileStep{first: i, last: i, tensor: -1, src: ft.f, off: abs, n: lt.Size()})
	}
	return nil
}

// rankOut is everything written for one rank.
type rankOut struct {
	rank  int
	dir   string
	files []*outFile
	man   *Manifest
}

// DirName is the output directory of a rank: stage-NN for a pipeline layout
// with one rank per stage, rank-NN otherwise.
func DirName(l *Layout, rank int) string {
	if l.RanksPerStage == 1 && l.Stages() > 1 {
		return fmt.Sprintf("%s%02d", stageDirPrefix, rank)
	}
	return fmt.Sprintf("%s%02d", rankDirPrefix, rank)
}

// Export writes, for each selected rank, dst/rank-NN (or stage-NN): the rank's
// tensors in safetensors files (slices under their source names), an index,
// the side files (config.json records a stage's layer range) and layout.json.
// Every check (layout against tensors, ranks, output directories, padding the
// layout drops, scales to pack) runs before the first file is written. Files
// are written atomically and in parallel with bounded memory; whole tensors
// and row slices are copied in the kernel.
func Export(ctx context.Context, src *Source, l *Layout, dst string, o ExportOptions) (*ExportResult, error) {
	plan, err := l.Plan(src.Specs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Root, err)
	}
	ranks, err := selectRanks(o.Ranks, plan.Ranks())
	if err != nil {
		return nil, err
	}
	// Ranks are planned concurrently: each lays out its own files.
	outs := make([]*rankOut, len(ranks))
	var pg errgroup.Group
	pg.SetLimit(runtime.GOMAXPROCS(0))
	for i, r := range ranks {
		pg.Go(func() (err error) {
			outs[i], err = planRank(src, plan, dst, r, o.Pack)
			return err
		})
	}
	if err := pg.Wait(); err != nil {
		return nil, err
	}
	if err := checkPadding(src, plan); err != nil {
		return nil, err
	}
	if err := checkPacking(outs); err != nil {
		return nil, err
	}
	for _, ro := range outs {
		if err := prepareOut(ro.dir, o.Force); err != nil {
			return nil, err
		}
	}

	res := &ExportResult{Plan: plan, Unaligned: plan.Unaligned}
	// A rank is finished (index, side files, then its manifest) as soon as
	// its last file is committed, while other ranks' files are written.
	var files []*outFile
	rankOf := map[*outFile]*rankOut{}
	left := make(map[*rankOut]*atomic.Int32, len(outs))
	for _, ro := range outs {
		files = append(files, ro.files...)
		left[ro] = new(atomic.Int32)
		left[ro].Store(int32(len(ro.files)))
		for _, of := range ro.files {
			rankOf[of] = ro
		}
	}
	committed := func(of *outFile) error {
		ro := rankOf[of]
		if left[ro].Add(-1) == 0 {
			return finishRank(src, plan, ro)
		}
		return nil
	}
	if res.Bytes, err = writeFiles(ctx, files, o.Jobs, o.Progress, committed); err != nil {
		return nil, err
	}
	for _, ro := range outs {
		if len(ro.files) == 0 {
			if err := finishRank(src, plan, ro); err != nil {
				return nil, err
			}
		}
		res.Dirs = append(res.Dirs, ro.dir)
		res.Files += len(ro.files)
		rr := RankResult{Rank: ro.rank, Stage: ro.man.Stage, Layers: ro.man.Layers, Tensors: len(ro.man.Tensors)}
		for _, of := range ro.files {
			for _, t := range of.tensors {
				n, _ := safetensors.ByteSize(t.spec.DType, t.spec.Shape)
				rr.Bytes += n
			}
		}
		res.Ranks = append(res.Ranks, rr)
	}
	return res, nil
}

func jobsOr(n int) int {
	if n > 0 {
		return n
	}
	return max(DefaultJobs, runtime.GOMAXPROCS(0))
}

func selectRanks(sel []int, n int) ([]int, error) {
	if sel == nil {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	seen := map[int]bool{}
	for _, r := range sel {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("%w: rank %d not in [0, %d)", ErrRank, r, n)
		}
		if seen[r] {
			return nil, fmt.Errorf("%w: rank %d listed twice", ErrRank, r)
		}
		seen[r] = true
	}
	out := append([]int(nil), sel...)
	sort.Ints(out)
	return out, nil
}

// ParseRanks reads a rank list such as "0,3,8-11".
func ParseRanks(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		var a, b int
		if _, err := fmt.Sscanf(f, "%d-%d", &a, &b); err == nil && strings.Count(f, "-") == 1 {
			if b < a || b-a > MaxRanks {
				return nil, fmt.Errorf("%w: bad range %q", ErrRank, f)
			}
			for r := a; r <= b; r++ {
				out = append(out, r)
			}
			continue
		}
		if _, err := fmt.Sscanf(f, "%d", &a); err != nil || fmt.Sprint(a) != f {
			return nil, fmt.Errorf("%w: bad rank %q in %q", ErrRank, f, s)
		}
		out = append(out, a)
	}
	return out, nil
}

// planRank lays out one rank's files and manifest.
func planRank(src *Source, plan *Plan, dst string, rank int, pack PackFormat) (*rankOut, error) {
	l := plan.Layout
	pcs, err := plan.Pieces(rank)
	if err != nil {
		return nil, err
	}
	ro := &rankOut{rank: rank, dir: filepath.Join(dst, DirName(l, rank))}
	stage := plan.StageOf(rank)
	first, end := l.StageLayers(stage)
	man := &Manifest{Format: ManifestFormat, Layout: l, Rank: rank, Ranks: plan.Ranks(), Stage: stage,
		Stages: l.Stages(), Layers: [2]int{first, end}, PackScales: pack.String(), Source: src.Info,
		SourceConfig: string(src.Config), Tensors: make([]Entry, 0, len(pcs))}
	for _, i := range plan.Dropped {
		man.Dropped = append(man.Dropped, plan.Tensors[i].Name)
	}
	man.Dropped = append(man.Dropped, src.Missing...)
	sort.Strings(man.Dropped)

	// Pieces in source order fill output files of up to MaxShardBytes.
	weights := map[string]Piece{}
	for _, pc := range pcs {
		if pc.DType == safetensors.F8_E4M3 {
			weights[pc.Name] = pc
		}
	}
	verbatim, err := verbatimFiles(src, pcs, pack)
	if err != nil {
		return nil, err
	}
	var cur *outFile
	var curBytes int64
	whole := map[string]*outFile{}
	opened := map[string]bool{}
	fileOf := make([]*outFile, 0, len(pcs)) // output file of each manifest entry
	for _, pc := range pcs {
		sf := src.FileOf[pc.Index]
		if !opened[sf] {
			opened[sf] = true
			man.SourceFiles = append(man.SourceFiles, sf)
		}
		ot := outTensor{spec: safetensors.TensorSpec{Name: pc.Name, DType: pc.DType, Shape: pc.SliceShape()},
			src: src.data[pc.Index], shape: pc.Shape, held: pc.Held, axis: pc.Axis, start: pc.Start, stop: pc.Stop}
		e := Entry{Name: pc.Name, SourceFile: sf, DType: pc.DType, Shape: pc.Shape, Held: pc.Held, Rule: pc.Rule,
			ScaleOf: pc.ScaleOf, Scale: pc.Scale}
		if pc.Held == HeldSlice {
			e.Axis, e.Start, e.Stop = pc.Axis, pc.Start, pc.Stop
			if r := ruleOf(l, pc.Rule); r != nil && r.Valid > 0 && pc.ScaleOf == "" {
				e.Valid = r.Valid
			}
		}
		if pack == PackUE8M0 && pc.ScaleOf != "" {
			pj, err := newPackJob(pc, weights[pc.ScaleOf], src.data[pc.Index])
			if err != nil {
				return nil, err
			}
			ot.pack = pj
			ot.spec = safetensors.TensorSpec{Name: pc.Name, DType: safetensors.I32, Shape: pj.shape()}
			e.Packed = pj.describe()
		}
		man.Tensors = append(man.Tensors, e)
		if vf := verbatim[sf]; vf != nil {
			of := whole[sf]
			if of == nil {
				of = &outFile{meta: vf.Metadata, verbatim: vf}
				whole[sf] = of
				ro.files = append(ro.files, of)
			}
			of.tensors = append(of.tensors, ot)
			fileOf = append(fileOf, of)
			continue
		}
		size, _ := safetensors.ByteSize(ot.spec.DType, ot.spec.Shape)
		if cur == nil || (curBytes > 0 && curBytes+size > MaxShardBytes) {
			cur = &outFile{meta: fileMeta(src, sf)}
			curBytes = 0
			ro.files = append(ro.files, cur)
		}
		cur.tensors = append(cur.tensors, ot)
		curBytes += size
		fileOf = append(fileOf, cur)
	}
	for i, of := range ro.files {
		of.name = fmt.Sprintf(model.ShardNameFormat, i+1, len(ro.files))
		of.path = filepath.Join(ro.dir, of.name)
		if err := of.planSteps(); err != nil {
			return nil, err
		}
	}
	for i := range man.Tensors {
		man.Tensors[i].File = fileOf[i].name
	}
	ro.man = man
	return ro, nil
}

// verbatimFiles picks the source shards a rank holds entirely and unchanged
// (every tensor whole, none packed) whose header is already canonical: those
// are copied as files.
func verbatimFiles(src *Source, pcs []Piece, pack PackFormat) (map[string]*safetensors.File, error) {
	if src.files == nil {
		return nil, nil
	}
	held := map[string]int{}
	changed := map[string]bool{}
	for _, pc := range pcs {
		sf := src.FileOf[pc.Index]
		held[sf]++
		if pc.Held == HeldSlice || (pack != PackNone && pc.ScaleOf != "") {
			changed[sf] = true
		}
	}
	out := map[string]*safetensors.File{}
	for sf, n := range held {
		f := src.files[sf]
		if changed[sf] || n != src.counts[sf] || f == nil {
			continue
		}
		if _, ok := f.ReaderAt().(*os.File); !ok {
			continue
		}
		specs := make([]safetensors.TensorSpec, len(f.Tensors))
		for i, t := range f.Tensors {
			specs[i] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
		}
		lay, err := safetensors.NewLayout(specs, f.Metadata)
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", sf, err)
		}
		if int64(len(lay.Header)) != f.DataStart || lay.Size != f.Size {
			continue
		}
		hdr := make([]byte, f.DataStart)
		if err := readFull(f.ReaderAt(), hdr, 0); err != nil {
			return nil, fmt.Errorf("file %s: %w", sf, err)
		}
		if bytes.Equal(hdr, lay.Header) {
			out[sf] = f
		}
	}
	return out, nil
}

// copyVerbatim copies a whole source shard through an atomic temporary; the
// kernel moves the bytes (copy_file_range).
func copyVerbatim(of *outFile) (func() error, error) {
	src, ok := of.verbatim.ReaderAt().(*os.File)
	if !ok {
		return nil, fmt.Errorf("file %s: not a local file", of.verbatim.Path)
	}
	in, err := fsx.Open(src.Name())
	if err != nil {
		return nil, err
	}
	defer in.Close()
	out, err := atomicfile.Create(of.path)
	if err != nil {
		return nil, err
	}
	n, err := out.File.ReadFrom(io.LimitReader(in, of.verbatim.Size))
	if err == nil && n != of.verbatim.Size {
		err = fmt.Errorf("copied %d of %d bytes", n, of.verbatim.Size)
	}
	if err != nil {
		out.Abort()
		return nil, fmt.Errorf("file %s: copy from %s: %w", of.path, src.Name(), err)
	}
	return out.Commit, nil
}

func ruleOf(l *Layout, name string) *Rule {
	for i := range l.Rules {
		if l.Rules[i].Name == name {
			return &l.Rules[i]
		}
	}
	return nil
}

func fileMeta(src *Source, name string) map[string]string {
	for _, f := range src.Info.Files {
		if f.Name == name {
			return f.Metadata
		}
	}
	return nil
}

// prepareOut makes sure a rank directory exists and is empty (or, with
// force, empties it of what an export writes).
func prepareOut(dir string, force bool) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return err
	}
	if len(ents) == 0 {
		return nil
	}
	if !force {
		return fmt.Errorf("%w: %s holds %d entries (remove it or pass --force)", ErrOutputExists, dir, len(ents))
	}
	for _, e := range ents {
		if e.IsDir() {
			return fmt.Errorf("%w: %s holds a directory %s; not touching it", ErrOutputExists, dir, e.Name())
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// checkPadding verifies that the entries a Valid split drops are zero, so
// that dropping them loses nothing (reassembly writes zeros back).
func checkPadding(src *Source, plan *Plan) error {
	buf := make([]byte, 64<<10)
	for i, t := range plan.Tensors {
		pl := plan.place[i]
		if pl.stage < 0 || pl.weight >= 0 {
			continue
		}
		r := &plan.Layout.Rules[pl.rule]
		if r.Action != Split || r.Valid <= 0 || r.Valid == t.Shape[r.Axis] {
			continue
		}
		err := forRuns(t.Shape, t.DType, r.Axis, r.Valid, t.Shape[r.Axis], func(off, n int64) error {
			for n > 0 {
				m := min(n, int64(len(buf)))
				if err := readFull(src.data[i], buf[:m], off); err != nil {
					return fmt.Errorf("tensor %s: %w", t.Name, err)
				}
				for _, b := range buf[:m] {
					if b != 0 {
						return fmt.Errorf("%w: tensor %s: rule %q keeps the first %d of %d entries along axis %d, but the rest is not zero",
							ErrPadding, t.Name, r.Name, r.Valid, t.Shape[r.Axis], r.Axis)
					}
				}
				off, n = off+m, n-m
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", src.Root, err)
		}
	}
	return nil
}

// forRuns calls fn with the byte range of each contiguous run of the slice
// [start, stop) along axis of a row-major tensor.
func forRuns(shape []int64, dt safetensors.DType, axis int, start, stop int64, fn func(off, n int64) error) error {
	outer, _ := safetensors.NumElements(shape[:axis])
	inner, _ := safetensors.NumElements(shape[axis+1:])
	innerB := inner * dt.Bits() / 8
	rowB := shape[axis] * innerB
	run := (stop - start) * innerB
	for o := int64(0); o < outer; o++ {
		if err := fn(o*rowB+start*innerB, run); err != nil {
			return err
		}
	}
	return nil
}

var windowPool = sync.Pool{New: func() any { b := make([]byte, 2*WindowSize); return &b }}

// writeFiles writes files with jobs writers; each written file goes to a
// committer (fsync, rename into place, then committed, if not nil), so that
// waiting for the disk overlaps writing the next file. It returns the tensor
// bytes written.
func writeFiles(ctx context.Context, files []*outFile, jobs int, progress func(int64), committed func(*outFile) error) (int64, error) {
	jobs = jobsOr(jobs)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, gctx := errgroup.WithContext(cctx)
	g.SetLimit(jobs)
	var commits errgroup.Group
	commits.SetLimit(commitsPerJob * jobs)
	var total atomic.Int64
	for _, of := range files {
		g.Go(func() error {
			n, commit, err := writeFile(gctx, of, progress)
			if err != nil {
				return err
			}
			commits.Go(func() error {
				err := commit()
				if err == nil && committed != nil {
					err = committed(of)
				}
				if err != nil {
					cancel(err)
					return err
				}
				total.Add(n)
				return nil
			})
			return nil
		})
	}
	errWrite, errCommit := g.Wait(), commits.Wait()
	if errCommit != nil {
		return total.Load(), errCommit
	}
	return total.Load(), errWrite
}

// writeFile writes one output file under a temporary name, following its
// planned steps, and returns the tensor bytes written and how to commit it
// (sync and rename). On error nothing is left behind.
func writeFile(ctx context.Context, of *outFile, progress func(int64)) (int64, func() error, error) {
	if of.verbatim != nil {
		commit, err := copyVerbatim(of)
		if err != nil {
			return 0, nil, err
		}
		n := of.verbatim.Size - of.verbatim.DataStart
		if progress != nil {
			progress(n)
		}
		return n, commit, nil
	}
	lay, err := of.layout()
	if err != nil {
		return 0, nil, err
	}
	w, err := safetensors.Create(of.path, lay)
	if err != nil {
		return 0, nil, err
	}
	total, err := writeSteps(ctx, w, lay, of, progress)
	if err != nil {
		w.Abort()
		return total, nil, err
	}
	return total, w.Commit, nil
}

// writeSteps carries out a file's steps.
func writeSteps(ctx context.Context, w *safetensors.Writer, lay *safetensors.Layout, of *outFile, progress func(int64)) (int64, error) {
	bp := windowPool.Get().(*[]byte)
	defer windowPool.Put(bp)
	var total int64
	for _, st := range of.steps {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		if st.first < 0 || st.last < st.first || st.last >= len(lay.Tensors) || st.tensor >= len(of.tensors) {
			return total, fmt.Errorf("file %s: step [%d, %d] outside its %d tensors", of.path, st.first, st.last, len(lay.Tensors))
		}
		var n int64
		if st.tensor < 0 {
			first, last := lay.Tensors[st.first].Name, lay.Tensors[st.last].Name
			tw, err := w.Span(first, last)
			if err != nil {
				return total, err
			}
			if n, err = tw.ReadFrom(io.NewSectionReader(st.src.ReaderAt(), st.off, st.n)); err != nil {
				return total, fmt.Errorf("file %s: copy %s…%s from %s: %w", of.path, first, last, st.src.Path, err)
			}
		} else {
			t := of.tensors[st.tensor]
			tw, err := w.Tensor(t.spec.Name)
			if err != nil {
				return total, err
			}
			if err := writeTensor(ctx, tw, t, *bp); err != nil {
				return total, fmt.Errorf("file %s: tensor %s: %w", of.path, t.spec.Name, err)
			}
			n = lay.Tensors[st.first].Size()
		}
		total += n
		if progress != nil {
			progress(n)
		}
	}
	return total, nil
}

// writeTensor copies one tensor (or slice) into its writer.
func writeTensor(ctx context.Context, tw *safetensors.TensorWriter, t outTensor, buf []byte) error {
	if t.pack != nil {
		b, err := t.pack.bytes()
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}
	size, _ := safetensors.ByteSize(t.spec.DType, t.spec.Shape)
	if t.held != HeldSlice {
		_, err := tw.ReadFrom(t.src.section(0, size))
		return err
	}
	return copySlice(ctx, tw, t, buf)
}

// copySlice copies the slice [start, stop) along axis. Each outer row holds
// one contiguous run; long runs are copied in the kernel, short ones are
// gathered from windows of whole rows.
func copySlice(ctx context.Context, tw *safetensors.TensorWriter, t outTensor, buf []byte) error {
	dt := t.spec.DType
	outer, _ := safetensors.NumElements(t.shape[:t.axis])
	inner, _ := safetensors.NumElements(t.shape[t.axis+1:])
	innerB := inner * dt.Bits() / 8
	rowB := t.shape[t.axis] * innerB
	run := (t.stop - t.start) * innerB
	if outer == 1 || run >= directCopyMin {
		return forRuns(t.shape, dt, t.axis, t.start, t.stop, func(off, n int64) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			_, err := tw.ReadFrom(t.src.section(off, n))
			return err
		})
	}
	in, out := buf[:len(buf)/2], buf[len(buf)/2:]
	rows := max(int64(len(in))/rowB, 1)
	for o := int64(0); o < outer; o += rows {
		if err := ctx.Err(); err != nil {
			return err
		}
		w := min(rows, outer-o)
		var got []byte
		if rowB*w <= int64(len(in)) {
			win := in[:rowB*w]
			if err := readFull(t.src, win, o*rowB); err != nil {
				return err
			}
			got = out[:0]
			for k := int64(0); k < w; k++ {
				a := k*rowB + t.start*innerB
				got = append(got, win[a:a+run]...)
			}
		} else { // one row exceeds the window: read just the run
			got = out[:run]
			if err := readFull(t.src, got, o*rowB+t.start*innerB); err != nil {
				return err
			}
		}
		if _, err := tw.Write(got); err != nil {
			return err
		}
	}
	return nil
}

// readFull fills p from r at off or fails.
func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// finishRank writes the rank's index, side files and, last, its manifest
// (a directory with layout.json is complete).
func finishRank(src *Source, plan *Plan, ro *rankOut) error {
	idx := &safetensors.Index{WeightMap: map[string]string{}}
	for _, of := range ro.files {
		for _, t := range of.tensors {
			n, _ := safetensors.ByteSize(t.spec.DType, t.spec.Shape)
			idx.TotalSize += n
			idx.WeightMap[t.spec.Name] = of.name
		}
	}
	if err := safetensors.WriteIndex(filepath.Join(ro.dir, safetensors.IndexName), idx); err != nil {
		return err
	}
	for name, b := range src.aux {
		if name == model.ConfigName && plan.Layout.Stages() > 1 {
			var err error
			if b, err = stageConfig(b, plan, ro.man); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(src.Root, name), err)
			}
		}
		if err := atomicfile.WriteFile(filepath.Join(ro.dir, name), b, 0o644); err != nil {
			return err
		}
	}
	b, err := ro.man.marshal()
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(ro.dir, ManifestName), b, 0o644)
}

// stageConfig annotates config.json with the stage's layer range.
func stageConfig(cfg []byte, plan *Plan, m *Manifest) ([]byte, error) {
	obj, err := decodeJSONObject(cfg)
	if err != nil {
		return nil, err
	}
	obj[stageKey] = map[string]any{
		"layout":    plan.Layout.Name,
		"stage":     m.Stage,
		"stages":    m.Stages,
		"layers":    m.Layers,
		"partition": plan.Layout.Partition,
	}
	return marshalJSON(obj)
}
