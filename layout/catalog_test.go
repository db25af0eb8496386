package layout

import (
	"fmt"

	st "github.com/k3ckpt/k3ckpt/safetensors"
)

// dims shapes a K3-like tensor catalog for tests, written from the released
// tensor shapes independently of the model package.
type dims struct {
	layers, h, linHeads, attnHeads, vocab, dense, experts, moeInter, latent, shared int64
	vision                                                                          bool
}

var k3Dims = dims{layers: 93, h: 7168, linHeads: 96, attnHeads: 96, vocab: 163840, dense: 33792,
	experts: 896, moeInter: 3072, latent: 3584, shared: 6144, vision: true}

// tinyDims keeps K3's structure (93 layers, MLA every 4th and the last) at a
// small width, so every built-in layout applies unchanged.
var tinyDims = dims{layers: 93, h: 256, linHeads: 16, attnHeads: 16, vocab: 1024, dense: 512,
	experts: 32, moeInter: 256, latent: 256, shared: 512, vision: true}

func (d dims) model() Model {
	return Model{Layers: int(d.layers), AttnHeads: int(d.attnHeads), LinearHeads: int(d.linHeads), Experts: int(d.experts), AttnResBlock: 12}
}

// isMLA: 0-based layer l is MLA when l+1 is in full_attn_layers = [4, 8, …, 92, 93].
func (d dims) isMLA(l int64) bool { return (l+1)%4 == 0 || l == d.layers-1 }

// catalog lists every tensor of a BF16 K3-like checkpoint.
func (d dims) catalog() []st.TensorSpec {
	var out []st.TensorSpec
	add := func(name string, dt st.DType, shape ...int64) {
		out = append(out, st.TensorSpec{Name: name, DType: dt, Shape: shape})
	}
	P, H := "language_model.model.", d.h
	for l := int64(0); l < d.layers; l++ {
		L := fmt.Sprintf("%slayers.%d.", P, l)
		for _, n := range []string{"input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"} {
			add(L+n+".weight", st.BF16, H)
		}
		add(L+"self_attention_res_proj.weight", st.BF16, 1, H)
		add(L+"mlp_res_proj.weight", st.BF16, 1, H)
		A := L + "self_attn."
		if d.isMLA(l) {
			nh := d.attnHeads
			add(A+"q_a_proj.weight", st.BF16, 1536, H)
			add(A+"q_a_layernorm.weight", st.BF16, 1536)
			add(A+"q_b_proj.weight", st.BF16, nh*192, 1536)
			add(A+"kv_a_proj_with_mqa.weight", st.BF16, 576, H)
			add(A+"kv_a_layernorm.weight", st.BF16, 512)
			add(A+"kv_b_proj.weight", st.BF16, nh*256, 512)
			add(A+"o_proj.weight", st.BF16, H, nh*128)
			add(A+"g_proj.weight", st.BF16, nh*128, H)
		} else {
			w := d.linHeads * 128
			for _, n := range []string{"q", "k", "v", "g"} {
				add(A+n+"_proj.weight", st.BF16, w, H)
			}
			add(A+"o_proj.weight", st.BF16, H, w)
			add(A+"f_a_proj.weight", st.BF16, 128, H)
			add(A+"f_b_proj.weight", st.BF16, w, 128)
			add(A+"b_proj.weight", st.BF16, d.linHeads, H)
			for _, n := range []string{"q", "k", "v"} {
				add(A+n+"_conv1d.weight", st.F32, w, 1, 4)
			}
			add(A+"dt_bias", st.F32, w)
			add(A+"o_norm.weight", st.F32, 128)
			add(A+"A_log", st.F32, 128)
		}
		if l == 0 {
			add(L+"mlp.gate_proj.weight", st.BF16, d.dense, H)
			add(L+"mlp.up_proj.weight", st.BF16, d.dense, H)
			add(L+"mlp.down_proj.weight", st.BF16, H, d.dense)
			continue
		}
		M := L + "block_sparse_moe."
		add(M+"gate.weight", st.BF16, d.experts, H)
		add(M+"gate.e_score_correction_bias", st.F32, d.experts)
		add(M+"routed_expert_down_proj.weight", st.BF16, d.latent, H)
		add(M+"routed_expert_up_proj.weight", st.BF16, H, d.latent)
		add(M+"routed_expert_norm.weight", st.BF16, d.latent)
		add(M+"shared_experts.gate_proj.weight", st.BF16, d.shared, H)
		add(M+"shared_experts.up_proj.weight", st.BF16, d.shared, H)
		add(M+"shared_experts.down_proj.weight", st.BF16, H, d.shared)
		for e := int64(0); e < d.experts; e++ {
			E := fmt.Sprintf("%sexperts.%d.", M, e)
			add(E+"w1.weight_packed", st.U8, d.moeInter, d.latent/2)
			add(E+"w1.weight_scale", st.U8, d.moeInter, d.latent/32)
			add(E+"w2.weight_packed", st.U8, d.latent, d.moeInter/2)
			add(E+"w2.weight_scale", st.U8, d.latent, d.moeInter/32)
			add(E+"w3.weight_packed", st.U8, d.moeInter, d.latent/2)
			add(E+"w3.weight_scale", st.U8, d.moeInter, d.latent/32)
		}
	}
	add(P+"embed_tokens.weight", st.BF16, d.vocab, H)
	add("language_model.lm_head.weight", st.BF16, d.vocab, H)
	add(P+"norm.weight", st.BF16, H)
	add(P+"output_attn_res_norm.weight", st.BF16, H)
	add(P+"output_attn_res_proj.weight", st.BF16, 1, H)
	if d.vision {
		for b := 0; b < 27; b++ {
			B := fmt.Sprintf("vision_tower.encoder.blocks.%d.", b)
			add(B+"wqkv.weight", st.BF16, 4608, 1024)
			add(B+"wo.weight", st.BF16, 1024, 1536)
			add(B+"mlp.fc0.weight", st.BF16, 4096, 1024)
			add(B+"mlp.fc1.weight", st.BF16, 1024, 4096)
			add(B+"norm0.weight", st.BF16, 1024)
			add(B+"norm1.weight", st.BF16, 1024)
		}
		add("vision_tower.encoder.final_layernorm.weight", st.BF16, 1024)
		add("vision_tower.patch_embed.pos_emb.weight", st.BF16, 64, 64, 1024)
		add("vision_tower.patch_embed.proj.weight", st.BF16, 1024, 3, 14, 14)
		add("mm_projector.post_norm.weight", st.BF16, H)
		add("mm_projector.proj.0.weight", st.BF16, 4096, 4096)
		add("mm_projector.proj.2.weight", st.BF16, H, 4096)
	}
	return out
}

// fp8Converted is the ATTN-MOE-DENSE-FP8 recipe applied to a catalog: the listed BF16
// projections become F8_E4M3 plus an F32 scale of the 128×128 block grid,
// named with the given suffix (".weight_scale_inv" for DeepSeek/SGLang).
func fp8Converted(in []st.TensorSpec, suffix string, modelopt bool) []st.TensorSpec {
	targets := []string{
		".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight", ".self_attn.g_proj.weight",
		".self_attn.o_proj.weight", ".self_attn.q_a_proj.weight", ".self_attn.q_b_proj.weight",
		".self_attn.kv_a_proj_with_mqa.weight", ".self_attn.kv_b_proj.weight",
		".shared_experts.gate_proj.weight", ".shared_experts.up_proj.weight", ".shared_experts.down_proj.weight",
		".routed_expert_down_proj.weight", ".routed_expert_up_proj.weight",
		".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight",
	}
	var out []st.TensorSpec
	for _, t := range in {
		conv := false
		for _, s := range targets {
			if len(t.Name) > len(s) && t.Name[len(t.Name)-len(s):] == s && t.Name[:9] == "language_" {
				conv = true
			}
		}
		if !conv {
			out = append(out, t)
			continue
		}
		out = append(out, st.TensorSpec{Name: t.Name, DType: st.F8_E4M3, Shape: t.Shape})
		gn, gk := (t.Shape[0]+127)/128, (t.Shape[1]+127)/128
		shape := []int64{gn, gk}
		if modelopt {
			shape = []int64{gn, 1, gk, 1}
		}
		base := t.Name[:len(t.Name)-len(".weight")]
		out = append(out, st.TensorSpec{Name: base + suffix, DType: st.F32, Shape: shape})
	}
	return out
}
