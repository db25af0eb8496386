package model

import (
	"fmt"
	"strconv"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Shard placement, as in the released checkpoint. Layer l lives entirely in
// shard l+1. After the layers come the model-level shards, one per slot:
//
//	slot 0 (shard L+1, K3: 94): embed_tokens, lm_head, norm, output_attn_res_norm, output_attn_res_proj
//	slot 1 (shard L+2, K3: 95): the three mm_projector.* tensors
//	slot 2 (shard L+3, K3: 96): every vision_tower.* tensor
//
// so text-only serving skips exactly the last two files. A config without
// vision_config has only slot 0.
var modelLevelSlot = map[Group]int{
	GroupEmbedding:   0,
	GroupLMHead:      0,
	GroupFinalNorms:  0,
	GroupMMProjector: 1,
	GroupVisionTower: 2,
}

// ShardNameFormat names shard i (1-based) of n the way the release does:
// five digits, then six (model-00001-of-000096.safetensors). Readers take
// shard names from the index, never from this pattern.
const ShardNameFormat = "model-%05d-of-%06d.safetensors"

// ConfigName is the config file next to the shards.
const ConfigName = "config.json"

// tmpl is a tensor of a repeated unit (a layer, an expert, a vision block):
// its name after the unit's prefix, dtype and shape. Shapes are shared by all
// specs built from a template and must not be modified.
type tmpl struct {
	suffix string
	dtype  safetensors.DType
	shape  []int64
}

func (t tmpl) bytes() int64 {
	n, _ := safetensors.ByteSize(t.dtype, t.shape) // shapes are validated sizes
	return n
}

func sumBytes(ts []tmpl) int64 {
	var s int64
	for _, t := range ts {
		s += t.bytes()
	}
	return s
}

// templates is the tensor table of a config: every tensor kind with its
// dtype and shape as in the released checkpoint, derived once from the dimensions.
type templates struct {
	layer  []tmpl // every layer
	kda    []tmpl
	mla    []tmpl
	dense  []tmpl
	moe    []tmpl // MoE layer, without the experts
	expert []tmpl // one routed expert, after "experts.{e}."
	slots  [3][]tmpl
	vblock []tmpl // one vision block, after "vision_tower.encoder.blocks.{b}."
}

func s(dims ...int64) []int64 { return dims }

func (c *Config) templates() *templates {
	bf, f32, u8 := safetensors.BF16, safetensors.F32, safetensors.U8
	H := c.Hidden
	t := &templates{}
	t.layer = []tmpl{
		{"input_layernorm.weight", bf, s(H)},
		{"post_attention_layernorm.weight", bf, s(H)},
		{"self_attention_res_norm.weight", bf, s(H)},
		{"mlp_res_norm.weight", bf, s(H)},
		{"self_attention_res_proj.weight", bf, s(1, H)},
		{"mlp_res_proj.weight", bf, s(1, H)},
	}
	P := c.KDAHeads * c.KDAHeadDim
	alog := (c.KDAHeads + aLogAlign - 1) / aLogAlign * aLogAlign
	t.kda = []tmpl{
		{"self_attn.q_proj.weight", bf, s(P, H)},
		{"self_attn.k_proj.weight", bf, s(P, H)},
		{"self_attn.v_proj.weight", bf, s(P, H)},
		{"self_attn.g_proj.weight", bf, s(P, H)},
		{"self_attn.o_proj.weight", bf, s(H, P)},
		{"self_attn.f_a_proj.weight", bf, s(c.KDAHeadDim, H)},
		{"self_attn.f_b_proj.weight", bf, s(P, c.KDAHeadDim)},
		{"self_attn.b_proj.weight", bf, s(c.KDAHeads, H)},
		{"self_attn.q_conv1d.weight", f32, s(P, 1, c.ConvKernel)},
		{"self_attn.k_conv1d.weight", f32, s(P, 1, c.ConvKernel)},
		{"self_attn.v_conv1d.weight", f32, s(P, 1, c.ConvKernel)},
		{"self_attn.dt_bias", f32, s(P)},
		{"self_attn.o_norm.weight", f32, s(c.KDAHeadDim)},
		{"self_attn.A_log", f32, s(alog)},
	}
	nh := c.NumHeads
	t.mla = []tmpl{
		{"self_attn.q_a_proj.weight", bf, s(c.QLoraRank, H)},
		{"self_attn.q_a_layernorm.weight", bf, s(c.QLoraRank)},
		{"self_attn.q_b_proj.weight", bf, s(nh*(c.QKNopeHeadDim+c.QKRopeHeadDim), c.QLoraRank)},
		{"self_attn.kv_a_proj_with_mqa.weight", bf, s(c.KVLoraRank+c.QKRopeHeadDim, H)},
		{"self_attn.kv_a_layernorm.weight", bf, s(c.KVLoraRank)},
		{"self_attn.kv_b_proj.weight", bf, s(nh*(c.QKNopeHeadDim+c.VHeadDim), c.KVLoraRank)},
		{"self_attn.o_proj.weight", bf, s(H, nh*c.VHeadDim)},
	}
	if c.MLAOutputGate {
		t.mla = append(t.mla, tmpl{"self_attn.g_proj.weight", bf, s(nh*c.VHeadDim, H)})
	}
	t.dense = []tmpl{
		{"mlp.gate_proj.weight", bf, s(c.Intermediate, H)},
		{"mlp.up_proj.weight", bf, s(c.Intermediate, H)},
		{"mlp.down_proj.weight", bf, s(H, c.Intermediate)},
	}
	E, L := c.NumExperts, c.LatentDim
	t.moe = []tmpl{
		{"block_sparse_moe.gate.weight", bf, s(E, H)},
		{"block_sparse_moe.gate.e_score_correction_bias", f32, s(E)},
		{"block_sparse_moe.routed_expert_down_proj.weight", bf, s(L, H)},
		{"block_sparse_moe.routed_expert_up_proj.weight", bf, s(H, L)},
	}
	if c.LatentNorm {
		t.moe = append(t.moe, tmpl{"block_sparse_moe.routed_expert_norm.weight", bf, s(L)})
	}
	if c.NumShared > 0 {
		S := c.NumShared * c.MoEIntermediate
		t.moe = append(t.moe,
			tmpl{"block_sparse_moe.shared_experts.gate_proj.weight", bf, s(S, H)},
			tmpl{"block_sparse_moe.shared_experts.up_proj.weight", bf, s(S, H)},
			tmpl{"block_sparse_moe.shared_experts.down_proj.weight", bf, s(H, S)},
		)
	}
	I := c.MoEIntermediate
	if c.Experts == ExpertsMXFP4 {
		g := c.GroupSize
		t.expert = []tmpl{
			{"w1.weight_packed", u8, s(I, L/2)},
			{"w1.weight_scale", u8, s(I, L/g)},
			{"w2.weight_packed", u8, s(L, I/2)},
			{"w2.weight_scale", u8, s(L, I/g)},
			{"w3.weight_packed", u8, s(I, L/2)},
			{"w3.weight_scale", u8, s(I, L/g)},
		}
	} else if c.Experts == ExpertsNVFP4 {
		t.expert = c.nvfp4ExpertTemplates()
	} else {
		t.expert = []tmpl{
			{"w1.weight", bf, s(I, L)},
			{"w2.weight", bf, s(L, I)},
			{"w3.weight", bf, s(I, L)},
		}
	}
	// Model-level names are full names (the prefix is applied in slotName).
	t.slots[0] = []tmpl{{"embed_tokens.weight", bf, s(c.Vocab, H)}}
	if !c.TieEmbeddings {
		t.slots[0] = append(t.slots[0], tmpl{"/lm_head.weight", bf, s(c.Vocab, H)})
	}
	t.slots[0] = append(t.slots[0],
		tmpl{"norm.weight", bf, s(H)},
		tmpl{"output_attn_res_norm.weight", bf, s(H)},
		tmpl{"output_attn_res_proj.weight", bf, s(1, H)},
	)
	if v := c.Vision; v != nil {
		A, in := v.QKVHidden, v.ProjIn()
		t.vblock = []tmpl{
			{"wqkv.weight", bf, s(3*A, v.Hidden)},
			{"wo.weight", bf, s(v.Hidden, A)},
			{"mlp.fc0.weight", bf, s(v.Intermediate, v.Hidden)},
			{"mlp.fc1.weight", bf, s(v.Hidden, v.Intermediate)},
			{"norm0.weight", bf, s(v.Hidden)},
			{"norm1.weight", bf, s(v.Hidden)},
		}
		t.slots[1] = []tmpl{
			{"/mm_projector.post_norm.weight", bf, s(H)},
			{"/mm_projector.proj.0.weight", bf, s(in, in)},
			{"/mm_projector.proj.2.weight", bf, s(H, in)},
		}
		t.slots[2] = []tmpl{
			{"/vision_tower.encoder.final_layernorm.weight", bf, s(v.Hidden)},
			{"/vision_tower.patch_embed.pos_emb.weight", bf, s(v.PosEmbH, v.PosEmbW, v.Hidden)},
			{"/vision_tower.patch_embed.proj.weight", bf, s(v.Hidden, v.Channels, v.PatchSize, v.PatchSize)},
		}
	}
	return t
}

// TextPrefix is the prefix of the language model's tensors ("language_model.model."
// for the multimodal checkpoint, "model." for a bare text one).
func (c *Config) TextPrefix() string {
	if c.Multimodal {
		return "language_model.model."
	}
	return "model."
}

// slotName resolves a model-level template name: a leading "/" marks a name
// outside the text model ("lm_head.weight" sits beside model., vision at the root).
func (c *Config) slotName(suffix string) string {
	if suffix[0] != '/' {
		return c.TextPrefix() + suffix
	}
	suffix = suffix[1:]
	if suffix == "lm_head.weight" && c.Multimodal {
		return "language_model." + suffix
	}
	return suffix
}

// NumShards is the number of safetensors files: one per layer plus the
// model-level shards (embedding, lm_head and final norms; with vision, the
// projector and the vision tower).
func (c *Config) NumShards() int {
	if c.Vision != nil {
		return c.NumLayers + 3
	}
	return c.NumLayers + 1
}

// ShardName is the file name of 0-based shard i.
func (c *Config) ShardName(i int) string {
	return fmt.Sprintf(ShardNameFormat, i+1, c.NumShards())
}

// ShardOf is the file that holds the named tensor under the released
// placement, or "" when the name has no place in this model. It goes by the
// schema, so a converted weight's scale tensor lands next to its weight; it
// does not check that the tensor is in the catalog.
func (c *Config) ShardOf(name string) string {
	if i := c.ShardIndexOf(name); i >= 0 {
		return c.ShardName(i)
	}
	return ""
}

// ShardIndexOf is ShardOf as a 0-based shard number (-1 for no place).
func (c *Config) ShardIndexOf(name string) int {
	n := c.Classifier().ParseName(name)
	if n.Layer >= 0 {
		if n.Layer < c.NumLayers {
			return n.Layer
		}
		return -1
	}
	slot, ok := modelLevelSlot[n.Group]
	if !ok || c.NumLayers+slot >= c.NumShards() {
		return -1
	}
	return c.NumLayers + slot
}

// shardUnits lists, for 0-based shard i, the template groups it holds and
// the name prefix of each (one entry per layer part, expert or vision block).
func (c *Config) shardUnits(t *templates, i int, fn func(prefix string, ts []tmpl)) {
	if i < c.NumLayers {
		l := c.layers[i]
		p := c.TextPrefix() + "layers." + strconv.Itoa(i) + "."
		fn(p, t.layer)
		if l.Attention == kDA {
			fn(p, t.kda)
		} else {
			fn(p, t.mla)
		}
		if !l.MoE {
			fn(p, t.dense)
			return
		}
		fn(p, t.moe)
		for e := range c.NumExperts {
			fn(p+"block_sparse_moe.experts."+strconv.FormatInt(e, 10)+".", t.expert)
		}
		return
	}
	slot := i - c.NumLayers
	fn("", t.slots[slot])
	if slot == 2 && c.Vision != nil {
		for b := range c.Vision.Layers {
			fn("vision_tower.encoder.blocks."+strconv.FormatInt(b, 10)+".", t.vblock)
		}
	}
}

// ShardTensors lists the tensors of 0-based shard i, in catalog order (the
// file's data order is the codec's canonical sort). Shapes are shared
// between specs and must not be modified.
func (c *Config) ShardTensors(i int) []safetensors.TensorSpec {
	if i < 0 || i >= c.NumShards() {
		return nil
	}
	return c.shardTensors(c.templates(), i)
}

func (c *Config) shardTensors(t *templates, i int) []safetensors.TensorSpec {
	var out []safetensors.TensorSpec
	c.shardUnits(t, i, func(prefix string, ts []tmpl) {
		for _, x := range ts {
			name := prefix + x.suffix
			if prefix == "" {
				name = c.slotName(x.suffix)
			}
			out = append(out, safetensors.TensorSpec{Name: name, DType: x.dtype, Shape: x.shape})
		}
	})
	return out
}

// Catalog lists every tensor of the checkpoint, shard by shard. At full K3
// scale that is 497,220 specs (~60 MB); prefer ShardTensors to stream.
func (c *Config) Catalog() []safetensors.TensorSpec {
	t := c.templates()
	out := make([]safetensors.TensorSpec, 0, c.NumTensors())
	for i := range c.NumShards() {
		out = append(out, c.shardTensors(t, i)...)
	}
	return out
}

// ShardStats returns the tensor count and data bytes of 0-based shard i
// without building names.
func (c *Config) ShardStats(i int) (tensors int, bytes int64) {
	if i < 0 || i >= c.NumShards() {
		return 0, 0
	}
	c.shardUnits(c.templates(), i, func(_ string, ts []tmpl) {
		tensors += len(ts)
		bytes += sumBytes(ts)
	})
	return tensors, bytes
}

// NumTensors is the number of tensors in the checkpoint.
func (c *Config) NumTensors() int {
	t := c.templates()
	n := len(t.slots[0]) + len(t.slots[1]) + len(t.slots[2])
	for _, l := range c.layers {
		n += len(t.layer)
		if l.Attention == kDA {
			n += len(t.kda)
		} else {
			n += len(t.mla)
		}
		if l.MoE {
			n += len(t.moe) + int(c.NumExperts)*len(t.expert)
		} else {
			n += len(t.dense)
		}
	}
	if c.Vision != nil {
		n += int(c.Vision.Layers) * len(t.vblock)
	}
	return n
}

// TotalBytes is the data size of the checkpoint (the index's total_size).
func (c *Config) TotalBytes() int64 {
	var n int64
	for i := range c.NumShards() {
		_, b := c.ShardStats(i)
		n += b
	}
	return n
}
