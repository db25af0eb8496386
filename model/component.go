// Package model knows model families: a family is a schema file
// (families/k3.json, Kimi-K3, is built in; UseSchema reads another) giving
// the config keys of its dimensions, every tensor with its group, dtype and
// shape as expressions over them, the layer parts, the shard placement and
// the engines' module spellings. The package interprets it: it parses and
// validates a config.json, derives the layer schedule and the tensor catalog
// (every name, dtype and shape the checkpoint must hold), assigns tensors to
// groups, components and shards, and writes faithful replicas of the
// checkpoint at any scale (Synth).
package model

import "fmt"

// Component is the accounting class of a tensor, a union of Groups; every
// package classifies through the family's schema (ParseName).
type Component uint8

const (
	// Other holds tensors no rule recognises; they are reported, never dropped.
	Other Component = 0
	// RoutedExperts is the routed experts.
	RoutedExperts Component = 6
	// NumComponents is the number of classes, for arrays indexed by Component.
	NumComponents = len(componentNames)
)

// componentNames are the classes' names in reports, in Component order.
var componentNames = [...]string{
	"other",
	"attention.kda",  // a KDA (linear attention) layer's self_attn tensors
	"attention.mla",  // an MLA (full attention) layer's self_attn tensors
	"shared_experts", // a MoE layer's always-active shared experts
	"latent",         // routed_expert_down/up_proj and routed_expert_norm
	"router",         // the MoE gate weight and its e_score_correction_bias
	"routed_experts",
	"dense_mlp", // the MLP of the first_k_dense_replace layers
	"embedding",
	"lm_head",
	"norms",     // layer norms, AttnRes norms and projections, final norms
	"vision",    // the vision tower and the multimodal projector
	"attention", // self_attn of a family with one kind of attention (not K3)
	"mtp",       // the multi-token-prediction layers' own tensors (DeepSeek)
}

// String is the class name used in reports (e.g. "attention.kda").
func (c Component) String() string {
	if int(c) < NumComponents {
		return componentNames[c]
	}
	return fmt.Sprintf("Component(%d)", uint8(c))
}

// ParseComponent maps a class name back to its Component.
func ParseComponent(s string) (Component, error) {
	for i, n := range componentNames {
		if n == s {
			return Component(i), nil
		}
	}
	return Other, fmt.Errorf("model: unknown component %q", s)
}

// Classifier puts tensor names into components. It carries the layer
// schedule: only it tells KDA's o_proj and g_proj from MLA's.
type Classifier struct {
	mla  []bool // indexed by 0-based layer
	s    *schema
	main int // the layers before the extra ones (numbered from main on)
}

func newClassifier(s *schema, layers []layer) *Classifier {
	c := &Classifier{mla: make([]bool, len(layers)), s: s, main: mainLayers(layers)}
	for i, l := range layers {
		c.mla[i] = l.Attention == mLA
	}
	return c
}

// k3Classifier uses the public K3 schedule, for callers without a config:
// full_attn_layers 4, 8, …, 92 and 93 (1-based; a test checks them against
// the released config).
var k3Classifier = func() *Classifier {
	c := &Classifier{mla: make([]bool, k3Layers), s: k3Schema, main: k3Layers}
	for i := range c.mla {
		c.mla[i] = (i+1)%4 == 0 || i == k3Layers-1
	}
	return c
}()

// K3Classifier reads names with the public Kimi-K3 layer schedule, for a
// checkpoint without a config; Config.Classifier reads the config's.
func K3Classifier() *Classifier { return k3Classifier }

// Classify returns the component of a tensor name's group: companions
// (X.weight_scale_inv…) get X.weight's; o_proj/g_proj of a layer outside the
// schedule are Other.
func (c *Classifier) Classify(name string) Component { return c.ParseName(name).Group.Component() }

// leadingInt parses the decimal digits at the start of s.
func leadingInt(s string) (n int, rest string, ok bool) {
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == 0 || j > 9 { // more than 9 digits is no layer or expert index
		return 0, s, false
	}
	for _, c := range s[:j] {
		n = n*10 + int(c-'0')
	}
	return n, s[j:], true
}
