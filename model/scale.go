package model

import (
	"encoding/json"
	"fmt"
)

// Scale selects the dimensions of a replica.
type Scale uint8

const (
	// ScaleFull is the public Kimi-K3 checkpoint's real dimensions (1453.66 GiB).
	ScaleFull Scale = iota
	// ScaleSmall keeps the 93-layer schedule with reduced dimensions (~1 GB), for benchmarks.
	ScaleSmall
	// ScaleTiny keeps the 93-layer schedule with minimal dimensions (<64 MB), for tests and the demo.
	ScaleTiny
)

var scaleNames = [...]string{ScaleFull: "full", ScaleSmall: "small", ScaleTiny: "tiny"}

// String returns "full", "small" or "tiny".
func (s Scale) String() string {
	if int(s) < len(scaleNames) {
		return scaleNames[s]
	}
	return fmt.Sprintf("Scale(%d)", uint8(s))
}

// ParseScale parses a scale name.
func ParseScale(name string) (Scale, error) {
	for i, n := range scaleNames {
		if n == name {
			return Scale(i), nil
		}
	}
	return 0, fmt.Errorf("model: unknown scale %q (want full, small or tiny)", name)
}

// Set implements pflag.Value so a Scale can be a command-line flag.
func (s *Scale) Set(name string) error {
	v, err := ParseScale(name)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Type implements pflag.Value.
func (s *Scale) Type() string { return "scale" }

// dims are the sizes that vary between scales. Everything else (93 layers,
// the MLA schedule, AttnRes blocks of 12, one dense layer, names, dtypes) is
// the same at every scale, so every layout of SPEC §5–6 applies to each.
type dims struct {
	hidden, vocab, intermediate                     int64
	heads, qLora, kvLora, qkNope, qkRope, vHead     int64
	kdaHeads, kdaHeadDim                            int64
	experts, topK, shared, moeInter, latent         int64
	vtHidden, vtLayers, vtInter, vtHeads, vtHeadDim int64
	patch, posEmb, mmHidden                         int64
}

// scaleDims is the one table of replica dimensions. Full is SPEC §1.1/§1.2.
// Tiny and small keep experts a multiple of 16 (EP16), KDA and MLA heads and
// the vocabulary divisible by 8 (TP8, weight shard, vocab TP8), and rows that
// are not multiples of 128 (kv_a_proj_with_mqa: kvLora+qkRope, b_proj: kdaHeads,
// latent, hidden) so block-FP8 conversion meets partial blocks, as the real
// 576-row kv_a_proj_with_mqa and 96-row b_proj do.
var scaleDims = [...]dims{
	ScaleFull: {
		hidden: 7168, vocab: 163840, intermediate: 33792,
		heads: 96, qLora: 1536, kvLora: 512, qkNope: 128, qkRope: 64, vHead: 128,
		kdaHeads: 96, kdaHeadDim: 128,
		experts: 896, topK: 16, shared: 2, moeInter: 3072, latent: 3584,
		vtHidden: 1024, vtLayers: 27, vtInter: 4096, vtHeads: 12, vtHeadDim: 128,
		patch: 14, posEmb: 64, mmHidden: 4096,
	},
	ScaleSmall: {
		hidden: 704, vocab: 16000, intermediate: 1920,
		heads: 16, qLora: 192, kvLora: 256, qkNope: 32, qkRope: 32, vHead: 32,
		kdaHeads: 16, kdaHeadDim: 32,
		experts: 64, topK: 8, shared: 2, moeInter: 128, latent: 288,
		vtHidden: 256, vtLayers: 4, vtInter: 1024, vtHeads: 4, vtHeadDim: 96,
		patch: 14, posEmb: 16, mmHidden: 1024,
	},
	ScaleTiny: {
		hidden: 160, vocab: 1000, intermediate: 320,
		heads: 8, qLora: 96, kvLora: 128, qkNope: 16, qkRope: 16, vHead: 16,
		kdaHeads: 8, kdaHeadDim: 16,
		experts: 32, topK: 4, shared: 2, moeInter: 32, latent: 96,
		vtHidden: 64, vtLayers: 2, vtInter: 128, vtHeads: 2, vtHeadDim: 48,
		patch: 14, posEmb: 8, mmHidden: 256,
	},
}

// K3 schedule facts shared by every scale (SPEC §1.1).
const (
	k3Layers         = 93
	k3AttnResBlock   = 12
	k3FirstKDense    = 1
	k3MLAEvery       = 4    // full_attn_layers = 4, 8, …, 92 (1-based) …
	k3LastLayerIsMLA = true // … plus 93
	k3ConvKernel     = 4
	k3MaxPositions   = 1048576
)

// k3FullAttnLayers is the 1-based MLA list [4, 8, …, 92, 93].
func k3FullAttnLayers() (full, kda []int) {
	for l := 1; l <= k3Layers; l++ {
		if l%k3MLAEvery == 0 || (k3LastLayerIsMLA && l == k3Layers) {
			full = append(full, l)
		} else {
			kda = append(kda, l)
		}
	}
	return full, kda
}

// sourceIgnore is the source quantization_config's ignore list (SPEC §1.1).
var sourceIgnore = []any{
	`re:.*self_attn.*`,
	`re:.*shared_experts.*`,
	`re:.*mlp\.(gate|up|gate_up|down)_proj.*`,
	`re:.*lm_head.*`,
	`re:.*vision_tower.*`,
	`re:.*mm_projector.*`,
}

// sourceTargets selects the routed experts' Linear modules. SPEC §1.1 gives
// only the ignore list; with the usual ["Linear"] target, the BF16 latent
// projections (routed_expert_down/up_proj) would not be ignored and a
// compressed-tensors loader would expect them packed, so the target is the
// experts themselves.
var sourceTargets = []any{`re:.*experts\.\d+\.w[123]$`}

func num(v int64) json.Number { return json.Number(fmt.Sprint(v)) }

func layerNums(ls []int) []any {
	out := make([]any, len(ls))
	for i, l := range ls {
		out[i] = num(int64(l))
	}
	return out
}

// configJSON builds the full kimi_k3 config.json object for a scale.
func configJSON(d dims) map[string]any {
	full, kda := k3FullAttnLayers()
	text := map[string]any{
		"model_type":              "kimi_linear",
		"architectures":           []any{"KimiLinearForCausalLM"},
		"num_hidden_layers":       num(k3Layers),
		"hidden_size":             num(d.hidden),
		"num_attention_heads":     num(d.heads),
		"num_key_value_heads":     num(d.heads),
		"vocab_size":              num(d.vocab),
		"intermediate_size":       num(d.intermediate),
		"max_position_embeddings": num(k3MaxPositions),
		"rms_norm_eps":            json.Number("1e-05"),
		// SPEC §1.1 writes "situ"; no loader knows that activation, SiLU is meant.
		"hidden_act":          "silu",
		"q_lora_rank":         num(d.qLora),
		"kv_lora_rank":        num(d.kvLora),
		"qk_nope_head_dim":    num(d.qkNope),
		"qk_rope_head_dim":    num(d.qkRope),
		"v_head_dim":          num(d.vHead),
		"mla_use_output_gate": true,
		"linear_attn_config": map[string]any{
			"head_dim":               num(d.kdaHeadDim),
			"num_heads":              num(d.kdaHeads),
			"short_conv_kernel_size": num(k3ConvKernel),
			"use_full_rank_gate":     true,
			"full_attn_layers":       layerNums(full),
			"kda_layers":             layerNums(kda),
		},
		"attn_res_block_size":       num(k3AttnResBlock),
		"first_k_dense_replace":     num(k3FirstKDense),
		"num_experts":               num(d.experts),
		"num_experts_per_token":     num(d.topK),
		"num_shared_experts":        num(d.shared),
		"moe_intermediate_size":     num(d.moeInter),
		"routed_expert_hidden_size": num(d.latent),
		"latent_moe_use_norm":       true,
		"tie_word_embeddings":       false,
		"torch_dtype":               "bfloat16",
	}
	vision := map[string]any{
		"model_type":             "kimi_k3_vision",
		"vt_hidden_size":         num(d.vtHidden),
		"vt_num_hidden_layers":   num(d.vtLayers),
		"vt_intermediate_size":   num(d.vtInter),
		"vt_num_attention_heads": num(d.vtHeads),
		"vt_head_dim":            num(d.vtHeadDim),
		"patch_size":             num(d.patch),
		"num_channels":           num(3),
		"init_pos_emb_height":    num(d.posEmb),
		"init_pos_emb_width":     num(d.posEmb),
		"merge_kernel_size":      []any{num(2), num(2)},
		"mm_hidden_size":         num(d.mmHidden),
		"text_hidden_size":       num(d.hidden),
	}
	quant := map[string]any{
		"quant_method":        "compressed-tensors",
		"format":              mxfp4Format,
		"quantization_status": "compressed",
		"kv_cache_scheme":     nil,
		"ignore":              sourceIgnore,
		"config_groups": map[string]any{
			"group_0": map[string]any{
				"targets": sourceTargets,
				"format":  mxfp4Format,
				"weights": map[string]any{
					"num_bits":        num(4),
					"type":            "float",
					"strategy":        "group",
					"group_size":      num(32),
					"symmetric":       true,
					"dynamic":         false,
					"scale_dtype":     "torch.uint8",
					"actorder":        nil,
					"block_structure": nil,
					"observer":        "minmax",
				},
				"input_activations":  nil,
				"output_activations": nil,
			},
		},
	}
	return map[string]any{
		"architectures":       []any{"KimiK3ForConditionalGeneration"},
		"model_type":          "kimi_k3",
		"text_config":         text,
		"vision_config":       vision,
		"quantization_config": quant,
		"tie_word_embeddings": false,
	}
}

// ScaledConfigJSON is the config.json of a replica at a scale (what synth writes).
func ScaledConfigJSON(sc Scale) ([]byte, error) {
	if int(sc) >= len(scaleDims) {
		return nil, fmt.Errorf("model: unknown scale %d", sc)
	}
	b, err := json.MarshalIndent(configJSON(scaleDims[sc]), "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ScaledConfig is the parsed config of a replica at a scale.
func ScaledConfig(sc Scale) (*Config, error) {
	b, err := ScaledConfigJSON(sc)
	if err != nil {
		return nil, err
	}
	return ParseConfig(b)
}

// K3Config is the public Kimi-K3 config (SPEC §1.1).
func K3Config() (*Config, error) { return ScaledConfig(ScaleFull) }
