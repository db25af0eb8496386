package main

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/quant"
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
	} else if strings.Contains(e, "kda") || strings.Contains(e, "Kimi K3") {
		t.Errorf("convert of Qwen prints Kimi-K3's engine verdicts:\n%s", e)
	}
	ck, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	idx := ck.Index()
	if idx == nil {
		t.Fatalf("%s: no index", out)
	}
	if _, ok := idx.WeightMap["model.layers.2.self_attn.o_proj.weight_scale_inv"]; !ok {
		t.Errorf("no block scale of o_proj in %d names", len(idx.WeightMap))
	}

	if _, e, code := k3("synth", "--schema", cfg, "--config", cfg, filepath.Join(t.TempDir(), "x")); code == 0 || !strings.Contains(e, "--schema "+cfg+": schema: ") {
		t.Errorf("a config as --schema: exit %d: %s", code, e)
	}
}

// The built-in DeepSeek-V3 family: a block-FP8 replica converts to BF16 on
// the CPU, each weight its codes × weight_scale_inv in float32 rounded once
// to BF16 (fp8_cast_bf16.py's weight_dequant).
func TestDeepSeekFP8ToBF16(t *testing.T) {
	cfg := filepath.Join("..", "..", "model", "testdata", "deepseek-v3", "tiny.json")
	src, dst := filepath.Join(t.TempDir(), "ds"), filepath.Join(t.TempDir(), "bf16")
	if _, e, code := k3("synth", "--config", cfg, src); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, e)
	}
	if _, e, code := k3("convert", "-q", "--format", "deepseek", "--recipe", "bf16", "--experts", "bf16", src, dst); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, e)
	}
	in, out := openPair(t, src, dst)
	for _, name := range []string{"model.layers.3.mlp.experts.7.down_proj.weight", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight"} {
		codes, ti := readAll(t, in, name)
		sc, _ := readAll(t, in, name+"_scale_inv")
		got, gi := readAll(t, out, name)
		n, k := int(ti.Shape[0]), int(ti.Shape[1])
		if gi.DType != safetensors.BF16 || len(got) != 2*n*k {
			t.Fatalf("%s: %s %v", name, gi.DType, gi.Shape)
		}
		kb := (k + 127) / 128
		for i := range n * k {
			s := math.Float32frombits(binary.LittleEndian.Uint32(sc[4*((i/k/128)*kb+(i%k)/128):]))
			want := quant.F32ToBF16(quant.E4M3ToF32(codes[i]) * s)
			if g := binary.LittleEndian.Uint16(got[2*i:]); g != want {
				t.Fatalf("%s[%d]: %#04x, want %#04x", name, i, g, want)
			}
		}
	}
	if _, _, ok := out.Lookup("model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv"); ok {
		t.Error("a scale is left beside its BF16 weight")
	}
}
