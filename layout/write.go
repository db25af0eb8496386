package layout

import (
	"context"
	"fmt"
	"os"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// windowSize is the read buffer of one job: a column split reads whole rows
// in windows of this size, so memory is jobs × windowSize whatever the
// tensor size.
const windowSize = 4 << 20

// directCopyMin is the run length from which a slice row is copied straight
// into the output instead of gathered from a window of whole rows.
const directCopyMin = 256 << 10

// writeFileTo writes one planned file, front to back, into the file create
// starts (a local temporary, or an object's upload), and returns it
// finished, to commit; path names it in messages, window is the job's read
// buffer. The tensor bytes accepted go to progress. On error nothing is
// left behind.
func writeFileTo(ctx context.Context, of *outFile, path string, create func(prog func(int64)) (*filewrite.File, error), window *[]byte, progress func(int64), net *netFetch) (f *filewrite.File, err error) {
	if net != nil {
		var done func() error
		of, done = net.stream(ctx, of)
		defer func() {
			if derr := done(); derr != nil && err == nil {
				err = fmt.Errorf("file %s: %w", path, derr)
			}
		}()
	}
	f, err = create(tensorProgress(of.lay.DataStart, progress))
	if err != nil {
		return nil, err
	}
	if of.verbatim != nil {
		err = copyVerbatim(ctx, f, of, path)
	} else {
		err = writeSteps(ctx, f, of, path, window)
	}
	if err == nil && f.Offset() != of.lay.Size {
		err = fmt.Errorf("file %s: %w: %d bytes written, planned %d", path, safetensors.ErrWrite, f.Offset(), of.lay.Size)
	}
	if err != nil {
		f.Abort()
		return nil, err
	}
	f.Finish()
	return f, nil
}

// tensorProgress reports to progress the bytes a file accepts past its
// header (called by the file's producer alone).
func tensorProgress(header int64, progress func(int64)) func(int64) {
	if progress == nil {
		return nil
	}
	return func(n int64) {
		if skip := min(header, n); skip > 0 {
			header, n = header-skip, n-skip
		}
		if n > 0 {
			progress(n)
		}
	}
}

// copyVerbatim copies a whole source shard from the file the source opened,
// in runs of at most maxRunBytes. A local shard replaced under its name
// since it was opened fails the run: its name no longer holds that file.
func copyVerbatim(ctx context.Context, f *filewrite.File, of *outFile, path string) error {
	v := of.verbatim
	if v.Size != of.lay.Size {
		return fmt.Errorf("file %s: copy from %s: %w: %d bytes, planned %d", path, v.Path, safetensors.ErrWrite, v.Size, of.lay.Size)
	}
	r := of.reader(v)
	if src, ok := r.(*os.File); ok {
		was, err := src.Stat()
		if err != nil {
			return err
		}
		now, err := os.Stat(src.Name())
		if err != nil || !os.SameFile(was, now) {
			return fmt.Errorf("file %s: copy from %s: %w: the source file was replaced since it was opened", path, v.Path, errChanged)
		}
	}
	for off := int64(0); off < v.Size; off += maxRunBytes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f.CopyFrom(r, off, min(maxRunBytes, v.Size-off)); err != nil {
			return fmt.Errorf("file %s: copy from %s: %w", path, v.Path, err)
		}
	}
	return nil
}

// writeSteps writes the header, then the file's steps in order, each
// starting where the previous one ended.
func writeSteps(ctx context.Context, f *filewrite.File, of *outFile, path string, window *[]byte) error {
	lay := of.lay
	if _, err := f.Write(lay.Header); err != nil {
		return err
	}
	for _, st := range of.steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		first, last := lay.Tensors[st.first].Name, lay.Tensors[st.last].Name
		start, end := lay.DataStart+lay.Tensors[st.first].Begin, lay.DataStart+lay.Tensors[st.last].End
		if f.Offset() != start {
			return fmt.Errorf("file %s: step for %s starts at %d while the file is at %d: the plan's steps are out of file order", path, termtext.Name(first), start, f.Offset())
		}
		if st.tensor < 0 {
			if st.n != end-start {
				return fmt.Errorf("file %s: copy %s…%s: %w: %d source bytes for %d output bytes", path, termtext.Name(first), termtext.Name(last), safetensors.ErrSizeMismatch, st.n, end-start)
			}
			if err := f.CopyFrom(of.reader(st.src), st.off, st.n); err != nil {
				return fmt.Errorf("file %s: copy %s…%s from %s: %w", path, termtext.Name(first), termtext.Name(last), st.src.Path, err)
			}
		} else {
			t := of.tensors[st.tensor]
			if err := writeTensor(ctx, f, t, end-start, window); err != nil {
				return fmt.Errorf("file %s: tensor %s: %w", path, termtext.Name(t.spec.Name), err)
			}
		}
		if f.Offset() != end {
			return fmt.Errorf("file %s: %s…%s: %w: %d bytes written for %d", path, termtext.Name(first), termtext.Name(last), safetensors.ErrWrite, f.Offset()-start, end-start)
		}
	}
	return nil
}

func writeTensor(ctx context.Context, f *filewrite.File, t outTensor, size int64, window *[]byte) error {
	switch {
	case t.pack != nil:
		b, err := t.pack.bytes()
		if err != nil {
			return err
		}
		if int64(len(b)) != size {
			return fmt.Errorf("%w: %d packed bytes for %d", safetensors.ErrWrite, len(b), size)
		}
		_, err = f.Write(b)
		return err
	case t.held != HeldSlice:
		return f.CopyFrom(t.src, 0, size)
	}
	return copySlice(ctx, f, t, window)
}
