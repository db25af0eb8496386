// Package model knows the Kimi-K3 architecture: it parses and validates a K3
// config.json, derives the layer schedule and the tensor catalog (every name,
// dtype and shape the checkpoint must hold), assigns tensors to components and
// shards, and writes faithful replicas of the checkpoint at any scale (Synth).
package model

import (
	"fmt"
	"regexp"
	"strconv"
)

// Component is the accounting class of a tensor. inspect, convert and layout
// all classify through the one table in this file, so a tensor is counted the
// same way everywhere.
type Component uint8

const (
	// Other holds tensors no rule recognises; they are reported, never dropped.
	Other Component = iota
	// AttentionKDA is a KDA (linear attention) layer's self_attn tensors.
	AttentionKDA
	// AttentionMLA is an MLA (full attention) layer's self_attn tensors.
	AttentionMLA
	// SharedExperts is a MoE layer's always-active shared experts.
	SharedExperts
	// Latent is the latent MoE projections (routed_expert_down/up_proj) and routed_expert_norm.
	Latent
	// Router is the MoE gate weight and its e_score_correction_bias.
	Router
	// RoutedExperts is the MXFP4 routed experts.
	RoutedExperts
	// DenseMLP is the dense MLP of the first_k_dense_replace layers (layer 0 in K3).
	DenseMLP
	// Embedding is embed_tokens.
	Embedding
	// LMHead is the output projection.
	LMHead
	// Norms is layer norms, AttnRes norms and projections, the final norm and output_attn_res_*.
	Norms
	// Vision is the vision tower and the multimodal projector.
	Vision

	// NumComponents is the number of classes, for arrays indexed by Component.
	NumComponents = int(Vision) + 1
)

var componentNames = [NumComponents]string{
	Other:         "other",
	AttentionKDA:  "attention.kda",
	AttentionMLA:  "attention.mla",
	SharedExperts: "shared_experts",
	Latent:        "latent",
	Router:        "router",
	RoutedExperts: "routed_experts",
	DenseMLP:      "dense_mlp",
	Embedding:     "embedding",
	LMHead:        "lm_head",
	Norms:         "norms",
	Vision:        "vision",
}

// String is the class name used in reports (e.g. "attention.kda").
func (c Component) String() string {
	if int(c) < NumComponents {
		return componentNames[c]
	}
	return fmt.Sprintf("Component(%d)", uint8(c))
}

// IsAttention reports whether c is one of the two attention classes.
func (c Component) IsAttention() bool { return c == AttentionKDA || c == AttentionMLA }

// ParseComponent maps a class name back to its Component.
func ParseComponent(s string) (Component, error) {
	for i, n := range componentNames {
		if n == s {
			return Component(i), nil
		}
	}
	return Other, fmt.Errorf("model: unknown component %q", s)
}

// Components lists every class in enum order.
func Components() []Component {
	out := make([]Component, NumComponents)
	for i := range out {
		out[i] = Component(i)
	}
	return out
}

// attnEither marks rules whose tensors exist in both KDA and MLA layers
// (o_proj, g_proj): the layer schedule decides their class.
const attnEither Component = 255

// scaleSuffix maps the companion tensors of a quantized weight (block-FP8
// scales in every engine convention, compressed-tensors packed data and
// scales, activation scales) back to the weight they belong to, so that they
// land in their weight's class.
var scaleSuffix = regexp.MustCompile(`\.(?:weight_scale_inv|weight_scale|weight_packed|weight_global_scale|weight_zero_point|input_scale)$`)

// componentRules is THE classification table. Patterns are anchored on the
// end of the name and allow any prefix, so they match both the multimodal
// checkpoint (language_model.model.…) and a bare text checkpoint (model.…).
// At most one rule matches any tensor of a K3 checkpoint (tested on the full
// catalog), so the order only matters for foreign names.
var componentRules = []struct {
	class   Component
	pattern *regexp.Regexp
}{
	{Vision, regexp.MustCompile(`(?:^|\.)(?:vision_tower|mm_projector)\.`)},
	{RoutedExperts, regexp.MustCompile(`(?:^|\.)layers\.\d+\.(?:block_sparse_moe|mlp)\.experts\.\d+\.`)},
	{SharedExperts, regexp.MustCompile(`(?:^|\.)layers\.\d+\.(?:block_sparse_moe|mlp)\.shared_experts\.(?:gate|up|down)_proj\.weight$`)},
	{Latent, regexp.MustCompile(`(?:^|\.)layers\.\d+\.block_sparse_moe\.routed_expert_(?:down_proj|up_proj|norm)\.weight$`)},
	{Router, regexp.MustCompile(`(?:^|\.)layers\.\d+\.(?:block_sparse_moe|mlp)\.gate\.(?:weight|e_score_correction_bias)$`)},
	{DenseMLP, regexp.MustCompile(`(?:^|\.)layers\.\d+\.mlp\.(?:gate|up|down)_proj\.weight$`)},
	{AttentionKDA, regexp.MustCompile(`(?:^|\.)layers\.\d+\.self_attn\.(?:(?:q|k|v|f_a|f_b|b)_proj\.weight|[qkv]_conv1d\.weight|o_norm\.weight|dt_bias|A_log)$`)},
	{AttentionMLA, regexp.MustCompile(`(?:^|\.)layers\.\d+\.self_attn\.(?:q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|q_a_layernorm|kv_a_layernorm)\.weight$`)},
	{attnEither, regexp.MustCompile(`(?:^|\.)layers\.\d+\.self_attn\.(?:o|g)_proj\.weight$`)},
	{Norms, regexp.MustCompile(`(?:^|\.)layers\.\d+\.(?:input_layernorm|post_attention_layernorm|self_attention_res_norm|mlp_res_norm|self_attention_res_proj|mlp_res_proj)\.weight$`)},
	{Norms, regexp.MustCompile(`(?:^|\.)model\.(?:norm|output_attn_res_norm|output_attn_res_proj)\.weight$`)},
	{Embedding, regexp.MustCompile(`(?:^|\.)embed_tokens\.weight$`)},
	{LMHead, regexp.MustCompile(`(?:^|\.)lm_head\.weight$`)},
}

var (
	layerRE  = regexp.MustCompile(`(?:^|\.)layers\.(\d+)\.`)
	expertRE = regexp.MustCompile(`\.experts\.(\d+)\.`)
)

// Classifier puts tensor names into components. It carries the layer
// schedule because o_proj and g_proj exist in both KDA and MLA layers and only
// the schedule tells them apart.
type Classifier struct {
	mla []bool // indexed by 0-based layer
}

// NewClassifier builds a classifier for a layer schedule.
func NewClassifier(layers []Layer) *Classifier {
	c := &Classifier{mla: make([]bool, len(layers))}
	for i, l := range layers {
		c.mla[i] = l.Attention == MLA
	}
	return c
}

// k3Classifier uses the public K3 schedule, for callers without a config.
var k3Classifier = func() *Classifier {
	full, _ := k3FullAttnLayers()
	c := &Classifier{mla: make([]bool, k3Layers)}
	for _, l := range full {
		c.mla[l-1] = true
	}
	return c
}()

// Classify classifies a name with the public K3 layer schedule. Use
// (*Config).Classifier when the checkpoint's own config is at hand: only
// o_proj/g_proj depend on the schedule.
func Classify(name string) Component { return k3Classifier.Classify(name) }

// Classify returns the component of a tensor name. Quantization companions
// (X.weight_scale_inv, X.weight_scale, X.input_scale, …) get X.weight's class.
// o_proj/g_proj of a layer outside the schedule cannot be resolved and are
// Other.
func (c *Classifier) Classify(name string) Component {
	base := scaleSuffix.ReplaceAllString(name, ".weight")
	for _, r := range componentRules {
		if !r.pattern.MatchString(base) {
			continue
		}
		if r.class != attnEither {
			return r.class
		}
		l, ok := LayerOf(base)
		switch {
		case !ok || l >= len(c.mla):
			return Other
		case c.mla[l]:
			return AttentionMLA
		default:
			return AttentionKDA
		}
	}
	return Other
}

// LayerOf returns the 0-based decoder layer a tensor belongs to.
func LayerOf(name string) (layer int, ok bool) {
	return submatchInt(layerRE, name)
}

// ExpertOf returns the routed expert index of an expert tensor.
func ExpertOf(name string) (expert int, ok bool) {
	return submatchInt(expertRE, name)
}

func submatchInt(re *regexp.Regexp, name string) (int, bool) {
	m := re.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, false
	}
	return n, true
}
