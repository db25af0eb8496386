// Package model knows the Kimi-K3 architecture: it parses and validates a K3
// config.json, derives the layer schedule and the tensor catalog (every name,
// dtype and shape the checkpoint must hold), assigns tensors to components and
// shards, and writes faithful replicas of the checkpoint at any scale (Synth).
package model

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
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

// companionSuffix lists the companion tensors of a quantized weight X.weight
// (block-FP8 scales in every engine convention, compressed-tensors packed
// codes and scales, activation scales), so that they land in X's class.
var companionSuffix = map[string]bool{
	"weight_scale_inv":    true,
	"weight_scale":        true,
	"weight_packed":       true,
	"weight_global_scale": true,
	"weight_zero_point":   true,
	"input_scale":         true,
}

// ruleScope says what a rule's pattern is matched against.
type ruleScope uint8

const (
	// inLayer rules match the part of the name after "layers.N.".
	inLayer ruleScope = iota
	// topLevel rules match the whole name of a tensor outside the layers.
	topLevel
)

// componentRules is THE classification table. Patterns are anchored, so a
// miss costs a few bytes of matching; layer rules see only the tail after
// "layers.N.", so they match both the multimodal checkpoint
// (language_model.model.layers.…) and a bare text one (model.layers.…).
// At most one rule matches any tensor of a K3 checkpoint (tested on the full
// catalog), so the order only matters for foreign names.
var componentRules = []struct {
	class   Component
	scope   ruleScope
	pattern *regexp.Regexp
}{
	{RoutedExperts, inLayer, regexp.MustCompile(`^(?:block_sparse_moe|mlp)\.experts\.\d+\.`)},
	{SharedExperts, inLayer, regexp.MustCompile(`^(?:block_sparse_moe|mlp)\.shared_experts\.(?:gate|up|down)_proj\.weight$`)},
	{Latent, inLayer, regexp.MustCompile(`^block_sparse_moe\.routed_expert_(?:down_proj|up_proj|norm)\.weight$`)},
	{Router, inLayer, regexp.MustCompile(`^(?:block_sparse_moe|mlp)\.gate\.(?:weight|e_score_correction_bias)$`)},
	{DenseMLP, inLayer, regexp.MustCompile(`^mlp\.(?:gate|up|down)_proj\.weight$`)},
	{AttentionKDA, inLayer, regexp.MustCompile(`^self_attn\.(?:(?:q|k|v|f_a|f_b|b)_proj\.weight|[qkv]_conv1d\.weight|o_norm\.weight|dt_bias|A_log)$`)},
	{AttentionMLA, inLayer, regexp.MustCompile(`^self_attn\.(?:q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|q_a_layernorm|kv_a_layernorm)\.weight$`)},
	{attnEither, inLayer, regexp.MustCompile(`^self_attn\.(?:o|g)_proj\.weight$`)},
	{Norms, inLayer, regexp.MustCompile(`^(?:input_layernorm|post_attention_layernorm|self_attention_res_norm|mlp_res_norm|self_attention_res_proj|mlp_res_proj)\.weight$`)},
	{Vision, topLevel, regexp.MustCompile(`^(?:\w+\.)?(?:vision_tower|mm_projector)\.`)},
	{Norms, topLevel, regexp.MustCompile(`^(?:language_model\.)?model\.(?:norm|output_attn_res_norm|output_attn_res_proj)\.weight$`)},
	{Embedding, topLevel, regexp.MustCompile(`^(?:language_model\.)?model\.embed_tokens\.weight$`)},
	{LMHead, topLevel, regexp.MustCompile(`^(?:language_model\.)?lm_head\.weight$`)},
}

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
	layer, tail, isLayer := splitLayer(name)
	// 99.5% of a K3 checkpoint is routed-expert tensors: settle them without
	// regexps or the companion rewrite. This is exactly the table's first
	// rule (TestExpertFastPath checks the two agree).
	if isLayer && isExpertTail(tail) {
		return RoutedExperts
	}
	if dot := strings.LastIndexByte(name, '.'); dot >= 0 && companionSuffix[name[dot+1:]] {
		name = name[:dot] + ".weight"
		layer, tail, isLayer = splitLayer(name)
	}
	for _, r := range componentRules {
		var ok bool
		switch r.scope {
		case inLayer:
			ok = isLayer && r.pattern.MatchString(tail)
		case topLevel:
			ok = !isLayer && r.pattern.MatchString(name)
		}
		if !ok {
			continue
		}
		if r.class != attnEither {
			return r.class
		}
		switch {
		case layer >= len(c.mla):
			return Other
		case c.mla[layer]:
			return AttentionMLA
		default:
			return AttentionKDA
		}
	}
	return Other
}

// isExpertTail matches the RoutedExperts rule's pattern,
// ^(?:block_sparse_moe|mlp)\.experts\.\d+\., by hand.
func isExpertTail(tail string) bool {
	rest, ok := strings.CutPrefix(tail, "block_sparse_moe.experts.")
	if !ok {
		if rest, ok = strings.CutPrefix(tail, "mlp.experts."); !ok {
			return false
		}
	}
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	return j > 0 && j < len(rest) && rest[j] == '.'
}

// splitLayer finds the first "layers.N." segment (at the start or after a
// dot) and returns N and what follows it.
func splitLayer(name string) (layer int, tail string, ok bool) {
	const key = "layers."
	for from := 0; ; {
		i := strings.Index(name[from:], key)
		if i < 0 {
			return 0, "", false
		}
		i += from
		from = i + 1
		if i > 0 && name[i-1] != '.' {
			continue
		}
		n, rest, ok := leadingInt(name[i+len(key):])
		if ok && rest != "" && rest[0] == '.' {
			return n, rest[1:], true
		}
	}
}

// leadingInt parses the decimal digits at the start of s.
func leadingInt(s string) (n int, rest string, ok bool) {
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == 0 || j > 9 { // more than 9 digits is no layer or expert index
		return 0, s, false
	}
	n, err := strconv.Atoi(s[:j])
	return n, s[j:], err == nil
}

// LayerOf returns the 0-based decoder layer a tensor belongs to.
func LayerOf(name string) (layer int, ok bool) {
	layer, _, ok = splitLayer(name)
	return layer, ok
}

// ExpertOf returns the routed expert index of an expert tensor
// ("….experts.N.…").
func ExpertOf(name string) (expert int, ok bool) {
	const key = ".experts."
	i := strings.Index(name, key)
	if i < 0 {
		return 0, false
	}
	n, rest, ok := leadingInt(name[i+len(key):])
	if !ok || rest == "" || rest[0] != '.' {
		return 0, false
	}
	return n, true
}
