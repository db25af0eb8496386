package layout

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
)

// Model holds the model dimensions the built-in layouts are derived from.
type Model struct {
	Layers       int // num_hidden_layers
	AttnHeads    int // MLA heads (num_attention_heads)
	LinearHeads  int // KDA heads (linear_attn_config.num_heads)
	Experts      int // routed experts per MoE layer (num_experts)
	AttnResBlock int // AttnRes block size in layers (attn_res_block_size)

	// cls is the config's layer schedule, which tells KDA and MLA o_proj and
	// g_proj apart (nil: K3's).
	cls *model.Classifier
}

func k3Model() Model {
	return Model{Layers: 93, AttnHeads: 96, LinearHeads: 96, Experts: 896, AttnResBlock: 12}
}

// ModelOf takes the dimensions, and the layer schedule, from a parsed config;
// a nil config gives K3's.
func ModelOf(c *model.Config) Model {
	if c == nil {
		return k3Model()
	}
	return Model{Layers: c.NumLayers, AttnHeads: int(c.NumHeads), LinearHeads: int(c.KDAHeads),
		Experts: int(c.NumExperts), AttnResBlock: c.AttnResBlockSize, cls: c.Classifier}
}

// Options switch the optional features of the built-in layouts, one per
// way of cutting a rank's memory.
type Options struct {
	// TextOnly drops the vision tower and projector (ONLY_LANGUAGE).
	TextOnly bool
	// WeightShard splits the dp16 weight-shard set 8 ways inside a node
	// (SGLANG_ENABLE_K3_WEIGHT_SHARD).
	WeightShard bool
	// VocabTP splits embed_tokens and lm_head rows 8 ways inside a node
	// (SGLANG_VOCAB_TP_SIZE=8); dp16 and dp2-dcp8.
	VocabTP bool
	// PPPartition overrides the layers per stage of pp16 and pp8-tp8.
	PPPartition []int
	// EvenPartition uses SGLang's default split (SGLANG_PP_LAYER_PARTITION
	// unset); ignored with PPPartition.
	EvenPartition bool
}

// pp16Partition is the prefill script's SGLANG_PP_LAYER_PARTITION for K3.
func pp16Partition() []int { return []int{7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 7, 5, 6, 3} }

// nodeGPUs is the size of a node-local group: weight shard, vocab TP, head TP
// and DCP all stay inside one node's NVLink domain.
const nodeGPUs = 8

// decodeRanks is the decode world size: 2 nodes × 8 GPUs.
const decodeRanks = 16

type builtin struct {
	doc      string
	defaults Options
	build    func(m Model, o Options) (*Layout, error)
}

var builtins = map[string]builtin{
	"pp16": {
		doc:   "prefill PP16 × TP1: stage s owns a contiguous layer range; embedding (and vision) on stage 0, final norms and lm_head on the last",
		build: buildPP16,
	},
	"dp16": {
		doc:      "decode DP16 attention + EP16 experts, weight shard 1/8 rows and vocab TP8 inside each node",
		defaults: Options{TextOnly: true, WeightShard: true, VocabTP: true},
		build:    buildDP16,
	},
	"dp2-dcp8": {
		doc:      "decode DP2 × DCP8: KDA head TP8, MLA replicated Q with o/g split by head, SP-MoE replicated, dense TP8, vocab TP8, EP16 experts",
		defaults: Options{TextOnly: true, VocabTP: true},
		build:    buildDP2DCP8,
	},
	"pp8-tp8": {
		doc:   "PP8 × TP8: AttnRes-aligned stages (12, …, 12, rest) with plain TP8 of every projection and TP-split experts",
		build: buildPP8TP8,
	},
}

// Names lists the built-in layout names.
func Names() []string {
	return slices.Sorted(maps.Keys(builtins))
}

// DefaultOptions returns a built-in layout's default options.
func DefaultOptions(name string) (Options, error) {
	b, ok := builtins[name]
	if !ok {
		return Options{}, unknownLayout(name)
	}
	return b.defaults, nil
}

func unknownLayout(name string) error {
	return fmt.Errorf("%w %q (built-in: %s; or a path to a .json layout)", errUnknownLayout, name, strings.Join(Names(), ", "))
}

func builtinLayout(name string, m Model, o Options) (*Layout, error) {
	b, ok := builtins[name]
	if !ok {
		return nil, unknownLayout(name)
	}
	if m.Layers < 1 || m.AttnHeads < 1 || m.LinearHeads < 0 || m.Experts < 1 {
		return nil, fmt.Errorf("%w: %s: model dimensions must be positive: %+v", errLayout, name, m)
	}
	l, err := b.build(m, o)
	if err != nil {
		return nil, err
	}
	l.Name, l.Doc, l.Layers, l.cls = name, b.doc, m.Layers, m.cls
	if _, err := l.compile(); err != nil {
		return nil, err
	}
	return l, nil
}

// Resolve returns a built-in layout by name, or loads a JSON layout file when
// nameOrPath is not a built-in name but a path to one; a file's "layers",
// when stated, must be m.Layers (when m states them).
func Resolve(nameOrPath string, m Model, o Options) (*Layout, error) {
	if _, ok := builtins[nameOrPath]; ok {
		return builtinLayout(nameOrPath, m, o)
	}
	if strings.HasSuffix(nameOrPath, ".json") || strings.ContainsRune(nameOrPath, '/') {
		l, err := loadLayout(nameOrPath)
		if err != nil {
			return nil, err
		}
		if err := l.checkLayers(m); err != nil {
			return nil, err
		}
		return l, nil
	}
	return nil, unknownLayout(nameOrPath)
}

// partition picks the pipeline partition: the user's, SGLang's even split, or
// def's.
func partition(m Model, o Options, stages int, def func() ([]int, error)) ([]int, error) {
	switch {
	case o.PPPartition != nil:
		p := append([]int(nil), o.PPPartition...)
		return p, checkPartition(p, stages, m.Layers)
	case o.EvenPartition:
		return defaultPartition(m.Layers, stages)
	default:
		return def()
	}
}

// The built-in layouts' tensor sets, in model's groups, so they hold for
// both name prefixes. Block-FP8 scales follow their weights.
var (
	grpLayerNorms  = []string{"layer_norms", "attn_res"}
	grpExperts     = []string{"experts"}
	grpRouter      = []string{"router", "latent.norm"}
	grpLatentDown  = []string{"latent.down_proj"}
	grpLatentUp    = []string{"latent.up_proj"}
	grpSharedUp    = []string{"shared_experts.gate_proj", "shared_experts.up_proj"}
	grpSharedDown  = []string{"shared_experts.down_proj"}
	grpDenseUp     = []string{"dense_mlp.gate_proj", "dense_mlp.up_proj"}
	grpDenseDown   = []string{"dense_mlp.down_proj"}
	grpKDAProjRows = []string{"kda.q_proj", "kda.k_proj", "kda.v_proj", "kda.f_b_proj"}
	// KDA per-head state: rows are heads.
	grpKDAStateRows = []string{"kda.conv1d", "kda.dt_bias", "kda.b_proj"}
	grpKDAALog      = []string{"kda.A_log"}
	grpKDARepl      = []string{"kda.f_a_proj", "kda.o_norm"}
	// Gates (rows) and output projections (columns) of both attention kinds.
	grpGRows = []string{"kda.g_proj", "mla.g_proj"}
	grpOCols = []string{"kda.o_proj", "mla.o_proj"}
	grpMLAQB = []string{"mla.q_b_proj"}
	grpMLAKV = []string{"mla.kv_b_proj"}
	// MLA projections without a head dimension, and the MLA norms.
	grpMLARepl = []string{"mla.q_a_proj", "mla.q_a_layernorm", "mla.kv_a_proj_with_mqa", "mla.kv_a_layernorm"}
	grpEmbed   = []string{"embedding"}
	grpLMHead  = []string{"lm_head"}
	grpFinal   = []string{"final_norms"}
	grpVision  = []string{"vision_tower", "mm_projector"}
	grpLayer   = []string{anyLayerGroup}
	// The dp16 weight-shard set: KDA q/k/v/g/o/f_b, MLA q_b/o/g, shared
	// experts and latent projections.
	grpWeightShard = []string{"kda.q_proj", "kda.k_proj", "kda.v_proj", "kda.g_proj", "kda.o_proj", "kda.f_b_proj",
		"mla.q_b_proj", "mla.o_proj", "mla.g_proj", "shared_experts", "latent.down_proj", "latent.up_proj"}
)

func repl(name string, st stagePlace, groups ...[]string) rule {
	return rule{Name: name, Groups: slices.Concat(groups...), Action: replicate, Stage: st}
}

func split(name string, axis, parts int, groups ...[]string) rule {
	return rule{Name: name, Groups: slices.Concat(groups...), Action: actSplit, Axis: axis, Parts: parts}
}

// experts is a split of some projections of the routed experts.
func experts(name string, axis int, projs ...string) rule {
	r := split(name, axis, nodeGPUs, grpExperts)
	r.Projs = projs
	return r
}

func heads(r rule, units int64) rule { r.Units = units; return r }

func at(r rule, st stagePlace) rule { r.Stage = st; return r }

// sharedHeads is the head count of o_proj and g_proj, which both KDA and
// MLA layers have: the common one when they agree, else 0.
func sharedHeads(m Model) int64 {
	if m.AttnHeads == m.LinearHeads {
		return int64(m.AttnHeads)
	}
	return 0
}

func onOff(on bool, name string, pats ...[]string) rule {
	if on {
		return split(name, 0, nodeGPUs, pats...)
	}
	return repl(name, stageAuto, pats...)
}

func vision(o Options, st stagePlace) rule {
	if o.TextOnly {
		return rule{Name: "vision", Groups: grpVision, Action: drop}
	}
	return repl("vision", st, grpVision)
}

func ep(m Model) rule {
	return rule{Name: "experts-ep", Groups: grpExperts, Action: actExpert, Experts: m.Experts}
}

func buildPP16(m Model, o Options) (*Layout, error) {
	p, err := partition(m, o, 16, func() ([]int, error) {
		if m.Layers == 93 {
			return pp16Partition(), nil
		}
		return defaultPartition(m.Layers, 16)
	})
	if err != nil {
		return nil, err
	}
	return &Layout{Partition: p, RanksPerStage: 1, Rules: []rule{
		repl("layers", stageLayer, grpLayer),
		repl("embedding", stageFirst, grpEmbed),
		vision(o, stageFirst),
		repl("output", stageLast, grpFinal, grpLMHead),
	}}, nil
}

func buildDP16(m Model, o Options) (*Layout, error) {
	return &Layout{RanksPerStage: decodeRanks, Rules: []rule{
		ep(m),
		onOff(o.WeightShard, "weight-shard", grpWeightShard),
		onOff(o.VocabTP, "vocab", grpEmbed, grpLMHead),
		vision(o, stageAuto),
		repl("replicated", stageAuto, grpLayerNorms, grpKDAStateRows, grpKDAALog, grpKDARepl,
			grpMLARepl, grpMLAKV, grpDenseUp, grpDenseDown, grpRouter, grpFinal),
	}}, nil
}

func kdaHeadTP(m Model) []rule {
	h := int64(m.LinearHeads)
	alog := heads(split("kda-a-log", 0, nodeGPUs, grpKDAALog), h)
	alog.Valid = h
	return []rule{
		heads(split("kda-head-rows", 0, nodeGPUs, grpKDAProjRows, grpKDAStateRows), h),
		alog,
		heads(split("attn-g-rows", 0, nodeGPUs, grpGRows), sharedHeads(m)),
		heads(split("attn-o-cols", 1, nodeGPUs, grpOCols), sharedHeads(m)),
	}
}

func buildDP2DCP8(m Model, o Options) (*Layout, error) {
	rules := []rule{ep(m)}
	rules = append(rules, kdaHeadTP(m)...)
	rules = append(rules,
		repl("replicated-q", stageAuto, grpMLAQB),
		split("dense-up", 0, nodeGPUs, grpDenseUp),
		split("dense-down", 1, nodeGPUs, grpDenseDown),
		onOff(o.VocabTP, "vocab", grpEmbed, grpLMHead),
		vision(o, stageAuto),
		repl("replicated", stageAuto, grpLayerNorms, grpKDARepl, grpMLARepl, grpMLAKV,
			grpRouter, grpLatentDown, grpLatentUp, grpSharedUp, grpSharedDown, grpFinal),
	)
	return &Layout{RanksPerStage: decodeRanks, Rules: rules}, nil
}

func buildPP8TP8(m Model, o Options) (*Layout, error) {
	block := m.AttnResBlock
	p, err := partition(m, o, 8, func() ([]int, error) { return blockPartition(m.Layers, 8, block) })
	if err != nil {
		return nil, err
	}
	h := int64(m.AttnHeads)
	rules := []rule{
		experts("experts-up", 0, "w1", "w3"),
		experts("experts-down", 1, "w2"),
	}
	rules = append(rules, kdaHeadTP(m)...)
	rules = append(rules,
		heads(split("mla-q-b", 0, nodeGPUs, grpMLAQB), h),
		heads(split("mla-kv-b", 0, nodeGPUs, grpMLAKV), h),
		split("mlp-up", 0, nodeGPUs, grpDenseUp, grpSharedUp, grpLatentDown),
		split("mlp-down", 1, nodeGPUs, grpDenseDown, grpSharedDown, grpLatentUp),
		at(split("vocab-first", 0, nodeGPUs, grpEmbed), stageFirst),
		at(split("vocab-last", 0, nodeGPUs, grpLMHead), stageLast),
		vision(o, stageFirst),
		repl("replicated", stageAuto, grpLayerNorms, grpKDARepl, grpMLARepl, grpRouter),
		repl("final", stageLast, grpFinal),
	)
	return &Layout{Partition: p, RanksPerStage: nodeGPUs, Rules: rules}, nil
}
