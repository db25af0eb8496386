package model

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// Set implements pflag.Value so a Scale can be a command-line flag; the
// name's case does not matter there (--scale TINY).
func (s *Scale) Set(name string) error {
	if i := slices.Index(scaleNames[:], strings.ToLower(name)); i >= 0 {
		*s = Scale(i)
		return nil
	}
	return fmt.Errorf("model: unknown scale %q (want full, small or tiny)", strings.ToLower(name))
}

// Type implements pflag.Value.
func (s *Scale) Type() string { return "scale" }

// dims are the sizes that vary between scales; everything else of the
// released config is the same at every scale, so every layout applies to each.
type dims struct {
	hidden, vocab, intermediate                     int64
	heads, qLora, kvLora, qkNope, qkRope, vHead     int64
	kdaHeads, kdaHeadDim                            int64
	experts, topK, shared, moeInter, latent         int64
	vtHidden, vtLayers, vtInter, vtHeads, qkvHidden int64
	posEmb                                          int64
}

// scaleDims are the small and tiny replicas' dimensions (a test holds the
// release's, releasedDims). They keep experts a multiple of 16 (EP16), heads
// and vocabulary divisible by 8 (TP8), and rows that are not multiples of 128
// (kv_a_proj_with_mqa, b_proj, latent, hidden) so block-FP8 conversion meets
// partial blocks, as the real 576-row kv_a_proj_with_mqa and 96-row b_proj do.
var scaleDims = [...]dims{
	ScaleSmall: {
		hidden: 704, vocab: 16000, intermediate: 1920,
		heads: 16, qLora: 192, kvLora: 256, qkNope: 32, qkRope: 32, vHead: 32,
		kdaHeads: 16, kdaHeadDim: 32,
		experts: 64, topK: 8, shared: 2, moeInter: 128, latent: 288,
		vtHidden: 256, vtLayers: 4, vtInter: 1024, vtHeads: 4, qkvHidden: 384,
		posEmb: 16,
	},
	ScaleTiny: {
		hidden: 160, vocab: 1000, intermediate: 320,
		heads: 8, qLora: 96, kvLora: 128, qkNope: 16, qkRope: 16, vHead: 16,
		kdaHeads: 8, kdaHeadDim: 16,
		experts: 32, topK: 4, shared: 2, moeInter: 32, latent: 96,
		vtHidden: 64, vtLayers: 2, vtInter: 128, vtHeads: 2, qkvHidden: 96,
		posEmb: 8,
	},
}

// releasedConfig is the released Kimi-K3 config.json, byte for byte.
//
//go:embed testdata/k3/config.json
var releasedConfig []byte

// k3Layers is the released config's num_hidden_layers, at every scale.
const k3Layers = 93

// scaledRaw is the released config with a scale's dimensions set: the same
// keys, values and structure, only sizes changed.
func scaledRaw(d dims) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(releasedConfig))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		panic(err) // the embedded file, which the tests parse
	}
	text := raw["text_config"].(map[string]any)
	set := func(m map[string]any, kv ...any) {
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = json.Number(strconv.FormatInt(kv[i+1].(int64), 10))
		}
	}
	set(text,
		"hidden_size", d.hidden, "vocab_size", d.vocab, "intermediate_size", d.intermediate,
		"num_attention_heads", d.heads, "num_key_value_heads", d.heads,
		"q_lora_rank", d.qLora, "kv_lora_rank", d.kvLora,
		"qk_nope_head_dim", d.qkNope, "qk_rope_head_dim", d.qkRope, "v_head_dim", d.vHead,
		"num_experts", d.experts, "num_experts_per_token", d.topK, "num_shared_experts", d.shared,
		"moe_intermediate_size", d.moeInter, "routed_expert_hidden_size", d.latent)
	set(text["linear_attn_config"].(map[string]any), "head_dim", d.kdaHeadDim, "num_heads", d.kdaHeads)
	// mm_hidden_size is the vision tower's width in the release.
	set(raw["vision_config"].(map[string]any),
		"vt_hidden_size", d.vtHidden, "vt_num_hidden_layers", d.vtLayers, "vt_intermediate_size", d.vtInter,
		"vt_num_attention_heads", d.vtHeads, "qkv_hidden_size", d.qkvHidden, "mm_hidden_size", d.vtHidden,
		"init_pos_emb_height", d.posEmb, "init_pos_emb_width", d.posEmb, "text_hidden_size", d.hidden)
	return raw
}

// scaledConfigJSON is the config.json of a replica at a scale: the released
// file, at small and tiny with only its dimensions changed.
func scaledConfigJSON(sc Scale) ([]byte, error) {
	if int(sc) >= len(scaleDims) {
		return nil, fmt.Errorf("model: unknown scale %d", sc)
	}
	if sc == ScaleFull {
		return bytes.Clone(releasedConfig), nil
	}
	return MarshalConfig(scaledRaw(scaleDims[sc]))
}

// deepseekConfigs are the DeepSeek families' released configs
// (testdata/deepseek-v*/FACTS.md say from where; V4's is reconstructed from
// the fields public sources report) and tiny ones with their keys.
//
//go:embed testdata/deepseek-v3/config.json testdata/deepseek-v3/tiny.json
//go:embed testdata/deepseek-v4/config.json testdata/deepseek-v4/tiny.json
var deepseekConfigs embed.FS

// BuiltinFamilies names the built-in families FamilyConfigJSON knows, the
// default (Kimi-K3) first.
func BuiltinFamilies() []string { return []string{"kimi-k3", "deepseek-v3", "deepseek-v4"} }

// FamilyConfigJSON is the config.json of a built-in family's replica at a
// scale (the released config at full scale); the DeepSeek families have
// full and tiny.
func FamilyConfigJSON(family string, sc Scale) ([]byte, error) {
	switch family {
	case "", "kimi-k3":
		return scaledConfigJSON(sc)
	case "deepseek-v3", "deepseek-v4":
		if file := map[Scale]string{ScaleFull: "config.json", ScaleTiny: "tiny.json"}[sc]; file != "" {
			return deepseekConfigs.ReadFile("testdata/" + family + "/" + file)
		}
		return nil, fmt.Errorf("model: family %s has the scales full and tiny, not %s", family, sc)
	}
	return nil, fmt.Errorf("model: unknown family %q (built in: %s)", family, strings.Join(BuiltinFamilies(), ", "))
}
