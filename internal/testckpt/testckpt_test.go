package testckpt

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

func TestMain(m *testing.M) { Main(m) }

// TestFakeIsTheReplica: the in-memory fake is, header for header, the
// replica synth writes to disk (read back by the codec), with the same index.
func TestFakeIsTheReplica(t *testing.T) {
	fk := Fake(t, model.ScaleTiny)
	dir := Replica(t, model.ScaleTiny)
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if len(ck.Files) != len(fk.Files) || len(fk.Files) != fk.Config.NumShards() {
		t.Fatalf("%d files on disk, %d fakes, config says %d", len(ck.Files), len(fk.Files), fk.Config.NumShards())
	}
	for i, f := range ck.Files {
		g := fk.Files[i]
		if g.Path != f.Path || g.Size != f.Size || g.DataStart != f.DataStart || len(g.Tensors) != len(f.Tensors) {
			t.Fatalf("shard %d: fake %s %d B (header %d), disk %s %d B (header %d)", i, g.Path, g.Size, g.DataStart, f.Path, f.Size, f.DataStart)
		}
		for j, tf := range f.Tensors {
			tg := g.Tensors[j]
			if tg.Name != tf.Name || tg.DType != tf.DType || !slices.Equal(tg.Shape, tf.Shape) || tg.Begin != tf.Begin || tg.End != tf.End {
				t.Fatalf("%s tensor %d: fake %+v, disk %+v", f.Path, j, tg, tf)
			}
			if _, ok := g.Lookup(tf.Name); !ok {
				t.Fatalf("%s: fake cannot look up %s", f.Path, tf.Name)
			}
		}
	}
	disk, err := os.ReadFile(filepath.Join(dir, safetensors.IndexName))
	if err != nil {
		t.Fatal(err)
	}
	if string(disk) != string(fk.Index) {
		t.Errorf("fake index differs from synth's (%d vs %d bytes)", len(fk.Index), len(disk))
	}
	if cfg, _ := os.ReadFile(filepath.Join(dir, model.ConfigName)); string(cfg) != string(fk.ConfigJSON) {
		t.Error("fake config.json differs from synth's")
	}
	if fk.HeaderBytes()+int64(len(fk.Index)) != ck.HeaderBytesRead {
		t.Errorf("fake headers %d B + index %d B, Open read %d B", fk.HeaderBytes(), len(fk.Index), ck.HeaderBytesRead)
	}
	if n := len(fk.specs()); n != ck.NumTensors() || n != fk.Config.NumTensors() {
		t.Errorf("%d specs, %d on disk, config %d", n, ck.NumTensors(), fk.Config.NumTensors())
	}
	last := fk.Files[len(fk.Files)-1]
	ti := last.Tensors[len(last.Tensors)-1]
	b, err := io.ReadAll(last.Section(ti))
	if err != nil || int64(len(b)) != ti.Size() || slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
		t.Errorf("fake data of %s: %d bytes (want %d zeros), %v", ti.Name, len(b), ti.Size(), err)
	}
	if Fake(t, model.ScaleTiny) != fk || Replica(t, model.ScaleTiny) != dir {
		t.Error("fixtures built twice")
	}
}

// TestCopyKeepsHeadersAndSizes: a copy opens to the same checkpoint and
// damaging it leaves the shared replica alone.
func TestCopyKeepsHeadersAndSizes(t *testing.T) {
	dir := Replica(t, model.ScaleTiny)
	cp := Copy(t, dir)
	a, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := safetensors.Open(cp)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.NumTensors() != b.NumTensors() || a.TotalBytes() != b.TotalBytes() || a.HeaderBytesRead != b.HeaderBytesRead {
		t.Fatalf("copy: %d tensors %d B, replica %d tensors %d B", b.NumTensors(), b.TotalBytes(), a.NumTensors(), a.TotalBytes())
	}
	if err := os.Remove(filepath.Join(cp, model.ConfigName)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, model.ConfigName)); err != nil {
		t.Errorf("damaging the copy touched the replica: %v", err)
	}
}

// TestLayersConfig: a config cut to n layers keeps K3's schedule on them
// (MLA at every 4th layer) and the vision tower, in n+3 shards.
func TestLayersConfig(t *testing.T) {
	for _, n := range []int{4, 16} {
		c, err := model.ParseConfig(LayersConfigJSON(t, model.ScaleTiny, n))
		if err != nil {
			t.Fatal(err)
		}
		if c.NumLayers != n || c.NumShards() != n+3 || c.Vision == nil {
			t.Errorf("%d layers: config has %d layers, %d shards, vision %v", n, c.NumLayers, c.NumShards(), c.Vision != nil)
		}
		layers := c.Layers()
		for l := range n {
			if mla := (l+1)%4 == 0; (layers[l].Attention == model.MLA) != mla || !layers[l].MoE != (l == 0) {
				t.Errorf("%d layers: layer %d (0-based) %+v, want MLA %v, dense only layer 0", n, l, layers[l], mla)
			}
		}
	}
}

// specs lists every tensor in file order (the order a Checkpoint opened
// from disk lists them). Shapes alias the Files': do not modify them.
func (c *Checkpoint) specs() []safetensors.TensorSpec {
	n := 0
	for _, f := range c.Files {
		n += len(f.Tensors)
	}
	out := make([]safetensors.TensorSpec, 0, n)
	for _, f := range c.Files {
		for _, t := range f.Tensors {
			out = append(out, safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape})
		}
	}
	return out
}
