package safetensors

import (
	"fmt"
	"sync/atomic"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// Writer streams tensors into a file laid out by a FilePlan, under a temporary
// name until Commit; tensors may be written in any order and concurrently.
type Writer struct {
	l       *FilePlan
	f       *filewrite.Temp
	path    string
	written []atomic.Int64
	opened  []atomic.Bool
}

// Create starts a file at path (through a temporary) and writes its header.
func Create(path string, l *FilePlan) (*Writer, error) {
	header, err := l.HeaderBytes()
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", path, err)
	}
	f, err := filewrite.CreateTemp(path)
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", path, err)
	}
	if _, err := f.WriteAt(header, 0); err != nil {
		f.Abort()
		return nil, fmt.Errorf("file %s: write header: %w", path, err)
	}
	return &Writer{l: l, f: f, path: path, written: make([]atomic.Int64, len(l.Tensors)), opened: make([]atomic.Bool, len(l.Tensors))}, nil
}

// Tensor returns the writer for one tensor's bytes. Each tensor can be opened once.
func (w *Writer) Tensor(name string) (*tensorWriter, error) {
	i, ok := w.l.index[name]
	if !ok {
		return nil, fmt.Errorf("file %s: tensor %s: %w: not in layout", w.path, termtext.Name(name), ErrWrite)
	}
	if w.opened[i].Swap(true) {
		return nil, fmt.Errorf("file %s: tensor %s: %w: opened twice", w.path, termtext.Name(name), ErrWrite)
	}
	t := w.l.Tensors[i]
	return &tensorWriter{w: w, i: i, off: w.l.DataStart + t.Begin, end: w.l.DataStart + t.End}, nil
}

// Commit checks that every tensor received exactly its bytes, then syncs and
// renames the file into place; on failure the temporary is removed.
func (w *Writer) Commit() error {
	for i, t := range w.l.Tensors {
		if got := w.written[i].Load(); got != t.Size() {
			w.f.Abort()
			return fmt.Errorf("file %s: tensor %s: %w: %d of %d bytes written", w.path, termtext.Name(t.Name), ErrWrite, got, t.Size())
		}
	}
	if err := w.f.Commit(); err != nil {
		return fmt.Errorf("file %s: %w", w.path, err)
	}
	return nil
}

// CommitSparse commits a header-only file, its data region left as a hole.
func (w *Writer) CommitSparse() error {
	if err := w.f.Truncate(w.l.Size); err != nil {
		w.f.Abort()
		return fmt.Errorf("file %s: %w", w.path, err)
	}
	for i, t := range w.l.Tensors {
		w.written[i].Store(t.Size())
	}
	return w.Commit()
}

// Abort removes the temporary; after Commit it does nothing, so it can be deferred.
func (w *Writer) Abort() error { return w.f.Abort() }

// tensorWriter writes one tensor's bytes in order, never past its end.
type tensorWriter struct {
	w        *Writer
	i        int // the tensor's index in the layout
	off, end int64
}

func (tw *tensorWriter) label() string { return "tensor " + termtext.Name(tw.w.l.Tensors[tw.i].Name) }

// Write appends p to the tensor.
func (tw *tensorWriter) Write(p []byte) (int, error) {
	if over := int64(len(p)) - (tw.end - tw.off); over > 0 {
		return 0, fmt.Errorf("file %s: %s: %w: %d bytes past its end", tw.w.path, tw.label(), ErrWrite, over)
	}
	n, err := tw.w.f.WriteAt(p, tw.off)
	tw.off += int64(n)
	tw.w.written[tw.i].Add(int64(n))
	if err != nil {
		return n, fmt.Errorf("file %s: %s: %w", tw.w.path, tw.label(), err)
	}
	return n, nil
}
