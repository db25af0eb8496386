package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// synth --family deepseek-v4 --scale full writes V4-Flash's tensors as
// model/testdata/deepseek-v4/FACTS.md derives them: counted as DeepSeek
// counts parameters (FP4 codes two a byte, the scales not counted, the MTP
// layer apart) they are the published 284B, and their bytes the reported
// size of the download; inspect reads the 69,187 tensors and the bytes the
// index sums.
func TestDeepSeekV4SynthInspect(t *testing.T) {
	if testing.Short() {
		t.Skip("full-size header-only replica")
	}
	dir := filepath.Join(t.TempDir(), "v4")
	if _, e, code := k3("synth", "-q", "--family", "deepseek-v4", "--scale", "full", "--header-only", dir); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, e)
	}
	in, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	idx := in.Index()
	var params, mtp int64
	files := map[string]bool{}
	for name, file := range idx.WeightMap {
		files[file] = true
		_, info, ok := in.Lookup(name)
		if !ok {
			t.Fatalf("%s: in the index, not in %s", name, file)
		}
		n, err := safetensors.NumElements(info.Shape)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(name, ".scale"):
			continue
		case strings.Contains(name, ".experts."):
			n *= 2 // I8: two FP4 codes a byte
		}
		if strings.HasPrefix(name, "mtp.") {
			mtp += n
		} else {
			params += n
		}
	}
	t.Logf("%d parameters outside the MTP layer, %d in it", params, mtp)
	// "284B" total parameters (DeepSeek's V4 release; FACTS.md).
	if b := (params + 5e8) / 1e9; b != 284 || mtp == 0 {
		t.Errorf("%d parameters (%dB), %d in the MTP layer: want 284B", params, b, mtp)
	}
	// Deployment notes report the download as about 149 GiB (FACTS.md).
	if gib := float64(idx.TotalSize) / (1 << 30); gib < 148.5 || gib >= 149.5 {
		t.Errorf("total_size %d = %.2f GiB, want about 149", idx.TotalSize, gib)
	}
	if len(files) != 45 || len(idx.WeightMap) != 69187 {
		t.Errorf("%d files, %d tensors", len(files), len(idx.WeightMap))
	}
	for name, file := range map[string]int{"layers.0.ffn.gate.tid2eid": 1, "mtp.0.e_proj.weight": 44, "head.weight": 45, "hc_head_fn": 45} {
		if want := fmt.Sprintf("model-%05d-of-000045.safetensors", file); idx.WeightMap[name] != want {
			t.Errorf("%s in %s, want %s", name, idx.WeightMap[name], want)
		}
	}
	o, e, code := k3("inspect", "--json", dir)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, e)
	}
	if rep := decodeSchema(t, "inspect", o); rep["total_bytes"] != float64(idx.TotalSize) || rep["tensor_count"] != float64(69187) {
		t.Errorf("inspect: %v bytes, %v tensors; the index sums %d", rep["total_bytes"], rep["tensor_count"], idx.TotalSize)
	}
}

// A V4 replica with data (the tiny config at 15 + 1 layers and 16 routed
// experts) goes through shard (pp16 --even) and export (EP4 experts, wq_b
// and attn_sink by head, the vocabulary TP4: testdata/deepseek-v4/layouts/
// ep4-tp4.json); each set of pieces reassembles to the source's bytes. The
// last stage holds the MTP layer and the head's hc_head; rank r holds
// routed experts 4r … 4r+3 unchanged, and the ranks' wq_b rows (and their
// block scales' rows) concatenate to the source's.
func TestDeepSeekV4ShardExport(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	b, err := model.FamilyConfigJSON("deepseek-v4", model.ScaleTiny)
	if err != nil {
		t.Fatal(err)
	}
	src, st, ex := shardExportReassemble(t, b, "deepseek-v4", func(cfg map[string]any) {
		ratios := []any{}
		for n := range 16 {
			ratios = append(ratios, []int{0, 4, 128}[n%3]*min(1, 15-n))
		}
		cfg["num_hidden_layers"], cfg["n_routed_experts"], cfg["compress_ratios"] = 15, 16, ratios
	})
	last, err := safetensors.Open(filepath.Join(st, "stage-15"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mtp.0.e_proj.weight", "mtp.0.ffn.experts.15.w2.scale", "hc_head_fn", "head.weight", "norm.weight"} {
		if _, _, ok := last.Lookup(name); !ok {
			t.Errorf("stage-15 has no %s", name)
		}
	}
	last.Close()
	in, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var rows, scaleRows []byte
	for r := range 4 {
		rank, err := safetensors.Open(filepath.Join(ex, fmt.Sprintf("rank-%02d", r)))
		if err != nil {
			t.Fatal(err)
		}
		part, _ := readAll(t, rank, "layers.1.attn.wq_b.weight")
		rows = append(rows, part...)
		part, _ = readAll(t, rank, "layers.1.attn.wq_b.scale")
		scaleRows = append(scaleRows, part...)
		for e := range 16 {
			name := fmt.Sprintf("layers.4.ffn.experts.%d.w1.weight", e)
			_, _, ok := rank.Lookup(name)
			if mine := e/4 == r; ok != mine {
				t.Errorf("rank %d holds %s: %v", r, name, ok)
			} else if ok {
				a, _ := readAll(t, rank, name)
				if b, _ := readAll(t, in, name); !bytes.Equal(a, b) {
					t.Errorf("rank %d: %s differs from the source", r, name)
				}
			}
		}
		rank.Close()
	}
	if whole, _ := readAll(t, in, "layers.1.attn.wq_b.weight"); !bytes.Equal(rows, whole) {
		t.Errorf("wq_b: the ranks' rows (%d bytes) are not the source's (%d bytes)", len(rows), len(whole))
	}
	if whole, _ := readAll(t, in, "layers.1.attn.wq_b.scale"); !bytes.Equal(scaleRows, whole) {
		t.Errorf("wq_b.scale: the ranks' rows (%d bytes) are not the source's (%d bytes)", len(scaleRows), len(whole))
	}
}
