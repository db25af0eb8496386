package layout

import (
	"context"
	"io"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// sliceGeom is the row geometry of the slice [start, stop) along axis of a
// row-major tensor: outer rows of rowB bytes, each holding a run of run
// bytes at start·innerB.
func sliceGeom(shape []int64, dt safetensors.DType, axis int, start, stop int64) (outer, innerB, rowB, run int64) {
	outer, _ = safetensors.NumElements(shape[:axis])
	inner, _ := safetensors.NumElements(shape[axis+1:])
	innerB = inner * dt.Bits() / 8
	rowB = shape[axis] * innerB
	return outer, innerB, rowB, (stop - start) * innerB
}

// sliceDirect reports whether a slice is copied run by run rather than
// gathered from windows of rows.
func sliceDirect(t outTensor) bool {
	outer, _, _, run := sliceGeom(t.shape, t.spec.DType, t.axis, t.start, t.stop)
	return outer == 1 || run >= directCopyMin
}

// sliceWindows calls fn with each read of a gathered slice, in order: rows
// [o, o+w) read whole (bytes off, n of the tensor), or, where one row
// exceeds the window, just that row's run.
func sliceWindows(t outTensor, window int64, fn func(o, w, off, n int64) error) error {
	outer, innerB, rowB, run := sliceGeom(t.shape, t.spec.DType, t.axis, t.start, t.stop)
	rows := max(window/rowB, 1)
	for o := int64(0); o < outer; o += rows {
		w := min(rows, outer-o)
		off, n := o*rowB, rowB*w
		if n > window {
			off, n = o*rowB+t.start*innerB, run
		}
		if err := fn(o, w, off, n); err != nil {
			return err
		}
	}
	return nil
}

// copySlice writes the slice [start, stop) along axis: long runs straight
// into the output, short ones gathered from windows of whole rows read into
// the job's window (allocated on first use).
func copySlice(ctx context.Context, f *filewrite.File, t outTensor, window *[]byte) error {
	if sliceDirect(t) {
		return forRuns(t.shape, t.spec.DType, t.axis, t.start, t.stop, func(off, n int64) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return f.CopyFrom(t.src, off, n)
		})
	}
	if *window == nil {
		*window = make([]byte, windowSize)
	}
	_, innerB, rowB, run := sliceGeom(t.shape, t.spec.DType, t.axis, t.start, t.stop)
	in := *window
	return sliceWindows(t, int64(len(in)), func(o, w, off, n int64) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if n != rowB*w || n > int64(len(in)) { // one row exceeds the window: just the run
			return f.CopyFrom(t.src, off, n)
		}
		win := in[:n]
		if err := readFull(t.src, win, off); err != nil {
			return err
		}
		// Gather the rows' runs to the front (run ≤ rowB) and write them at once.
		for k := int64(0); k < w; k++ {
			a := k*rowB + t.start*innerB
			copy(win[k*run:(k+1)*run], win[a:a+run])
		}
		_, err := f.Write(win[:w*run])
		return err
	})
}

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
