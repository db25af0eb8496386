package layout

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	st "github.com/k3ckpt/k3ckpt/safetensors"
)

// memFile is a planned file of in-memory tensors of the given sizes (U8),
// each holding bytes that differ by tensor and offset.
func memFile(t *testing.T, sizes ...int) (*outFile, map[string][]byte) {
	t.Helper()
	of := &outFile{name: "m.safetensors"}
	data := map[string][]byte{}
	for i, n := range sizes {
		name := string(rune('a' + i))
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(k%251) ^ byte(17*i)
		}
		data[name] = b
		of.tensors = append(of.tensors, outTensor{spec: st.TensorSpec{Name: name, DType: st.U8, Shape: []int64{int64(n)}}, src: bytes.NewReader(b), shape: []int64{int64(n)}, held: heldReplica})
	}
	if err := of.plan(); err != nil {
		t.Fatal(err)
	}
	return of, data
}

// TestWriteFileInOrder: a file's bytes are its header, then every tensor's
// bytes at the offsets its header gives (read back with the codec's reader,
// not the writer), and the progress calls add up to its tensor bytes.
func TestWriteFileInOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	of, data := memFile(t, 3, 4<<20+5, 1, 4096) // over one writer buffer (4 MiB)
	path := filepath.Join(dir, of.name)
	var done int64
	commit, err := writeFile(context.Background(), of, path, nil, new([]byte), func(n int64) { done += n }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	if done != of.tensorBytes() {
		t.Errorf("progress %d, tensor bytes %d", done, of.tensorBytes())
	}
	f, err := st.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, want := range data {
		ti, ok := f.Lookup(name)
		if !ok {
			t.Fatalf("%s missing", name)
		}
		got := make([]byte, ti.Size())
		if _, err := f.Section(ti).ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("tensor %s: bytes differ", name)
		}
	}
}

// TestWriteFileRefusesBadSteps: steps out of file order, or a copy run
// whose length is not its tensors', fail naming the file and leave nothing
// in the directory.
func TestWriteFileRefusesBadSteps(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, want string
		edit       func(of *outFile)
	}{
		{"out of order", "out of file order", func(of *outFile) {
			of.steps[0], of.steps[1] = of.steps[1], of.steps[0]
		}},
		{"run of the wrong length", "source bytes for", func(of *outFile) {
			src := headerFile(t, "s.safetensors", []st.TensorSpec{{Name: "x", DType: st.U8, Shape: []int64{64}}})
			of.steps[0] = fileStep{first: 0, last: 0, tensor: -1, src: src, off: src.DataStart, n: 2}
		}},
		{"missing step", "bytes written, planned", func(of *outFile) {
			of.steps = of.steps[:len(of.steps)-1]
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			of, _ := memFile(t, 3, 5, 7)
			c.edit(of)
			_, err := writeFile(context.Background(), of, filepath.Join(dir, of.name), nil, new([]byte), nil, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), of.name) {
				t.Fatalf("got %v, want an error naming %s saying %q", err, of.name, c.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left %v", ents)
			}
		})
	}
}

// TestWriteFileCancelled: a cancelled context stops a file before its
// steps and leaves no temporary.
func TestWriteFileCancelled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	of, _ := memFile(t, 10, 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := writeFile(ctx, of, filepath.Join(dir, of.name), nil, new([]byte), nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
}
