package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertFP8ExpertsSummary: convert --experts fp8 reports its block
// counts in the text summary and in --json, and refuses ModelOpt's
// numerics naming what works.
func TestConvertFP8ExpertsSummary(t *testing.T) {
	t.Parallel()
	src := fourLayerReplica(t) // its MoE layers' experts, in 7 shards
	o, e, code := k3("convert", src, filepath.Join(t.TempDir(), "j"), "--experts", "fp8", "--scale-fmt", "ue8m0", "--json")
	if code != 0 {
		t.Fatalf("convert --json: exit %d: %s", code, e)
	}
	c := decodeSchema(t, "convert", o)["fp8_experts"].(map[string]any)
	if c["blocks"].(float64) == 0 || c["lossless"].(float64)+c["lossy"].(float64) != c["blocks"].(float64) {
		t.Errorf("fp8_experts %v", c)
	}
	o, e, code = k3("convert", src, filepath.Join(t.TempDir(), "t"), "--experts", "fp8")
	if code != 0 || !strings.Contains(o+e, "experts to block FP8: ") || !strings.Contains(o+e, "lossy") {
		t.Errorf("convert: exit %d, no block counts in %q", code, o+e)
	}
	_, e, code = k3("convert", src, filepath.Join(t.TempDir(), "m"), "--experts", "fp8", "--numerics", "modelopt")
	if code == 0 || !strings.Contains(e, "--numerics deepgemm") {
		t.Errorf("--numerics modelopt: exit %d: %s", code, e)
	}
}
