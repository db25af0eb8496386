package model

import (
	"slices"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Helpers only the tests use.

// The roles after roleScaleInv (roleSuffix').
const (
	roleScale2 Role = roleScaleInv + 1 + iota
	roleInputScale
	roleGlobalScale
)

// The components in Component order (componentNames').
const (
	attentionKDA Component = iota + 1
	attentionMLA
	sharedExperts
	latentMoE
	router
	_ // RoutedExperts
	denseMLP
	embedding
	lMHead
	norms
	vision
	attention
	mtp
)

// The built-in family's groups in Group order (families/k3.json's).
const (
	// KDA (linear attention) layers, self_attn.*.
	groupKDAQ Group = iota + 1
	groupKDAK
	groupKDAV
	groupKDAG // the full-rank output gate
	groupKDAO
	groupKDAFA
	groupKDAFB
	groupKDAB
	groupKDAConv   // q_conv1d, k_conv1d, v_conv1d
	groupKDADTBias // one value per head channel
	groupKDAALog   // one value per head, zero padded
	groupKDAONorm

	// MLA (full attention) layers, self_attn.*.
	groupMLAQA
	groupMLAQANorm
	groupMLAQB
	groupMLAKVA
	groupMLAKVANorm
	groupMLAKVB
	groupMLAO
	groupMLAG // the output gate (mla_use_output_gate)

	// The dense MLP of the first_k_dense_replace layers, mlp.*.
	groupDenseGate
	groupDenseUp
	groupDenseDown

	// MoE layers, block_sparse_moe.*.
	groupRouterGate
	groupRouterBias
	groupLatentDown // routed_expert_down_proj (hidden → latent)
	groupLatentUp   // routed_expert_up_proj (latent → hidden)
	groupLatentNorm
	groupSharedGate
	groupSharedUp
	groupSharedDown
	_ // GroupExperts

	// Per-layer norms.
	groupLayerNorms // input_layernorm, post_attention_layernorm
	groupAttnRes    // self_attention_res_norm/proj, mlp_res_norm/proj

	// Model level.
	groupEmbedding
	groupLMHead
	groupFinalNorms // norm, output_attn_res_norm, output_attn_res_proj
	groupVisionTower
	groupMMProjector
)

// normal draws an approximately standard normal value.
func (r *splitmix) normal() float64 {
	return (float64(r.sum12()) - ihMean) * ihScale
}

// expertUnit is the unit of the layers' repeated part (the routed experts),
// "" when the family has none.
func (c *Config) expertUnit() string {
	for _, p := range c.sch.layerParts {
		if p.repeat != nil {
			return p.unit
		}
	}
	return ""
}

// quantizationConfig is a deep copy of the object at QuantizationPath (nil
// when there is none).
func (c *Config) quantizationConfig() map[string]any {
	if c.QuantizationPath == "" {
		return nil
	}
	v := any(c.raw)
	for k := range strings.SplitSeq(c.QuantizationPath, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	m, _ := deepCopy(v).(map[string]any)
	return m
}

// members lists the set's groups in Group order.
func (s GroupSet) members() []Group {
	var out []Group
	for g := range Group(len(groupInfo)) {
		if s.Has(g) {
			out = append(out, g)
		}
	}
	return out
}

// fP8Block is the edge of a block-FP8 scale block: one scale per 128 × 128
// weights (a partial block at the right or bottom edge has its own scale).
const fP8Block = 128

// k3FullAttnLayers is the package-level classifier's schedule as 1-based
// layer lists.
func k3FullAttnLayers() (full, kda []int) {
	for i, mla := range k3Classifier.mla {
		if mla {
			full = append(full, i+1)
		} else {
			kda = append(kda, i+1)
		}
	}
	return full, kda
}

// scaleBlocks is the block-scale grid of an [n, k] weight: ⌈n/128⌉ rows of
// ⌈k/128⌉ scales.
func scaleBlocks(n, k int64) (rows, cols int64) {
	return (n + fP8Block - 1) / fP8Block, (k + fP8Block - 1) / fP8Block
}

// expertBytes is the size of one routed expert stored in format f (what
// inspect's what-if reports for a cast the checkpoint has not had).
func (c *Config) expertBytes(f ExpertFormat) int64 {
	cc := *c
	cc.Experts = f
	if f == ExpertsMXFP4 && cc.GroupSize == 0 {
		cc.GroupSize = 32
	}
	ts, err := cc.unitTemplates(expand(c.expertUnit(), map[string]string{"experts": string(f)}))
	if err != nil {
		return 0
	}
	var s int64
	for _, t := range ts {
		s += t.bytes()
	}
	return s
}

// numBlocks is the number of AttnRes blocks.
func (c *Config) numBlocks() int {
	return (c.NumLayers + c.AttnResBlockSize - 1) / c.AttnResBlockSize
}

// components lists every class in enum order.
func components() []Component {
	out := make([]Component, NumComponents)
	for i := range out {
		out[i] = Component(i)
	}
	return out
}

// shardOf is the file that holds the named tensor under the released
// placement, or "" when the name has no place in this model. It goes by the
// schema, so a converted weight's scale tensor lands next to its weight; it
// does not check that the tensor is in the catalog.
func (c *Config) shardOf(name string) string {
	if i := c.shardIndexOf(name); i >= 0 {
		return c.ShardName(i)
	}
	return ""
}

// scaledConfig is the parsed config of a replica at a scale.
func scaledConfig(sc Scale) (*Config, error) {
	b, err := scaledConfigJSON(sc)
	if err != nil {
		return nil, err
	}
	return ParseConfig(b)
}

// k3Shards is the released K3 config's ShardTensors, shard by shard, built
// once per test binary for the tests that read the whole catalog (497,220
// specs); read-only.
var k3Shards = sync.OnceValue(func() [][]safetensors.TensorSpec {
	c, err := scaledConfig(ScaleFull)
	if err != nil {
		panic(err)
	}
	out := make([][]safetensors.TensorSpec, c.NumShards())
	for i := range out {
		out[i] = c.ShardTensors(i)
	}
	return out
})

// k3Catalog is k3Shards end to end: the released config's catalog.
var k3Catalog = sync.OnceValue(func() []safetensors.TensorSpec { return slices.Concat(k3Shards()...) })

// catalog lists every tensor of the checkpoint, shard by shard. At full K3
// scale that is 497,220 specs (~60 MB); prefer ShardTensors to stream.
func (c *Config) catalog() []safetensors.TensorSpec {
	out := make([]safetensors.TensorSpec, 0, c.NumTensors())
	for i := range c.NumShards() {
		out = append(out, c.ShardTensors(i)...)
	}
	return out
}

// releasedDims are the released config's dimensions (ScaleFull).
var releasedDims = dims{
	hidden: 7168, vocab: 163840, intermediate: 33792,
	heads: 96, qLora: 1536, kvLora: 512, qkNope: 128, qkRope: 64, vHead: 128,
	kdaHeads: 96, kdaHeadDim: 128,
	experts: 896, topK: 16, shared: 2, moeInter: 3072, latent: 3584,
	vtHidden: 1024, vtLayers: 27, vtInter: 4096, vtHeads: 12, qkvHidden: 1536,
	posEmb: 64,
}
