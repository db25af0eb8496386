package convert

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Limits of the executor. Per job it holds one source tile (≤ TileBytes), one
// band of FP8 output (128 × K bytes), a tile of FP8 codes when a band is split,
// the tensor's block scales and a copy-and-hash buffer: about 25 MiB for K3's
// widest matrix, whatever the tensor's or checkpoint's size; plus a small
// shard's held codes (≤ MaxHeldCodes).
const (
	// TileBytes bounds the source bytes read at once for quantization: a
	// 128-row band, split into column tiles (multiples of 128 columns) when a
	// band is larger.
	TileBytes = 8 << 20
	// MaxJobs bounds --jobs.
	MaxJobs = 256
	// MaxScaleBlocks bounds one tensor's scale count (4 bytes each) so that a
	// corrupt shape cannot make the executor allocate without bound; K3's
	// largest has 33,792/128 × 7,168/128 = 14,784.
	MaxScaleBlocks = 1 << 24
)

// Progress receives the executor's progress in bytes of work (source bytes
// read plus output bytes hashed). Implementations must be safe for concurrent use.
type Progress interface {
	// Start is called once with the total before any work.
	Start(total int64)
	// Add reports n more bytes done.
	Add(n int64)
}

// ExecOptions control how a plan is carried out (not what it produces).
type ExecOptions struct {
	// Jobs is how many output files are produced at once (default 1).
	Jobs int
	// Resume skips files already finished under this plan whose size and
	// sha256 still match their record.
	Resume bool
	// Worker and Workers select this process's slice of the files (--worker
	// I/N); Workers 0 means a single worker.
	Worker, Workers int
	// Progress, if set, is told about the work as it happens.
	Progress Progress
}

// Result reports what Execute did.
type Result struct {
	// Written and Skipped name the files this worker produced or found done.
	Written, Skipped []string
	// Finalized is true when this worker found every file done and wrote the
	// index, configs and manifest; Manifest is then set.
	Finalized bool
	Manifest  *Manifest
	// ZeroedNonFinite counts source values replaced by 0 under NonFiniteZero.
	ZeroedNonFinite int64
}

// Execute carries out this worker's slice of the plan into dst, then, if
// every file of the plan is done, finalizes the conversion. On any error the
// files in progress are removed (never left under their final names) and the
// error names the file and tensor.
func Execute(ctx context.Context, p *Plan, dst string, eo ExecOptions) (*Result, error) {
	jobs := eo.Jobs
	if jobs == 0 {
		jobs = 1
	}
	if jobs < 1 || jobs > MaxJobs {
		return nil, fmt.Errorf("convert: jobs %d outside [1, %d]", jobs, MaxJobs)
	}
	workers := max(eo.Workers, 1)
	units, err := p.Slice(eo.Worker, workers)
	if err != nil {
		return nil, err
	}
	if err := prepareDest(p, dst); err != nil {
		return nil, err
	}
	if err := removeOwnTemps(dst, units); err != nil {
		return nil, err
	}
	var manifest *Manifest
	if eo.Resume {
		if m, err := ReadManifest(dst); err == nil {
			manifest = m
		}
	}
	prog := eo.Progress
	if prog == nil {
		prog = noProgress{}
	}
	var total int64
	for _, u := range units {
		total += u.Work
	}
	prog.Start(total)

	res := &Result{}
	done := make([]int8, len(units)) // 1 written, 2 skipped
	var zeroed atomic.Int64
	pool := make(chan *scratch, jobs)
	for range jobs {
		pool <- &scratch{}
	}
	// Two stages: jobs write and hash files' data (CPU and page cache),
	// committers sync, rename and record them, so that waiting for the disk
	// in fsync overlaps the next file's work. Commits in flight are bounded.
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, gctx := errgroup.WithContext(cctx)
	g.SetLimit(jobs)
	var commits errgroup.Group
	commits.SetLimit(commitsPerJob * jobs)
	for i, u := range units {
		g.Go(func() error {
			s := <-pool
			if eo.Resume {
				if ok, err := s.resumeUnit(gctx, p, dst, u, manifest, prog); err != nil {
					pool <- s
					return err
				} else if ok {
					done[i] = 2
					pool <- s
					return nil
				}
			}
			path := filepath.Join(dst, filepath.FromSlash(u.Name))
			n, rec, commit, err := s.produce(gctx, p, path, u, prog)
			pool <- s
			zeroed.Add(n)
			if err != nil {
				return err
			}
			commits.Go(func() error {
				if err := commitUnit(p, dst, u, rec, commit); err != nil {
					cancel(err)
					return err
				}
				done[i] = 1
				return nil
			})
			return nil
		})
	}
	errWrite, errCommit := g.Wait(), commits.Wait()
	if errCommit != nil {
		return nil, errCommit
	}
	if errWrite != nil {
		return nil, errWrite
	}
	for i, u := range units {
		if done[i] == 1 {
			res.Written = append(res.Written, u.Name)
		} else {
			res.Skipped = append(res.Skipped, u.Name)
		}
	}
	res.ZeroedNonFinite = zeroed.Load()
	if allDone(dst, p) {
		m, err := Finalize(dst)
		if err != nil {
			// Another worker may have finalized between our check and now.
			if m2, err2 := ReadManifest(dst); err2 == nil && m2.Plan == p.ID {
				m, err = m2, nil
			} else {
				return nil, err
			}
		}
		res.Finalized, res.Manifest = true, m
	}
	return res, nil
}

type noProgress struct{}

func (noProgress) Start(int64) {}
func (noProgress) Add(int64)   {}

// scratch is one job's reusable buffers.
type scratch struct {
	hash   []byte    // hashing and aux copies
	src    []byte    // one source tile
	band   []byte    // one band of FP8 output, 128 × K
	tile   []byte    // FP8 codes of one tile when a band is split
	scales []float32 // every block scale of the tensor
	sbytes []byte    // the scales as little-endian fp32
	held   []byte    // a file's FP8 codes between its scale and code steps (≤ MaxHeldCodes)
}

// resumeUnit checks a unit finished earlier under this plan: it is skipped
// when its file still has the recorded size and sha256.
func (s *scratch) resumeUnit(ctx context.Context, p *Plan, dst string, u Unit, m *Manifest, prog Progress) (bool, error) {
	rec, ok := finishedRecord(dst, p.ID, u.Name, m)
	if !ok {
		return false, nil
	}
	path := filepath.Join(dst, filepath.FromSlash(u.Name))
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != rec.Size {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.hash = bufs.Grow(s.hash, hashBufSize)
	got, err := hashFile(path, s.hash, prog.Add)
	if err != nil {
		return false, err
	}
	if got.SHA256 != rec.SHA256 {
		return false, nil
	}
	prog.Add(u.Work - got.Size)
	// Re-record it, so Finalize sees it even when it came from a manifest.
	return true, writeRecord(dst, doneRecord{Plan: p.ID, FileRecord: rec})
}

// produce writes one unit's data under a temporary name, hashing it on the
// way, and returns how to commit it (sync and rename), its record and how
// many non-finite values it zeroed. On error nothing is left behind.
func (s *scratch) produce(ctx context.Context, p *Plan, path string, u Unit, prog Progress) (int64, FileRecord, func() error, error) {
	switch u.Kind {
	case UnitShard:
		return s.writeShard(ctx, p, path, u.File, prog)
	default:
		rec, c, err := s.copyAux(ctx, filepath.Join(p.SrcRoot, filepath.FromSlash(u.Name)), path, u.Size, prog)
		return 0, rec, c, err
	}
}

// commitUnit syncs and renames a written unit and records it as done.
func commitUnit(p *Plan, dst string, u Unit, rec FileRecord, commit func() error) error {
	if err := commit(); err != nil {
		return err
	}
	rec.Name = u.Name
	if rec.Size != u.Size {
		return fmt.Errorf("file %s: wrote %d bytes, planned %d", filepath.Join(dst, filepath.FromSlash(u.Name)), rec.Size, u.Size)
	}
	return writeRecord(dst, doneRecord{Plan: p.ID, FileRecord: rec})
}

// commitsPerJob bounds files waiting for the disk per job: enough that
// fsyncs overlap, few enough that an interrupted run has little to redo.
const commitsPerJob = 4

// copyAux copies a side file, which must still hold the planned size: one
// that changed since planning is an error and never reaches its final name.
func (s *scratch) copyAux(ctx context.Context, from, to string, want int64, prog Progress) (FileRecord, func() error, error) {
	if err := ctx.Err(); err != nil {
		return FileRecord{}, nil, err
	}
	in, err := fsx.Open(from)
	if err != nil {
		return FileRecord{}, nil, fmt.Errorf("copy %s: %w", from, err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return FileRecord{}, nil, fmt.Errorf("copy %s: %w", to, err)
	}
	out, err := atomicfile.Create(to)
	if err != nil {
		return FileRecord{}, nil, fmt.Errorf("copy %s: %w", to, err)
	}
	h := sha256.New()
	s.hash = bufs.Grow(s.hash, hashBufSize)
	n, err := io.CopyBuffer(io.MultiWriter(out.File, h), in, s.hash)
	prog.Add(2 * n)
	if err == nil && n != want {
		err = fmt.Errorf("%w: %d bytes, planned %d (did the source change?)", ErrChanged, n, want)
	}
	if err != nil {
		out.Abort()
		return FileRecord{}, nil, fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	rec := FileRecord{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
	return rec, func() error {
		if err := out.Commit(); err != nil {
			return fmt.Errorf("copy %s: %w", to, err)
		}
		return nil
	}, nil
}

// fileHash is the sha256 of an output file taken as the file is written, so
// that the file is never read back: bytes must arrive in file order, which
// the plan's steps guarantee and this checks.
type fileHash struct {
	h    hash.Hash
	off  int64 // how many bytes were hashed: the offset of the next one
	prog Progress
}

func (f *fileHash) write(off int64, p []byte) error {
	if off != f.off {
		return fmt.Errorf("bytes at offset %d written while hashing at %d: the plan's steps are out of file order", off, f.off)
	}
	f.h.Write(p)
	f.off += int64(len(p))
	f.prog.Add(int64(len(p)))
	return nil
}

// hashedWriter writes a tensor's bytes and hashes them.
type hashedWriter struct {
	tw  *safetensors.TensorWriter
	fh  *fileHash
	off int64
}

func (w *hashedWriter) Write(p []byte) (int, error) {
	if err := w.fh.write(w.off, p); err != nil {
		return 0, err
	}
	n, err := w.tw.Write(p)
	w.off += int64(n)
	return n, err
}

// writeShard writes one output shard by following its planned steps, which
// go in file order: the header, then copy runs and quantized tensors as they
// lie in the file. It returns the file's record (size and sha256).
func (s *scratch) writeShard(ctx context.Context, p *Plan, path string, fp *FilePlan, prog Progress) (int64, FileRecord, func() error, error) {
	l, outs, err := fp.Layout()
	if err != nil {
		return 0, FileRecord{}, nil, err
	}
	w, err := safetensors.Create(path, l)
	if err != nil {
		return 0, FileRecord{}, nil, err
	}
	fh := &fileHash{h: sha256.New(), prog: prog}
	err = fh.write(0, l.Header) // written by Create
	var zeroed int64
	if err == nil {
		zeroed, err = s.runSteps(ctx, p, w, l, path, fp, outs, fh)
	}
	if err == nil && fh.off != l.Size {
		err = fmt.Errorf("file %s: the plan's steps wrote %d of %d bytes", path, fh.off, l.Size)
	}
	if err != nil {
		w.Abort()
		return zeroed, FileRecord{}, nil, err
	}
	return zeroed, FileRecord{Size: l.Size, SHA256: hex.EncodeToString(fh.h.Sum(nil))}, w.Commit, nil
}

// runSteps carries out a shard's steps.
func (s *scratch) runSteps(ctx context.Context, p *Plan, w *safetensors.Writer, l *safetensors.Layout, path string,
	fp *FilePlan, outs []OutputTensor, fh *fileHash) (int64, error) {
	sf := fp.Source
	var zeroed int64
	// The scales of each weight as its StepScales made them: a StepCodes
	// that quantizes again must get the same (else the source changed
	// meanwhile). Held codes: where each weight's lie in s.held.
	scaleSums := map[int][sha256.Size]byte{}
	heldAt := map[int][2]int{}
	var held int64
	for _, st := range fp.Steps {
		if st.Kind == StepCodes && st.HoldCodes && st.First < len(l.Tensors) {
			held += l.Tensors[st.First].Size()
		}
	}
	if held > MaxHeldCodes {
		return 0, fmt.Errorf("file %s: the plan holds %d bytes of codes, over %d", path, held, MaxHeldCodes)
	}
	s.held = bufs.Grow(s.held, int(held))[:0]
	for _, st := range fp.Steps {
		if err := ctx.Err(); err != nil {
			return zeroed, err
		}
		if min(st.First, st.Last) < 0 || max(st.First, st.Last) >= len(outs) || (st.Kind == StepCopy && st.First > st.Last) {
			return zeroed, fmt.Errorf("file %s: step %s [%d, %d] outside the file's %d tensors", path, st.Kind, st.First, st.Last, len(outs))
		}
		off := l.DataStart + l.Tensors[st.First].Begin
		switch st.Kind {
		case StepCopy:
			tw, err := w.Span(outs[st.First].Name, outs[st.Last].Name)
			if err != nil {
				return zeroed, err
			}
			if err := s.copyRun(ctx, sf, tw, st, off, fh); err != nil {
				return zeroed, fmt.Errorf("file %s: copy %s…%s from %s: %w", path, outs[st.First].Name, outs[st.Last].Name, filepath.Join(p.SrcRoot, sf.Path), err)
			}
		case StepScales, StepCodes:
			weight := st.First
			if st.Kind == StepScales {
				weight = st.Last
			}
			o := outs[weight]
			src, ok := sf.Lookup(o.Source)
			if !ok {
				return zeroed, fmt.Errorf("file %s: tensor %s: %w in the source", sf.Path, o.Source, safetensors.ErrNotFound)
			}
			tw, err := w.Tensor(outs[st.First].Name)
			if err != nil {
				return zeroed, err
			}
			hw := &hashedWriter{tw: tw, fh: fh, off: off}
			if st.Kind == StepCodes && st.HoldCodes {
				at, ok := heldAt[weight]
				if !ok {
					return zeroed, fmt.Errorf("file %s: tensor %s: no codes held for it", path, o.Name)
				}
				if _, err := hw.Write(s.held[at[0]:at[1]]); err != nil {
					return zeroed, err
				}
				continue
			}
			var emit func([]byte) error
			switch {
			case st.Kind == StepCodes:
				emit = func(b []byte) error { _, err := hw.Write(b); return err }
			case st.HoldCodes:
				emit = func(b []byte) error {
					if len(s.held)+len(b) > cap(s.held) {
						return fmt.Errorf("codes held over the planned %d bytes", cap(s.held))
					}
					s.held = append(s.held, b...)
					return nil
				}
			}
			start := len(s.held)
			n, err := s.quantize(ctx, sf, src, p.Options, emit, fh.prog)
			if st.Kind == StepScales && st.HoldCodes {
				heldAt[weight] = [2]int{start, len(s.held)}
			}
			if err == nil {
				sum := sha256.Sum256(s.sbytes)
				switch {
				case st.Kind == StepScales:
					scaleSums[weight] = sum
					_, err = hw.Write(s.sbytes)
					if st.HoldCodes {
						zeroed += n
					}
				case scaleSums[weight] != sum:
					err = fmt.Errorf("block scales differ between the two passes over it: was the source modified during the conversion?")
				default:
					zeroed += n
				}
			}
			if err != nil {
				return zeroed, fmt.Errorf("file %s: tensor %s: %w", filepath.Join(p.SrcRoot, sf.Path), o.Source, err)
			}
		default:
			return zeroed, fmt.Errorf("file %s: unknown step %s", path, st.Kind)
		}
	}
	return zeroed, nil
}

// copyChunk is how much of a copy run is hashed and copied at a time.
const copyChunk = 4 << 20

// copyRun copies a run of source bytes into its span, chunk by chunk: each
// chunk is read once to be hashed, then moved by the kernel
// (copy_file_range, which lets filesystems that can share extents or copy
// server-side do so) from the page cache the read just filled.
func (s *scratch) copyRun(ctx context.Context, sf *safetensors.File, tw *safetensors.TensorWriter, st Step, off int64, fh *fileHash) error {
	s.hash = bufs.Grow(s.hash, copyChunk)
	for done := int64(0); done < st.Len; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(copyChunk, st.Len-done)
		buf := s.hash[:n]
		if m, err := sf.ReaderAt().ReadAt(buf, st.Src+done); m < len(buf) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read at %d: %w", st.Src+done, err)
		}
		if err := fh.write(off+done, buf); err != nil {
			return err
		}
		m, err := tw.ReadFrom(io.NewSectionReader(sf.ReaderAt(), st.Src+done, n))
		fh.prog.Add(m)
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

var quantElems = map[safetensors.DType]quant.Elem{safetensors.BF16: quant.BF16, safetensors.F16: quant.F16, safetensors.F32: quant.F32}

// tileCols is the widest column tile (a multiple of 128) whose 128-row band of
// elements of size esz fits TileBytes, or k when the whole band fits.
func tileCols(k, esz int) int {
	if BlockSize*k*esz <= TileBytes {
		return k
	}
	return max(BlockSize, TileBytes/(BlockSize*esz)/BlockSize*BlockSize)
}

// quantize streams one [N, K] weight through the quantizer in bands of 128
// rows (split into column tiles when a band is wider than TileBytes), hands
// each band of FP8 codes to emit (when not nil) and leaves the block scales,
// as little-endian fp32, in s.sbytes. It returns how many non-finite values
// it zeroed.
func (s *scratch) quantize(ctx context.Context, f *safetensors.File, t safetensors.TensorInfo, opts Options,
	emit func([]byte) error, prog Progress) (int64, error) {
	elem, ok := quantElems[t.DType]
	if !ok || len(t.Shape) != 2 {
		return 0, fmt.Errorf("%w: %s %v", ErrNotQuantizable, t.DType, t.Shape)
	}
	if t.Shape[1] > quant.MaxK {
		return 0, fmt.Errorf("%w: K = %d over %d", ErrNotQuantizable, t.Shape[1], quant.MaxK)
	}
	n, k, esz := t.Shape[0], int(t.Shape[1]), elem.Size()
	nb, kb := Blocks(n), Blocks(int64(k))
	if nb*kb > MaxScaleBlocks {
		return 0, fmt.Errorf("%w: %d scale blocks, over %d", ErrNotQuantizable, nb*kb, MaxScaleBlocks)
	}
	sec := f.Section(t)
	rowBytes := int64(k) * int64(esz)
	wcols := tileCols(k, esz)
	s.src = bufs.Grow(s.src, BlockSize*wcols*esz)
	s.band = bufs.Grow(s.band, BlockSize*k)
	if wcols < k {
		s.tile = bufs.Grow(s.tile, BlockSize*wcols)
	}
	s.scales = bufs.Grow(s.scales, int(nb*kb))
	quantizers := map[int]*quant.Quantizer{}
	var zeroed int64
	for b := range nb {
		if err := ctx.Err(); err != nil {
			return zeroed, err
		}
		rows := int(min(BlockSize, n-b*BlockSize))
		for c0 := 0; c0 < k; c0 += wcols {
			w := min(wcols, k-c0)
			src := s.src[:rows*w*esz]
			if w == k { // the band is contiguous
				if _, err := sec.ReadAt(src, b*BlockSize*rowBytes); err != nil {
					return zeroed, fmt.Errorf("read rows %d..%d: %w", b*BlockSize, b*BlockSize+int64(rows), err)
				}
			} else {
				for r := range rows {
					off := (b*BlockSize+int64(r))*rowBytes + int64(c0*esz)
					if _, err := sec.ReadAt(src[r*w*esz:(r+1)*w*esz], off); err != nil {
						return zeroed, fmt.Errorf("read row %d: %w", b*BlockSize+int64(r), err)
					}
				}
			}
			q := quantizers[w]
			if q == nil {
				q = quant.NewQuantizer(w, elem, opts.ScaleFmt)
				quantizers[w] = q
			}
			dst := s.band[:rows*k]
			if w != k {
				dst = s.tile[:rows*w]
			}
			scales := s.scales[b*kb+int64(c0/BlockSize):]
			err := q.QuantizeBandAt(int(b), dst, scales, src, rows)
			var nf *quant.NonFiniteError
			if errors.As(err, &nf) {
				if opts.NonFinite != NonFiniteZero {
					return zeroed, fmt.Errorf("%w: %s %#x at row %d, column %d (128×128 block %d,%d); pass --nonfinite zero to replace such values by 0",
						ErrNonFinite, nf.Elem, nf.Bits, nf.Row, c0+nf.Col, b, c0/BlockSize+nf.ColBlock)
				}
				zeroed += zeroNonFinite(src, elem)
				err = q.QuantizeBandAt(int(b), dst, scales, src, rows)
			}
			if err != nil {
				return zeroed, err
			}
			if w != k {
				for r := range rows {
					copy(s.band[r*k+c0:r*k+c0+w], dst[r*w:(r+1)*w])
				}
			}
			prog.Add(int64(len(src)))
		}
		if emit != nil {
			if err := emit(s.band[:rows*k]); err != nil {
				return zeroed, err
			}
		}
	}
	s.sbytes = bufs.Grow(s.sbytes, 4*len(s.scales))
	for i, v := range s.scales {
		binary.LittleEndian.PutUint32(s.sbytes[4*i:], math.Float32bits(v))
	}
	return zeroed, nil
}

// zeroNonFinite replaces every Inf or NaN element of src by +0 and counts them.
func zeroNonFinite(src []byte, e quant.Elem) int64 {
	var n int64
	switch e {
	case quant.F32:
		for i := 0; i+4 <= len(src); i += 4 {
			if binary.LittleEndian.Uint32(src[i:])&0x7F800000 == 0x7F800000 {
				binary.LittleEndian.PutUint32(src[i:], 0)
				n++
			}
		}
	case quant.BF16, quant.F16:
		expMask := uint16(0x7F80)
		if e == quant.F16 {
			expMask = 0x7C00
		}
		for i := 0; i+2 <= len(src); i += 2 {
			if binary.LittleEndian.Uint16(src[i:])&expMask == expMask {
				binary.LittleEndian.PutUint16(src[i:], 0)
				n++
			}
		}
	}
	return n
}
