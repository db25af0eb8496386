package model

import (
	"encoding/json"
	"slices"
	"testing"
)

// The spellings NVIDIA's _module_name_aliases gives (Model-Optimizer
// examples/kimi/kimi_k3/quantize_to_nvfp4.py @575c27ae), written out by hand.
func TestModuleSpellingsMatchNVIDIA(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"language_model.model.layers.1.block_sparse_moe.experts", []string{
			"language_model.model.layers.1.block_sparse_moe.experts",
			"language_model.model.layers.1.mlp.experts",
			"layers.1.block_sparse_moe.experts",
			"layers.1.mlp.experts",
			"model.layers.1.block_sparse_moe.experts",
			"model.layers.1.mlp.experts",
		}},
		{"language_model.model.layers.3.self_attn.q_a_proj", []string{
			"language_model.model.layers.3.self_attn.q_a_proj",
			"layers.3.self_attn.q_a_proj",
			"model.layers.3.self_attn.q_a_proj",
		}},
		{"*block_sparse_moe.gate*", []string{"*block_sparse_moe.gate*", "*mlp.gate*"}},
		{"language_model.lm_head", []string{"language_model.lm_head", "lm_head"}},
		{"vision_tower*", []string{"vision_tower*"}},
		// A bare text checkpoint: model. names also get vLLM's stripped spelling.
		{"model.layers.2.self_attn.q_proj", []string{"layers.2.self_attn.q_proj", "model.layers.2.self_attn.q_proj"}},
	} {
		if got := k3Classifier.ModuleSpellings(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// NVIDIA's _fused_attention_module_names: q/k/v/g → fused_qkvg_proj and
// in_proj_qkvgfab, f_a/b → in_proj_qkvgfab only, q_a/kv_a → both MLA names;
// f_b_proj, o_proj and the b projections of MLA are in no fusion.
func TestFusedNames(t *testing.T) {
	t.Parallel()
	P := "language_model.model.layers."
	got := FusedNames([]string{P + "0.self_attn.f_a_proj", P + "0.self_attn.f_b_proj", P + "0.self_attn.o_proj",
		P + "2.self_attn.k_proj", P + "3.self_attn.kv_a_proj_with_mqa", P + "3.self_attn.q_b_proj"})
	want := []string{P + "0.self_attn.in_proj_qkvgfab", P + "2.self_attn.fused_qkvg_proj", P + "2.self_attn.in_proj_qkvgfab",
		P + "3.self_attn.fused_qkv_a_proj", P + "3.self_attn.fused_qkv_a_proj_with_mqa"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// The seed's recipe (KDA q/k/v/g FP8, f_a/b BF16) splits vLLM's
// in_proj_qkvgfab but not SGLang's fused_qkvg_proj.
func TestFindSplits(t *testing.T) {
	t.Parallel()
	P := "language_model.model.layers.0.self_attn."
	q := []string{P + "q_proj", P + "k_proj", P + "v_proj", P + "g_proj", P + "o_proj"}
	k := []string{P + "f_a_proj", P + "f_b_proj", P + "b_proj"}
	s := FindSplits(q, k)
	if len(s) != 1 || s[0].Module != P+"in_proj_qkvgfab" || !slices.Equal(s[0].Kept, []string{"f_a_proj", "b_proj"}) ||
		!slices.Equal(s[0].Quantized, []string{"q_proj", "k_proj", "v_proj", "g_proj"}) || !slices.Contains(s[0].Group.Engines, "vLLM") {
		t.Fatalf("splits %+v", s)
	}
	if s := FindSplits(append(q, P+"f_a_proj", P+"b_proj"), []string{P + "f_b_proj"}); len(s) != 0 {
		t.Fatalf("NVIDIA's choice splits nothing, got %+v", s)
	}
	M := "language_model.model.layers.1.block_sparse_moe.shared_experts."
	if s := FindSplits([]string{M + "gate_proj"}, []string{M + "up_proj"}); len(s) != 1 || s[0].Module != M+"gate_up_proj" {
		t.Fatalf("gate/up split %+v", s)
	}
}

// The K3 exclude list before filtering is NVIDIA's _EXCLUDE_MODULES, in its
// order, plus the KDA f_a/b patterns NVIDIA never needs.
func TestModelOptExcludesK3(t *testing.T) {
	t.Parallel()
	want := []string{
		"*block_sparse_moe.gate*", "*block_sparse_moe.routed_expert_up_proj*", "*block_sparse_moe.routed_expert_down_proj*",
		"*block_sparse_moe.routed_expert_norm*", "*block_sparse_moe.shared_experts*",
		"*self_attn.q_conv1d*", "*self_attn.k_conv1d*", "*self_attn.v_conv1d*", "*self_attn.f_b_proj*",
		"*self_attn.o_norm*", "*self_attn.q_a_layernorm*", "*self_attn.kv_a_layernorm*",
		"*_res_proj*", "*_res_norm*", "*layernorm*",
		"language_model.model.layers.0.mlp.*", "language_model.lm_head", "vision_tower*", "mm_projector*",
		"*self_attn.f_a_proj*", "*self_attn.b_proj*",
	}
	if got := mustK3(t).ModelOptExcludes(); !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestMatchModule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pat, name string
		want      bool
	}{
		{"*mlp.gate*", "model.layers.0.mlp.gate_up_proj", true},
		{"*mlp.gate*", "model.layers.1.mlp.shared_experts.gate_proj", false},
		{"*block_sparse_moe.gate*", "language_model.model.layers.1.block_sparse_moe.experts", false},
		{"layers.0.mlp.*", "model.layers.0.mlp.down_proj", false},
		{"vision_tower*", "vision_tower.encoder.blocks.0.wqkv", true},
	} {
		if got := ModuleMatcher(tc.pat)(tc.name); got != tc.want {
			t.Errorf("ModuleMatcher(%q)(%q) = %v", tc.pat, tc.name, got)
		}
	}
}

// A source config with its quantization_config inside text_config (as the
// release ships it) parses, and a conversion's top-level config states the experts.
func TestConvertedConfigs(t *testing.T) {
	t.Parallel()
	// The source's compressed-tensors config where the release keeps it.
	raw := func() map[string]any {
		m := k3Raw(t)
		if q, ok := m["quantization_config"]; ok {
			m["text_config"].(map[string]any)["quantization_config"] = q
			delete(m, "quantization_config")
		}
		return m
	}
	if c, err := ParseConfig(encode(t, raw())); err != nil || c.Experts != ExpertsMXFP4 || c.GroupSize != 32 || c.Converted != "" {
		t.Fatalf("source in text_config: %v %+v", err, c)
	}
	mixed := func(layers map[string]any, ignore ...any) map[string]any {
		m := raw()
		delete(m["text_config"].(map[string]any), "quantization_config")
		m["quantization_config"] = map[string]any{"quant_method": "modelopt_mixed", "quant_algo": "MIXED_PRECISION",
			"quantized_layers": layers, "ignore": ignore}
		return m
	}
	fp8 := map[string]any{"quant_algo": "FP8_PB_WO"}
	nv := map[string]any{"quant_algo": "NVFP4", "group_size": json.Number("16")}
	for _, tc := range []struct {
		name  string
		m     map[string]any
		want  ExpertFormat
		group int64
	}{
		{"keep", mixed(map[string]any{"model.layers.3.self_attn.q_a_proj": fp8}, "*mlp.gate*"), ExpertsMXFP4, 32},
		{"nvfp4", mixed(map[string]any{"layers.1.mlp.experts": nv, "model.layers.3.self_attn.q_a_proj": fp8}), ExpertsNVFP4, 16},
		{"bf16", mixed(map[string]any{"model.layers.3.self_attn.q_a_proj": fp8}, "model.layers.1.mlp.experts"), ExpertsBF16, 0},
		{"deepseek", func() map[string]any {
			m := raw()
			m["quantization_config"] = map[string]any{"quant_method": "fp8", "weight_block_size": []any{json.Number("128"), json.Number("128")}}
			return m
		}(), ExpertsMXFP4, 32},
	} {
		c, err := ParseConfig(encode(t, tc.m))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c.Experts != tc.want || c.GroupSize != tc.group || c.NumTensors() != 497220+(boolInt(tc.want == ExpertsNVFP4)*6-boolInt(tc.want == ExpertsBF16)*3)*92*896 {
			t.Errorf("%s: experts %v group %d tensors %d", tc.name, c.Experts, c.GroupSize, c.NumTensors())
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// One K3 expert as NVFP4: per projection codes N·K/2, E4M3 scales N·K/16 and
// two fp32 scalars (3072·1792 + 3072·224 + 8 for w1 and w3, 3584·1536 +
// 3584·192 + 8 for w2).
func TestExpertBytes(t *testing.T) {
	t.Parallel()
	c := mustK3(t)
	if got := c.expertBytes(ExpertsMXFP4); got != 17547264 {
		t.Errorf("MXFP4 expert %d bytes, want 17547264", got)
	}
	if got, want := c.expertBytes(ExpertsNVFP4), int64(2*(3072*1792+3072*224+8)+3584*1536+3584*192+8); got != want {
		t.Errorf("NVFP4 expert %d bytes, want %d", got, want)
	}
}
