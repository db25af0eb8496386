package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// synth --family deepseek-v3 --scale full writes the published config.json
// (sha256 as pinned in model/testdata/deepseek-v3/FACTS.md) and the
// release's 163 file names with the placements public sources give; inspect
// of it counts the derived 688,574,839,360 bytes. An unknown family is an
// error that lists the built-in ones.
func TestSynthFamilyDeepSeekV3(t *testing.T) {
	if _, e, code := k3("synth", "--family", "nope", filepath.Join(t.TempDir(), "x")); code == 0 || !strings.Contains(e, `unknown family "nope" (built in: k3, deepseek-v3)`) {
		t.Errorf("--family nope: exit %d: %s", code, e)
	}
	if testing.Short() {
		t.Skip("full-size header-only replica")
	}
	dir := filepath.Join(t.TempDir(), "ds")
	if _, e, code := k3("synth", "-q", "--family", "deepseek-v3", "--scale", "full", "--header-only", dir); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, e)
	}
	b, err := os.ReadFile(filepath.Join(dir, model.ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != "79ddea672a62e95d3f0be27be434375538e1988975971cffcf87c96c1de84a65" {
		t.Errorf("config.json: sha256 %x", s)
	}
	idx, err := safetensors.ReadIndex(filepath.Join(dir, safetensors.IndexName))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, f := range idx.WeightMap {
		files[f] = true
	}
	for i := 1; i <= 163; i++ {
		if name := fmt.Sprintf("model-%05d-of-000163.safetensors", i); !files[name] {
			t.Errorf("no tensor in %s", name)
		}
	}
	if len(files) != 163 || len(idx.WeightMap) != 91991 || idx.TotalSize != 688574839360 {
		t.Errorf("index: %d files, %d tensors, total_size %d", len(files), len(idx.WeightMap), idx.TotalSize)
	}
	for name, file := range map[string]int{
		"model.embed_tokens.weight": 1, "model.layers.2.mlp.down_proj.weight": 1,
		"lm_head.weight": 160, "model.norm.weight": 160,
		"model.layers.61.eh_proj.weight": 163, "model.layers.61.shared_head.head.weight": 163,
	} {
		if want := fmt.Sprintf("model-%05d-of-000163.safetensors", file); idx.WeightMap[name] != want {
			t.Errorf("%s in %s, want %s", name, idx.WeightMap[name], want)
		}
	}
	o, e, code := k3("inspect", "--json", dir)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, e)
	}
	if rep := decodeSchema(t, "inspect", o); rep["total_bytes"] != float64(688574839360) || rep["tensor_count"] != float64(91991) {
		t.Errorf("inspect: %v bytes, %v tensors", rep["total_bytes"], rep["tensor_count"])
	}
}
