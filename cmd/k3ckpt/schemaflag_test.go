package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// A family that is not built in works end to end through --schema: synth a
// Qwen3-MoE-shaped replica, inspect it, convert it to block FP8.
func TestSchemaFlagEndToEnd(t *testing.T) {
	schema := filepath.Join("..", "..", "model", "testdata", "qwen3moe", "schema.json")
	cfg := filepath.Join("..", "..", "model", "testdata", "qwen3moe", "config.json")
	dir := filepath.Join(t.TempDir(), "q")
	if _, e, code := k3("synth", "--schema", schema, "--config", cfg, dir); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, e)
	}
	o, e, code := k3("inspect", "--schema", schema, "--json", dir)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, e)
	}
	rep := decodeSchema(t, "inspect", o)
	if rep["tensor_count"] != float64(102) || !strings.Contains(o, `"attention"`) {
		t.Errorf("inspect: %v tensors: %s", rep["tensor_count"], o[:min(len(o), 400)])
	}
	out := filepath.Join(t.TempDir(), "fp8")
	if _, e, code := k3("convert", "-q", "--schema", schema, "--format", "deepseek", dir, out); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, e)
	}
	idx, err := safetensors.ReadIndex(filepath.Join(out, safetensors.IndexName))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := idx.WeightMap["model.layers.2.self_attn.o_proj.weight_scale_inv"]; !ok {
		t.Errorf("no block scale of o_proj in %d names", len(idx.WeightMap))
	}

	if _, e, code := k3("synth", "--schema", cfg, "--config", cfg, filepath.Join(t.TempDir(), "x")); code == 0 || !strings.Contains(e, "--schema "+cfg+": schema: ") {
		t.Errorf("a config as --schema: exit %d: %s", code, e)
	}
}
