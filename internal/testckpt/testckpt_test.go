package testckpt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

func TestMain(m *testing.M) { Main(m) }

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
	// Open checked each index's total_size against its shards.
	if a.NumTensors() != b.NumTensors() || a.Index().TotalSize != b.Index().TotalSize || a.HeaderBytesRead != b.HeaderBytesRead {
		t.Fatalf("copy: %d tensors %d B, replica %d tensors %d B", b.NumTensors(), b.Index().TotalSize, a.NumTensors(), a.Index().TotalSize)
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
		if c.NumLayers != n || c.NumShards() != n+3 || !c.Vision {
			t.Errorf("%d layers: config has %d layers, %d shards, vision %v", n, c.NumLayers, c.NumShards(), c.Vision)
		}
		// Layer l's tensors are shard l's.
		for l := range n {
			hasMLA, hasExperts := false, false
			for _, s := range c.ShardTensors(l) {
				g := c.Classifier.ParseName(s.Name).Group
				hasMLA = hasMLA || strings.HasPrefix(g.String(), "mla.")
				hasExperts = hasExperts || g == model.GroupExperts
			}
			if mla := (l+1)%4 == 0; hasMLA != mla || !hasExperts != (l == 0) {
				t.Errorf("%d layers: layer %d (0-based) has MLA %v, routed experts %v; want MLA %v, dense only layer 0", n, l, hasMLA, hasExperts, mla)
			}
		}
	}
}
