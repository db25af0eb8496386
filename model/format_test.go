package model

import (
	"slices"
	"testing"
)

// The names and shapes the engines' loaders read: DeepSeek-V3's
// weight_scale_inv [nb, kb] (its released safetensors), compressed-tensors'
// weight_scale [nb, kb], ModelOpt FP8_PB_WO's weight_scale [nb, 1, kb, 1].
func TestFormatNamesAndShapes(t *testing.T) {
	t.Parallel()
	const w = "language_model.model.layers.0.self_attn.q_proj.weight"
	for _, c := range []struct {
		s     Format
		name  string
		shape []int64
		role  Role
	}{
		{DeepSeek, "language_model.model.layers.0.self_attn.q_proj.weight_scale_inv", []int64{5, 2}, roleScaleInv},
		{CompressedTensors, "language_model.model.layers.0.self_attn.q_proj.weight_scale", []int64{5, 2}, roleScale},
		{ModelOpt, "language_model.model.layers.0.self_attn.q_proj.weight_scale", []int64{5, 1, 2, 1}, roleScale},
	} {
		if got := c.s.ScaleName(w); got != c.name {
			t.Errorf("%d: ScaleName = %q, want %q", c.s, got, c.name)
		}
		if got := c.s.ScaleShape(576, 200); !slices.Equal(got, c.shape) {
			t.Errorf("%d: ScaleShape = %v, want %v", c.s, got, c.shape)
		}
		if r := formatFacts[c.s].role; r != c.role {
			t.Errorf("%d: role = %v, want %v", c.s, r, c.role)
		}
		if got, ok := BlockScaleOf(c.name); !ok || got != w {
			t.Errorf("BlockScaleOf(%q) = %q, %v; want %q", c.name, got, ok, w)
		}
		// A [576, 200] weight (kv_a_proj_with_mqa's partial row block) has a 5×2 grid.
		if !IsBlockScaleShape(c.shape, []int64{576, 200}) {
			t.Errorf("%v is not the scale shape of [576 200]", c.shape)
		}
	}
	for _, n := range []string{"weight_scale", "a.weight", "a.weight_scale_2", "a.input_scale", "a.xweight_scale_inv"} {
		if w, ok := BlockScaleOf(n); ok {
			t.Errorf("BlockScaleOf(%q) = %q, true; want not a block scale", n, w)
		}
	}
	for _, c := range [][2][]int64{
		{{5, 1}, {576, 200}}, {{4, 2}, {576, 200}}, {{5, 2, 1, 1}, {576, 200}}, {{5, 1, 2}, {576, 200}}, {{5, 2}, {576, 200, 1}},
	} {
		if IsBlockScaleShape(c[0], c[1]) {
			t.Errorf("IsBlockScaleShape(%v, %v) = true", c[0], c[1])
		}
	}
}
