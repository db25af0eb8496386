package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// FromFile reads the file it is handed, not whatever the path names by the
// time the header is read: a file renamed over the path after the open does
// not change what is read. It owns the handle: Close (or its failure) closes it.
func TestFromFileReadsTheOpenedFile(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir, "a.safetensors", []TensorSpec{{"checked", U8, []int64{4}}})
	writeTestFile(t, dir, "b.safetensors", []TensorSpec{{"swapped", U8, []int64{8}}})
	path := filepath.Join(dir, "a.safetensors")
	fh, err := fsx.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "b.safetensors"), path); err != nil {
		t.Fatal(err)
	}
	f, err := FromFile(fh, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Lookup("checked"); !ok || len(f.Tensors) != 1 || f.Path != path {
		t.Errorf("read %v from %s, want the opened file's tensor", f.Tensors, f.Path)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("handle after Close: %v, want closed", err)
	}

	// A failure closes the handle too and names the path.
	bad := filepath.Join(dir, "bad.safetensors")
	if err := os.WriteFile(bad, []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	fh, err = fsx.Open(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromFile(fh, bad); !errors.Is(err, errTooSmall) {
		t.Errorf("5-byte file: %v, want errTooSmall", err)
	}
	if _, err := fh.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("handle after a failed FromFile: %v, want closed", err)
	}
}
