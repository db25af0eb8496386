package convert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// scratch is one job's reusable buffers.
type scratch struct {
	hash   []byte    // hashing and aux copies
	src    []byte    // one source tile
	band   []byte    // one band of FP8 output, 128 × K
	tile   []byte    // FP8 codes of one tile when a band is split
	scales []float32 // every block scale of the tensor
	sbytes []byte    // the scales as little-endian fp32
	held   []byte    // a file's FP8 codes between its scale and code steps (≤ MaxHeldCodes)
	cs     castScratch
	// lastZeroScale is how many blocks the last quantize gave scale 0.
	lastZeroScale int64

	conns int         // parallel requests of a remote source's fetch
	net   *netCounter // a remote source's traffic, shared by the jobs
}

// copyAux copies a side file, which must still be the file planned (same
// size and times, links still inside the source): one that changed is an
// error and never reaches its final name. The copy keeps the source's
// permission bits.
func (s *scratch) copyAux(ctx context.Context, root string, a *AuxFile, to string, prog Progress) (FileRecord, func() error, error) {
	if err := ctx.Err(); err != nil {
		return FileRecord{}, nil, err
	}
	from := filepath.Join(root, filepath.FromSlash(a.Name))
	r, err := fsx.NewRoot(root)
	if err != nil {
		return FileRecord{}, nil, fmt.Errorf("copy %s: %w", from, err)
	}
	real, err := r.Resolve(a.Name)
	if err != nil {
		return FileRecord{}, nil, fmt.Errorf("copy %s: %w", from, err)
	}
	in, fi, err := openRegular(real)
	if err != nil {
		return FileRecord{}, nil, fmt.Errorf("copy %s: %w", from, err)
	}
	defer in.Close()
	if err := a.stamp.check(stampInfo(fi), from); err != nil {
		return FileRecord{}, nil, err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return FileRecord{}, nil, fmt.Errorf("copy %s: %w", to, err)
	}
	out, err := atomicfile.Create(to)
	if err != nil {
		return FileRecord{}, nil, fmt.Errorf("copy %s: %w", to, err)
	}
	h := sha256.New()
	s.hash = bufs.Grow(s.hash, hashBufSize)
	// What is hashed is what is written: both come from the one read.
	n, err := io.CopyBuffer(io.MultiWriter(out.File, h), in, s.hash)
	prog.Add(2 * n)
	if err == nil && n != a.Size {
		err = fmt.Errorf("%w: %d bytes, planned %d (did the source change?)", ErrChanged, n, a.Size)
	}
	if err == nil && a.Mode != 0 {
		err = out.Chmod(a.Mode)
	}
	if err == nil {
		err = checkStampNow(in, a.stamp, from)
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

// checkStampNow compares an open file's stamp with the planned one.
func checkStampNow(r io.ReaderAt, planned fileStamp, path string) error {
	now, err := stampOf(r)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return planned.check(now, path)
}

// checkSource makes sure a source shard is still what it was planned from:
// the same size and times, and the same header bytes.
func checkSource(root string, fp *FilePlan) error {
	path := filepath.Join(root, fp.Source.Path)
	if err := checkStampNow(fp.Source.ReaderAt(), fp.stamp, path); err != nil {
		return err
	}
	sum, err := headerSum(fp.Source)
	if err != nil {
		return fmt.Errorf("file %s: %w", path, err)
	}
	if sum != fp.SourceHeader {
		return fmt.Errorf("%w: file %s: its header differs from the one the plan was made from", ErrChanged, path)
	}
	return nil
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
// lie in the file. It checks before and after that the source is the file
// planned, and returns the file's record (size and sha256).
func (s *scratch) writeShard(ctx context.Context, p *Plan, path string, fp *FilePlan, prog Progress) (int64, FileRecord, func() error, error) {
	if p.remote == nil { // a remote file is checked by every response (size, ETag)
		if err := checkSource(p.SrcRoot, fp); err != nil {
			return 0, FileRecord{}, nil, err
		}
	}
	l := fp.Layout
	w, err := safetensors.Create(path, l)
	if err != nil {
		return 0, FileRecord{}, nil, err
	}
	fh := &fileHash{h: sha256.New(), prog: prog}
	err = fh.write(0, l.Header) // written by Create
	var zeroed int64
	if err == nil {
		ra, done := s.sourceReader(ctx, p, fp)
		zeroed, err = s.runSteps(ctx, p, w, path, fp, fh, ra)
		if derr := done(); err == nil && derr != nil {
			err = fmt.Errorf("file %s: read %s: %w", path, fp.Source.Path, derr)
		}
	}
	if err == nil && fh.off != l.Size {
		err = fmt.Errorf("file %s: the plan's steps wrote %d of %d bytes", path, fh.off, l.Size)
	}
	if err == nil {
		// Bytes copied in the kernel were hashed from a read of their own:
		// a source unchanged from start to end makes the two the same.
		err = checkStampNow(fp.Source.ReaderAt(), fp.stamp, filepath.Join(p.SrcRoot, fp.Source.Path))
	}
	if err != nil {
		w.Abort()
		return zeroed, FileRecord{}, nil, err
	}
	return zeroed, FileRecord{Size: l.Size, SHA256: hex.EncodeToString(fh.h.Sum(nil))}, w.Commit, nil
}

// runSteps carries out a shard's steps.
func (s *scratch) runSteps(ctx context.Context, p *Plan, w *safetensors.Writer, path string, fp *FilePlan, fh *fileHash, ra io.ReaderAt) (int64, error) {
	sf, l := fp.Source, fp.Layout
	srcPath := filepath.Join(p.SrcRoot, sf.Path)
	var zeroed int64
	// The scales of each weight as its StepScales made them: a StepCodes
	// that quantizes again must get the same (else the source changed
	// meanwhile). Held codes: where each weight's lie in s.held.
	scaleSums := map[int][sha256.Size]byte{}
	heldAt := map[int][2]int{}
	var held int64
	for _, st := range fp.Steps {
		if st.Kind == StepCodes && st.HoldCodes && st.First >= 0 && st.First < len(l.Tensors) {
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
		if min(st.First, st.Last) < 0 || max(st.First, st.Last) >= len(l.Tensors) || (st.Kind == StepCopy && st.First > st.Last) {
			return zeroed, fmt.Errorf("file %s: step %s [%d, %d] outside the file's %d tensors", path, st.Kind, st.First, st.Last, len(l.Tensors))
		}
		first, last := l.Tensors[st.First].Name, l.Tensors[st.Last].Name
		off := l.DataStart + l.Tensors[st.First].Begin
		switch st.Kind {
		case StepCopy:
			tw, err := w.Span(first, last)
			if err != nil {
				return zeroed, err
			}
			if err := s.copyRun(ctx, ra, p.remote == nil, tw, st, off, fh); err != nil {
				return zeroed, fmt.Errorf("file %s: copy %s…%s from %s: %w", path, first, last, srcPath, err)
			}
		case StepScales, StepCodes:
			weight := st.First
			if st.Kind == StepScales {
				weight = st.Last
			}
			tw, err := w.Tensor(first)
			if err != nil {
				return zeroed, err
			}
			hw := &hashedWriter{tw: tw, fh: fh, off: off}
			if st.Kind == StepCodes && st.HoldCodes {
				at, ok := heldAt[weight]
				if !ok {
					return zeroed, fmt.Errorf("file %s: tensor %s: no codes held for it", path, first)
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
			n, err := s.quantize(ctx, ra, sf, st.Source, p.Options, emit, fh.prog)
			if st.Kind == StepScales && st.HoldCodes {
				heldAt[weight] = [2]int{start, len(s.held)}
			}
			if err == nil {
				sum := sha256.Sum256(s.sbytes)
				switch {
				case st.Kind == StepScales:
					scaleSums[weight] = sum
					s.cs.zeroScale += s.lastZeroScale
					_, err = hw.Write(s.sbytes)
					if st.HoldCodes {
						zeroed += n
					}
				case scaleSums[weight] != sum:
					err = fmt.Errorf("%w: block scales differ between the two passes over it", ErrChanged)
				default:
					zeroed += n
				}
			}
			if err != nil {
				return zeroed, fmt.Errorf("file %s: tensor %s: %w", srcPath, st.Source.Name, err)
			}
		case StepNVFP4:
			tw, err := w.Tensor(first)
			if err != nil {
				return zeroed, err
			}
			hw := &hashedWriter{tw: tw, fh: fh, off: off}
			if err := s.writeNVFP4(ctx, sf, st, func(b []byte) error { _, err := hw.Write(b); return err }, fh.prog); err != nil {
				return zeroed, fmt.Errorf("file %s: tensor %s: %w", srcPath, first, err)
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
// server-side do so) from the page cache the read just filled. The source's
// stamp, checked after the file, tells whether the two reads saw the same bytes.
// A source that is not a local file (remote) is read once: the chunk read
// for hashing is the one written.
func (s *scratch) copyRun(ctx context.Context, ra io.ReaderAt, local bool, tw *safetensors.TensorWriter, st Step, off int64, fh *fileHash) error {
	s.hash = bufs.Grow(s.hash, copyChunk)
	for done := int64(0); done < st.Len; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(copyChunk, st.Len-done)
		buf := s.hash[:n]
		if m, err := ra.ReadAt(buf, st.Src+done); m < len(buf) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read at %d: %w", st.Src+done, err)
		}
		if err := fh.write(off+done, buf); err != nil {
			return err
		}
		var m int64
		var err error
		if local {
			m, err = tw.ReadFrom(io.NewSectionReader(ra, st.Src+done, n))
		} else {
			var k int
			k, err = tw.Write(buf)
			m = int64(k)
		}
		fh.prog.Add(m)
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}
