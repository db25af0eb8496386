package convert

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// scratch is one job's reusable buffers.
type scratch struct {
	pool   *filewrite.Pool // output staging buffers, shared by the run's jobs
	src    []byte          // one source tile
	band   []byte          // one band of FP8 output, 128 × K
	tile   []byte          // FP8 codes of one tile when a band is split
	scales []float32       // every block scale of the tensor
	sbytes []byte          // the scales as little-endian fp32
	held   []byte          // a file's FP8 codes between its scale and code steps
	spill  *spill          // a remote file's codes between those steps, when not held
	cs     castScratch
	xs     xfScratch   // decode and pack steps
	fx     fp8xScratch // routed experts cast to block FP8
	// errs collects the error of each tensor the file quantizes; measure,
	// when set, is the accumulator the next quantize or NVFP4 code cast
	// fills (and clears).
	errs          errCollector
	measure       *quant.ErrStats
	lastZeroScale int64 // the blocks the last quantize gave scale 0

	out   *destination
	conns int         // parallel requests of a remote source's fetch
	net   *netCounter // a remote source's traffic, shared by the jobs
}

// copyAux copies a side file, which must still be the file planned: a local
// one of the same size and times, links inside the source, keeping its mode;
// a remote one of the listed size and version. One that changed is an error.
func (s *scratch) copyAux(ctx context.Context, p *Plan, a *auxFile, to string, prog meter) (fileRecord, commitFunc, error) {
	if err := ctx.Err(); err != nil {
		return fileRecord{}, nil, err
	}
	var in io.ReaderAt
	from := p.SrcRoot + a.Name
	if p.remote != nil {
		f, err := p.remote.Open(ctx, a.Name)
		if err != nil {
			return fileRecord{}, nil, fmt.Errorf("copy %s: %w", from, err)
		}
		if f.Size() != a.Size {
			return fileRecord{}, nil, fmt.Errorf("copy %s: %w: %d bytes, listed with %d", from, errChanged, f.Size(), a.Size)
		}
		in = f
	} else {
		from = filepath.Join(p.SrcRoot, filepath.FromSlash(a.Name))
		f, fi, err := openAux(p.SrcRoot, a.Name)
		if err != nil {
			return fileRecord{}, nil, fmt.Errorf("copy %s: %w", from, err)
		}
		defer f.Close()
		if err := checkStamp(a.stamp, fsx.StampOf(fi), from); err != nil {
			return fileRecord{}, nil, err
		}
		in = f
	}
	out, err := s.out.create(to, s.pool, prog.add)
	if err != nil {
		return fileRecord{}, nil, fmt.Errorf("copy %s: %w", to, err)
	}
	// What is hashed is what is written: both come from the one read.
	err = out.CopyFrom(in, 0, a.Size)
	prog.add(a.Size)
	if errors.Is(err, io.ErrUnexpectedEOF) && p.remote == nil {
		err = fmt.Errorf("%w: shorter than the planned %d bytes (did the source change?)", errChanged, a.Size)
	}
	if err == nil && p.remote == nil {
		var one [1]byte
		if n, _ := in.ReadAt(one[:], a.Size); n > 0 {
			err = fmt.Errorf("%w: longer than the planned %d bytes (did the source change?)", errChanged, a.Size)
		}
		if err == nil && a.Mode != 0 {
			err = out.Chmod(a.Mode)
		}
		if err == nil {
			err = checkStampNow(in, a.stamp, from)
		}
	}
	if err != nil {
		out.Abort()
		return fileRecord{}, nil, fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	out.Finish()
	return fileRecord{Size: a.Size}, commitHashed(out, "copy "+to), nil
}

// openAux opens side file name of root, resolving links inside root only.
func openAux(root, name string) (*os.File, os.FileInfo, error) {
	r, err := fsx.NewRoot(root)
	if err != nil {
		return nil, nil, err
	}
	real, err := r.Resolve(name)
	if err != nil {
		return nil, nil, err
	}
	return openRegular(real)
}

// checkSource makes sure a source shard is still what it was planned from:
// the same size and times, and the same header bytes.
func checkSource(root string, fp *filePlan) error {
	path := filepath.Join(root, fp.Source.Path)
	if err := checkStampNow(fp.Source.ReaderAt(), fp.stamp, path); err != nil {
		return err
	}
	sum, err := headerSum(fp.Source)
	if err != nil {
		return fmt.Errorf("file %s: %w", path, err)
	}
	if sum != fp.SourceHeader {
		return fmt.Errorf("%w: file %s: its header differs from the one the plan was made from", errChanged, path)
	}
	return nil
}

// writeShard writes one output shard by its steps, hashing it as written.
// It checks before and after that the source is the file planned, and
// returns how many non-finite values it zeroed, its record and its commit.
func (s *scratch) writeShard(ctx context.Context, p *Plan, path string, fp *filePlan, prog meter) (int64, fileRecord, commitFunc, error) {
	srcPath := filepath.Join(p.SrcRoot, fp.Source.Path)
	if p.remote == nil { // a remote file is checked by every response (size, ETag)
		if err := cmp.Or(checkSource(p.SrcRoot, fp), p.checkForeign(fp, true)); err != nil {
			return 0, fileRecord{}, nil, err
		}
	}
	l := fp.Layout
	header, err := l.HeaderBytes() // checked against the layout's DataStart
	if err != nil {
		return 0, fileRecord{}, nil, fmt.Errorf("file %s: %w", path, err)
	}
	f, err := s.out.create(path, s.pool, prog.add)
	if err != nil {
		return 0, fileRecord{}, nil, fmt.Errorf("file %s: %w", path, err)
	}
	_, err = f.Write(header)
	var zeroed int64
	s.errs.take(p.Options.classifier()) // nothing left from a file that failed
	if err == nil {
		ra, done := s.sourceReader(ctx, p, fp)
		zeroed, err = s.runSteps(ctx, p, f, path, fp, ra, prog)
		if serr := s.spill.remove(); err == nil && serr != nil {
			err = fmt.Errorf("file %s: spill: %w", path, serr)
		}
		s.spill = nil
		if derr := done(); err == nil && derr != nil {
			err = fmt.Errorf("file %s: read %s: %w", path, fp.Source.Path, derr)
		}
	}
	if err == nil && f.Offset() != l.Size {
		err = fmt.Errorf("file %s: the plan's steps wrote %d of %d bytes", path, f.Offset(), l.Size)
	}
	if err == nil { // unchanged from start to end: what was read is what was planned
		err = checkStampNow(fp.Source.ReaderAt(), fp.stamp, srcPath)
	}
	if err == nil && p.remote == nil {
		err = p.checkForeign(fp, false)
	}
	if err != nil {
		f.Abort()
		return zeroed, fileRecord{}, nil, err
	}
	f.Finish()
	return zeroed, fileRecord{Size: l.Size, Report: s.errs.take(p.Options.classifier())}, commitHashed(f, ""), nil
}

// commitFunc syncs and renames a written file and returns its sha256 once
// ready (the plan's record in DST) returns; on ready's error it removes it.
type commitFunc func(ready func() error) (sha256 string, err error)

// commitHashed commits f on a committer, so that the producer moves on
// without waiting for the disk; a failure is prefixed with what, if given.
func commitHashed(f *filewrite.File, what string) commitFunc {
	return func(ready func() error) (string, error) {
		if err := ready(); err != nil {
			f.Abort()
			return "", err
		}
		if err := f.Commit(); err != nil {
			if what != "" {
				err = fmt.Errorf("%s: %w", what, err)
			}
			return "", err
		}
		return f.SHA256(), nil
	}
}

// runSteps carries out a shard's steps. Each starts where the previous one
// ended (the file is written in order) and writes exactly its tensors' bytes.
func (s *scratch) runSteps(ctx context.Context, p *Plan, f *filewrite.File, path string, fp *filePlan, ra io.ReaderAt, prog meter) (int64, error) {
	sf, l := fp.Source, fp.Layout
	srcPath := filepath.Join(p.SrcRoot, sf.Path)
	var zeroed int64
	// The scales of each weight as its StepScales made them: a StepCodes
	// that quantizes again must get the same (else the source changed
	// meanwhile). codesAt: where each weight's held or spilled codes lie.
	scaleSums := map[int][sha256.Size]byte{}
	codesAt := map[int][2]int64{}
	var held int64
	for _, st := range fp.Steps {
		if st.Kind == stepCodes && st.HoldCodes {
			held += l.Tensors[st.First].Size()
		}
	}
	s.held = bufs.Grow(s.held, int(held))[:0]
	for _, st := range fp.Steps {
		if err := ctx.Err(); err != nil {
			return zeroed, err
		}
		first, last := l.Tensors[st.First].Name, l.Tensors[st.Last].Name
		off := l.DataStart + l.Tensors[st.First].Begin
		end := l.DataStart + l.Tensors[st.First].End
		// write refuses bytes past the step's tensors, so that a miscounted
		// step fails instead of corrupting a neighbour.
		write := func(b []byte) error {
			if over := f.Offset() + int64(len(b)) - end; over > 0 {
				return fmt.Errorf("%w: %d bytes past the tensor's end", safetensors.ErrWrite, over)
			}
			_, err := f.Write(b)
			return err
		}
		if f.Offset() != off {
			return zeroed, fmt.Errorf("file %s: step %s for %s starts at %d while the file is at %d: the plan's steps are out of file order", path, st.Kind, termtext.Name(first), off, f.Offset())
		}
		switch st.Kind {
		case stepCopy:
			if err := f.CopyFrom(ra, st.Src, st.Len); err != nil {
				return zeroed, fmt.Errorf("file %s: copy %s…%s from %s: %w", path, termtext.Name(first), termtext.Name(last), srcPath, err)
			}
			prog.add(st.Len)
		case stepScales, stepCodes:
			weight := st.First
			if st.Kind == stepScales {
				weight = st.Last
			}
			if at, ok := codesAt[weight]; st.Kind == stepCodes && (st.HoldCodes || st.SpillCodes) {
				if !ok || at[1]-at[0] != l.Tensors[st.First].Size() {
					return zeroed, fmt.Errorf("file %s: tensor %s: %d bytes of codes kept for its %d", path, termtext.Name(first), at[1]-at[0], l.Tensors[st.First].Size())
				}
				if st.HoldCodes {
					if err := write(s.held[at[0]:at[1]]); err != nil {
						return zeroed, fmt.Errorf("file %s: tensor %s: %w", path, termtext.Name(first), err)
					}
					continue
				}
				r, err := s.spill.reader()
				if err == nil {
					err = f.CopyFrom(r, at[0], at[1]-at[0])
				}
				if err != nil {
					return zeroed, fmt.Errorf("file %s: tensor %s: codes spilled to %s: %w", path, termtext.Name(first), s.spill.f.Name(), err)
				}
				prog.add(at[1] - at[0])
				continue
			}
			var emit func([]byte) error
			var hold *[]byte
			switch {
			case st.Kind == stepCodes:
				emit = write
			case st.HoldCodes:
				hold = &s.held
			case st.SpillCodes:
				if s.spill == nil {
					sp, err := openSpill(s.out.spillPath(path))
					if err != nil {
						return zeroed, fmt.Errorf("file %s: spill for its codes: %w", path, err)
					}
					s.spill = sp
				}
				emit = s.spill.write
			}
			codesEnd := func() int64 {
				if st.SpillCodes {
					return s.spill.n
				}
				return int64(len(s.held))
			}
			start := codesEnd()
			if st.Kind == stepScales { // the one pass over the weight that always runs
				s.measure = s.errs.tensor(st.Source.Name)
			}
			measured := s.measure
			n, err := s.quantize(ctx, ra, sf, st.Source, p.Options, emit, hold, prog)
			if err == nil && st.Kind == stepScales && p.Options.Experts == ExpertsFP8 && p.Options.classifier().Classify(st.Source.Name) == model.RoutedExperts {
				s.fx.counted(measured)
			}
			if st.Kind == stepScales && (st.HoldCodes || st.SpillCodes) {
				codesAt[weight] = [2]int64{start, codesEnd()}
			}
			if err == nil {
				sum := sha256.Sum256(s.sbytes)
				switch {
				case st.Kind == stepScales:
					scaleSums[weight] = sum
					s.cs.zeroScale += s.lastZeroScale
					err = write(s.sbytes)
					if st.HoldCodes || st.SpillCodes {
						zeroed += n
					}
				case scaleSums[weight] != sum:
					err = fmt.Errorf("%w: block scales differ between the two passes over it", errChanged)
				default:
					zeroed += n
				}
			}
			if err != nil {
				return zeroed, fmt.Errorf("file %s: tensor %s: %w", srcPath, st.Source.Name, err)
			}
		case stepNVFP4:
			if err := s.writeNVFP4(ctx, ra, sf, st, write, prog); err != nil {
				return zeroed, fmt.Errorf("file %s: tensor %s: %w", srcPath, first, err)
			}
		case stepDecode, stepPack:
			if err := s.runTransform(ctx, ra, sf, st, write, prog); err != nil {
				return zeroed, fmt.Errorf("file %s: tensor %s (from %s): %w", srcPath, first, st.xf.codes.Name, err)
			}
		default:
			return zeroed, fmt.Errorf("file %s: unknown step %s", path, st.Kind)
		}
		if st.Kind != stepCopy && f.Offset() != end {
			return zeroed, fmt.Errorf("file %s: tensor %s: %w: %d of %d bytes written", path, termtext.Name(first), safetensors.ErrWrite, f.Offset()-off, end-off)
		}
	}
	return zeroed, nil
}
