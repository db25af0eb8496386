package objstore_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// tallReplica writes into dst the checkpoint of src with every per shards
// merged into one file: the same tensors, bytes and config in fewer, larger
// objects, so that a benchmark can tell what grows with object size from
// what grows with tensor size.
func tallReplica(t testing.TB, src, dst string, per int) {
	t.Helper()
	ck, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	groups := (len(ck.Files) + per - 1) / per
	var names []string
	for g := 0; g < groups; g++ {
		files := ck.Files[g*per : min((g+1)*per, len(ck.Files))]
		var specs []safetensors.TensorSpec
		for _, f := range files {
			for _, ti := range f.Tensors {
				specs = append(specs, safetensors.TensorSpec{Name: ti.Name, DType: ti.DType, Shape: ti.Shape})
			}
		}
		plan, err := safetensors.NewFilePlan(specs, files[0].Metadata)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("model-%05d-of-%06d.safetensors", g+1, groups)
		w, err := safetensors.Create(filepath.Join(dst, name), plan)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			for _, ti := range f.Tensors {
				tw, err := w.Tensor(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(tw, f.Section(ti)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	var idx bytes.Buffer
	if _, err := safetensors.WriteShardIndex(&idx, dst, names); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, safetensors.IndexName), idx.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, model.ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, model.ConfigName), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTallReplica checks that the benchmark's tall replica holds what its
// source holds, tensor for tensor and byte for byte, in fewer files.
func TestTallReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("synthesizes the tiny replica; a benchmark helper's check")
	}
	work := t.TempDir()
	src, dst := filepath.Join(work, "tiny"), filepath.Join(work, "tall")
	if err := model.Synth(src, model.SynthOptions{Scale: model.ScaleTiny, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	tallReplica(t, src, dst, 8)
	a, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := safetensors.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if want := (len(a.Files) + 7) / 8; len(b.Files) != want {
		t.Fatalf("tall replica has %d files, want %d", len(b.Files), want)
	}
	if a.NumTensors() != b.NumTensors() || a.Index().TotalSize != b.Index().TotalSize {
		t.Fatalf("tall replica: %d tensors, %d bytes; source %d, %d", b.NumTensors(), b.Index().TotalSize, a.NumTensors(), a.Index().TotalSize)
	}
	for _, fa := range a.Files {
		for _, ta := range fa.Tensors {
			fb, tb, ok := b.Lookup(ta.Name)
			if !ok {
				t.Fatalf("tall replica lacks %s", ta.Name)
			}
			x, _ := io.ReadAll(fa.Section(ta))
			y, _ := io.ReadAll(fb.Section(tb))
			if tb.DType != ta.DType || fmt.Sprint(tb.Shape) != fmt.Sprint(ta.Shape) || !bytes.Equal(x, y) {
				t.Fatalf("%s differs in the tall replica", ta.Name)
			}
		}
	}
}
