package model

import (
	"strings"
	"testing"
)

func TestComponentNames(t *testing.T) {
	t.Parallel()
	want := []string{"other", "attention.kda", "attention.mla", "shared_experts", "latent", "router",
		"routed_experts", "dense_mlp", "embedding", "lm_head", "norms", "vision", "attention", "mtp"}
	got := components()
	if len(got) != len(want) {
		t.Fatalf("%d components, want %d", len(got), len(want))
	}
	for i, c := range got {
		if c.String() != want[i] {
			t.Errorf("component %d: %q, want %q", i, c, want[i])
		}
		back, err := ParseComponent(want[i])
		if err != nil || back != c {
			t.Errorf("ParseComponent(%q) = %v, %v", want[i], back, err)
		}
	}
	if _, err := ParseComponent("attention.gqa"); err == nil {
		t.Error("ParseComponent accepted an unknown name")
	}
	if s := Component(200).String(); !strings.Contains(s, "200") {
		t.Errorf("out-of-range String() = %q", s)
	}
}

// Names written out by hand from the released checkpoint (0-based layer 3 is MLA, 0 and 1 KDA, 92 MLA).
func TestClassify(t *testing.T) {
	t.Parallel()
	P := "language_model.model."
	cases := []struct {
		name string
		want Component
	}{
		{P + "layers.0.self_attn.q_proj.weight", attentionKDA},
		{P + "layers.1.self_attn.o_proj.weight", attentionKDA},
		{P + "layers.1.self_attn.g_proj.weight", attentionKDA},
		{P + "layers.3.self_attn.o_proj.weight", attentionMLA},
		{P + "layers.3.self_attn.g_proj.weight", attentionMLA},
		{P + "layers.92.self_attn.g_proj.weight", attentionMLA},
		{P + "layers.91.self_attn.o_proj.weight", attentionMLA},
		{P + "layers.90.self_attn.o_proj.weight", attentionKDA},
		{P + "layers.5.self_attn.A_log", attentionKDA},
		{P + "layers.5.self_attn.dt_bias", attentionKDA},
		{P + "layers.5.self_attn.q_conv1d.weight", attentionKDA},
		{P + "layers.5.self_attn.o_norm.weight", attentionKDA},
		{P + "layers.5.self_attn.b_proj.weight", attentionKDA},
		{P + "layers.5.self_attn.f_a_proj.weight", attentionKDA},
		{P + "layers.7.self_attn.kv_a_proj_with_mqa.weight", attentionMLA},
		{P + "layers.7.self_attn.kv_a_layernorm.weight", attentionMLA},
		{P + "layers.7.self_attn.q_a_layernorm.weight", attentionMLA},
		{P + "layers.7.self_attn.q_b_proj.weight", attentionMLA},
		{P + "layers.7.self_attn.q_b_proj.weight_scale_inv", attentionMLA},
		{P + "layers.3.self_attn.o_proj.weight_scale", attentionMLA},
		{P + "layers.2.self_attn.o_proj.weight_scale_inv", attentionKDA},
		{P + "layers.2.self_attn.o_proj.input_scale", attentionKDA},
		{P + "layers.1.block_sparse_moe.shared_experts.down_proj.weight", sharedExperts},
		{P + "layers.1.block_sparse_moe.shared_experts.down_proj.weight_scale_inv", sharedExperts},
		{P + "layers.1.block_sparse_moe.routed_expert_down_proj.weight", latentMoE},
		{P + "layers.1.block_sparse_moe.routed_expert_up_proj.weight_scale", latentMoE},
		{P + "layers.1.block_sparse_moe.routed_expert_norm.weight", latentMoE},
		{P + "layers.1.block_sparse_moe.gate.weight", router},
		{P + "layers.1.block_sparse_moe.gate.e_score_correction_bias", router},
		{P + "layers.1.block_sparse_moe.experts.0.w1.weight_packed", RoutedExperts},
		{P + "layers.92.block_sparse_moe.experts.895.w2.weight_scale", RoutedExperts},
		{P + "layers.0.mlp.gate_proj.weight", denseMLP},
		{P + "layers.0.mlp.down_proj.weight_scale_inv", denseMLP},
		{P + "layers.0.input_layernorm.weight", norms},
		{P + "layers.0.post_attention_layernorm.weight", norms},
		{P + "layers.0.self_attention_res_norm.weight", norms},
		{P + "layers.0.mlp_res_proj.weight", norms},
		{P + "norm.weight", norms},
		{P + "output_attn_res_norm.weight", norms},
		{P + "output_attn_res_proj.weight", norms},
		{P + "embed_tokens.weight", embedding},
		{"language_model.lm_head.weight", lMHead},
		{"vision_tower.encoder.blocks.3.wqkv.weight", vision},
		{"vision_tower.encoder.blocks.26.norm0.weight", vision},
		{"vision_tower.patch_embed.pos_emb.weight", vision},
		{"mm_projector.post_norm.weight", vision},
		{"mm_projector.proj.2.weight", vision},
		// a bare text checkpoint
		{"model.layers.3.self_attn.o_proj.weight", attentionMLA},
		{"model.embed_tokens.weight", embedding},
		{"model.norm.weight", norms},
		{"lm_head.weight", lMHead},
		// never dropped, never guessed
		{P + "layers.1.block_sparse_moe.something_new.weight", Other},
		{P + "layers.500.self_attn.o_proj.weight", Other},
		{"rotary_emb.inv_freq", Other},
		{"", Other},
	}
	for _, c := range cases {
		if got := k3Classifier.Classify(c.name); got != c.want {
			t.Errorf("k3Classifier.Classify(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

// The classifier follows the schedule it is given, not K3's.
func TestClassifierSchedule(t *testing.T) {
	t.Parallel()
	c := newClassifier(k3Schema, []layer{{Index: 0, Attention: mLA}, {Index: 1, Attention: kDA}})
	if got := c.Classify("model.layers.0.self_attn.o_proj.weight"); got != attentionMLA {
		t.Errorf("layer 0 o_proj: %v", got)
	}
	if got := c.Classify("model.layers.1.self_attn.g_proj.weight"); got != attentionKDA {
		t.Errorf("layer 1 g_proj: %v", got)
	}
	if got := c.Classify("model.layers.3.self_attn.g_proj.weight"); got != Other {
		t.Errorf("layer outside schedule: %v", got)
	}
}

func TestLayerExpertOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		layer, expert  int
		isLayer, isExp bool
	}{
		{"language_model.model.layers.17.block_sparse_moe.experts.123.w1.weight_packed", 17, 123, true, true},
		{"language_model.model.layers.0.self_attn.q_proj.weight", 0, 0, true, false},
		{"model.layers.92.mlp_res_norm.weight", 92, 0, true, false},
		{"vision_tower.encoder.blocks.5.wo.weight", 0, 0, false, false},
		{"language_model.model.embed_tokens.weight", 0, 0, false, false},
		{"language_model.model.layers.1.block_sparse_moe.shared_experts.up_proj.weight", 1, 0, true, false},
		{"model.layers.99999999999999999999999.x", 0, 0, false, false},
	}
	for _, c := range cases {
		n := k3Classifier.ParseName(c.name)
		if l, ok := n.Layer, n.Layer >= 0; ok != c.isLayer || (ok && l != c.layer) {
			t.Errorf("ParseName(%q).Layer = %d", c.name, n.Layer)
		}
		if e, ok := n.Expert, n.Expert >= 0; ok != c.isExp || (ok && e != c.expert) {
			t.Errorf("ParseName(%q).Expert = %d", c.name, n.Expert)
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	name := "language_model.model.layers.17.block_sparse_moe.experts.123.w1.weight_packed"
	b.ReportAllocs()
	for b.Loop() {
		k3Classifier.Classify(name)
	}
}
