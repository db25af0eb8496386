package layout

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// windowSize is the read buffer of one writer: a column split reads whole
// rows in windows of this size and keeps only the rank's columns, so memory
// is jobs × 2 × windowSize whatever the tensor size.
const windowSize = 4 << 20

// directCopyMin is the contiguous run length from which a slice row is copied
// in the kernel instead of through the window.
const directCopyMin = 256 << 10

var windowPool = sync.Pool{New: func() any { b := make([]byte, 2*windowSize); return &b }}

// writeFile writes one planned file to path under a temporary name and
// returns the tensor bytes written and how to commit it (sync and rename).
// On error nothing is left behind.
func writeFile(ctx context.Context, of *outFile, path string, progress func(int64)) (int64, func() error, error) {
	if of.verbatim != nil {
		commit, err := copyVerbatim(of, path)
		if err != nil {
			return 0, nil, err
		}
		n := of.tensorBytes()
		if progress != nil {
			progress(n)
		}
		return n, commit, nil
	}
	w, err := safetensors.Create(path, of.lay)
	if err != nil {
		return 0, nil, err
	}
	total, err := writeSteps(ctx, w, of, path, progress)
	if err != nil {
		w.Abort()
		return total, nil, err
	}
	return total, w.Commit, nil
}

// copyVerbatim copies a whole source shard through an atomic temporary; for
// a local file the kernel moves the bytes where the platform can
// (os.File.ReadFrom).
func copyVerbatim(of *outFile, path string) (func() error, error) {
	var in io.Reader = io.NewSectionReader(of.verbatim.ReaderAt(), 0, of.verbatim.Size)
	if src, ok := of.verbatim.ReaderAt().(*os.File); ok {
		// A handle of its own, for the offset ReadFrom advances; it must be
		// the file the source opened, not whatever now has its name.
		f, err := fsx.Open(src.Name())
		if err != nil {
			return nil, err
		}
		defer f.Close()
		was, err := src.Stat()
		if err != nil {
			return nil, err
		}
		now, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if !os.SameFile(was, now) {
			return nil, fmt.Errorf("file %s: copy from %s: %w: the source file was replaced since it was opened", path, of.verbatim.Path, ErrChanged)
		}
		in = io.LimitReader(f, of.verbatim.Size)
	}
	out, err := atomicfile.Create(path)
	if err != nil {
		return nil, err
	}
	n, err := out.File.ReadFrom(in)
	if err == nil && n != of.verbatim.Size {
		err = fmt.Errorf("copied %d of %d bytes", n, of.verbatim.Size)
	}
	if err != nil {
		out.Abort()
		return nil, fmt.Errorf("file %s: copy from %s: %w", path, of.verbatim.Path, err)
	}
	return out.Commit, nil
}

// writeSteps carries out a file's steps.
func writeSteps(ctx context.Context, w *safetensors.Writer, of *outFile, path string, progress func(int64)) (int64, error) {
	bp := windowPool.Get().(*[]byte)
	defer windowPool.Put(bp)
	lay := of.lay
	var total int64
	for _, st := range of.steps {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		if st.first < 0 || st.last < st.first || st.last >= len(lay.Tensors) || st.tensor >= len(of.tensors) {
			return total, fmt.Errorf("file %s: step [%d, %d] outside its %d tensors", path, st.first, st.last, len(lay.Tensors))
		}
		var n int64
		if st.tensor < 0 {
			first, last := lay.Tensors[st.first].Name, lay.Tensors[st.last].Name
			tw, err := w.Span(first, last)
			if err != nil {
				return total, err
			}
			if n, err = tw.ReadFrom(io.NewSectionReader(st.src.ReaderAt(), st.off, st.n)); err != nil {
				return total, fmt.Errorf("file %s: copy %s…%s from %s: %w", path, first, last, st.src.Path, err)
			}
		} else {
			t := of.tensors[st.tensor]
			tw, err := w.Tensor(t.spec.Name)
			if err != nil {
				return total, err
			}
			if err := writeTensor(ctx, tw, t, *bp); err != nil {
				return total, fmt.Errorf("file %s: tensor %s: %w", path, t.spec.Name, err)
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
	if t.held != HeldSlice {
		_, err := tw.ReadFrom(t.src.section(0, t.size()))
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
