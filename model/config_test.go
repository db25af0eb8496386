package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

const gib = float64(1 << 30)

// near reports whether bytes, in GiB, rounds to want at the given decimals.
func near(bytes int64, want float64, decimals int) bool {
	return math.Abs(float64(bytes)/gib-want) <= 0.5*math.Pow(10, -float64(decimals))+1e-12
}

func mustK3(t testing.TB) *Config {
	t.Helper()
	c, err := scaledConfig(ScaleFull)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The size figures of independent audits of the released checkpoint.
func TestK3CatalogFigures(t *testing.T) {
	t.Parallel()
	c := mustK3(t)
	cat := k3Catalog()
	if len(cat) != 497220 || c.NumTensors() != 497220 {
		t.Fatalf("catalog has %d tensors (NumTensors %d), want 497,220", len(cat), c.NumTensors())
	}
	if c.NumShards() != 96 {
		t.Fatalf("%d shards, want 96", c.NumShards())
	}
	var comp [NumComponents]int64
	var total, vt, mm int64
	cl := c.Classifier
	seen := make(map[string]bool, len(cat))
	for _, ts := range cat {
		if seen[ts.Name] {
			t.Fatalf("duplicate %s", ts.Name)
		}
		seen[ts.Name] = true
		n, err := safetensors.ByteSize(ts.DType, ts.Shape)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		cls := cl.Classify(ts.Name)
		if cls == Other {
			t.Errorf("%s is unclassified", ts.Name)
		}
		comp[cls] += n
		if strings.HasPrefix(ts.Name, "vision_tower.") {
			vt += n
		} else if strings.HasPrefix(ts.Name, "mm_projector.") {
			mm += n
		}
	}
	if total != c.TotalBytes() {
		t.Errorf("TotalBytes %d, sum of catalog %d", c.TotalBytes(), total)
	}
	check := func(what string, got int64, want float64, dec int) {
		t.Helper()
		if !near(got, want, dec) {
			t.Errorf("%s: %.4f GiB, the audits say %.*f", what, float64(got)/gib, dec, want)
		}
	}
	check("whole checkpoint", total, 1453.66, 2)
	check("attention (KDA + MLA)", comp[attentionKDA]+comp[attentionMLA], 67.4, 1)
	check("shared experts", comp[sharedExperts], 22.6, 1)
	check("latent", comp[latentMoE], 8.8, 1)
	check("embedding + lm_head", comp[embedding]+comp[lMHead], 4.38, 2)
	check("dense L0", comp[denseMLP], 1.35, 2)
	check("router", comp[router], 1.10, 2)
	check("routed experts", comp[RoutedExperts], 1347.12, 2)
	check("vision", comp[vision], 0.83, 2)
	if want := int64(92 * 896 * 17547264); comp[RoutedExperts] != want {
		t.Errorf("routed experts %d bytes, want 92 × 896 × 17,547,264 = %d", comp[RoutedExperts], want)
	}
	nonExpert := total - comp[RoutedExperts] - comp[vision]
	check("non-expert text weights", nonExpert, 105.7, 1)
	if math.Abs(float64(nonExpert)/1e9-113.5) > 0.05 {
		t.Errorf("non-expert text weights %.2f GB, the audits say 113.5 GB", float64(nonExpert)/1e9)
	}
	if math.Round(float64(vt)/1e6) != 802 || math.Round(float64(mm)/1e6) != 92 {
		t.Errorf("vision tower %.1f MB + projector %.1f MB, the audits say 802 + 92", float64(vt)/1e6, float64(mm)/1e6)
	}
	if !near(comp[RoutedExperts]/16, 84.2, 1) {
		t.Errorf("experts per EP16 rank %.2f GiB, the audits say 84.2", float64(comp[RoutedExperts]/16)/gib)
	}
}

// Shapes written out by hand from the released checkpoint's headers.
func TestK3Shapes(t *testing.T) {
	t.Parallel()
	c := mustK3(t)
	P := "language_model.model."
	want := map[string]struct {
		dt    safetensors.DType
		shape []int64
	}{
		P + "layers.0.self_attn.q_proj.weight":                          {safetensors.BF16, []int64{12288, 7168}},
		P + "layers.0.self_attn.o_proj.weight":                          {safetensors.BF16, []int64{7168, 12288}},
		P + "layers.0.self_attn.f_a_proj.weight":                        {safetensors.BF16, []int64{128, 7168}},
		P + "layers.0.self_attn.f_b_proj.weight":                        {safetensors.BF16, []int64{12288, 128}},
		P + "layers.0.self_attn.b_proj.weight":                          {safetensors.BF16, []int64{96, 7168}},
		P + "layers.0.self_attn.k_conv1d.weight":                        {safetensors.F32, []int64{12288, 1, 4}},
		P + "layers.0.self_attn.dt_bias":                                {safetensors.F32, []int64{12288}},
		P + "layers.0.self_attn.o_norm.weight":                          {safetensors.F32, []int64{128}},
		P + "layers.0.self_attn.A_log":                                  {safetensors.F32, []int64{128}},
		P + "layers.0.mlp.up_proj.weight":                               {safetensors.BF16, []int64{33792, 7168}},
		P + "layers.0.mlp.down_proj.weight":                             {safetensors.BF16, []int64{7168, 33792}},
		P + "layers.0.self_attention_res_proj.weight":                   {safetensors.BF16, []int64{1, 7168}},
		P + "layers.3.self_attn.q_a_proj.weight":                        {safetensors.BF16, []int64{1536, 7168}},
		P + "layers.3.self_attn.q_a_layernorm.weight":                   {safetensors.BF16, []int64{1536}},
		P + "layers.3.self_attn.q_b_proj.weight":                        {safetensors.BF16, []int64{18432, 1536}},
		P + "layers.3.self_attn.kv_a_proj_with_mqa.weight":              {safetensors.BF16, []int64{576, 7168}},
		P + "layers.3.self_attn.kv_a_layernorm.weight":                  {safetensors.BF16, []int64{512}},
		P + "layers.3.self_attn.kv_b_proj.weight":                       {safetensors.BF16, []int64{24576, 512}},
		P + "layers.3.self_attn.o_proj.weight":                          {safetensors.BF16, []int64{7168, 12288}},
		P + "layers.3.self_attn.g_proj.weight":                          {safetensors.BF16, []int64{12288, 7168}},
		P + "layers.92.block_sparse_moe.gate.weight":                    {safetensors.BF16, []int64{896, 7168}},
		P + "layers.92.block_sparse_moe.gate.e_score_correction_bias":   {safetensors.F32, []int64{896}},
		P + "layers.1.block_sparse_moe.routed_expert_down_proj.weight":  {safetensors.BF16, []int64{3584, 7168}},
		P + "layers.1.block_sparse_moe.routed_expert_up_proj.weight":    {safetensors.BF16, []int64{7168, 3584}},
		P + "layers.1.block_sparse_moe.routed_expert_norm.weight":       {safetensors.BF16, []int64{3584}},
		P + "layers.1.block_sparse_moe.shared_experts.gate_proj.weight": {safetensors.BF16, []int64{6144, 7168}},
		P + "layers.1.block_sparse_moe.shared_experts.down_proj.weight": {safetensors.BF16, []int64{7168, 6144}},
		P + "layers.1.block_sparse_moe.experts.895.w1.weight_packed":    {safetensors.U8, []int64{3072, 1792}},
		P + "layers.1.block_sparse_moe.experts.895.w1.weight_scale":     {safetensors.U8, []int64{3072, 112}},
		P + "layers.1.block_sparse_moe.experts.0.w2.weight_packed":      {safetensors.U8, []int64{3584, 1536}},
		P + "layers.1.block_sparse_moe.experts.0.w2.weight_scale":       {safetensors.U8, []int64{3584, 96}},
		P + "layers.1.block_sparse_moe.experts.10.w3.weight_scale":      {safetensors.U8, []int64{3072, 112}},
		P + "embed_tokens.weight":                                       {safetensors.BF16, []int64{163840, 7168}},
		"language_model.lm_head.weight":                                 {safetensors.BF16, []int64{163840, 7168}},
		P + "norm.weight":                                               {safetensors.BF16, []int64{7168}},
		P + "output_attn_res_proj.weight":                               {safetensors.BF16, []int64{1, 7168}},
		"vision_tower.encoder.blocks.26.wqkv.weight":                    {safetensors.BF16, []int64{4608, 1024}},
		"vision_tower.encoder.blocks.0.wo.weight":                       {safetensors.BF16, []int64{1024, 1536}},
		"vision_tower.encoder.blocks.0.mlp.fc0.weight":                  {safetensors.BF16, []int64{4096, 1024}},
		"vision_tower.encoder.blocks.0.mlp.fc1.weight":                  {safetensors.BF16, []int64{1024, 4096}},
		"vision_tower.encoder.final_layernorm.weight":                   {safetensors.BF16, []int64{1024}},
		"vision_tower.patch_embed.pos_emb.weight":                       {safetensors.BF16, []int64{64, 64, 1024}},
		"vision_tower.patch_embed.proj.weight":                          {safetensors.BF16, []int64{1024, 3, 14, 14}},
		"mm_projector.post_norm.weight":                                 {safetensors.BF16, []int64{7168}},
		"mm_projector.proj.0.weight":                                    {safetensors.BF16, []int64{4096, 4096}},
		"mm_projector.proj.2.weight":                                    {safetensors.BF16, []int64{7168, 4096}},
	}
	got := map[string]safetensors.TensorSpec{}
	for _, ts := range k3Catalog() {
		if _, ok := want[ts.Name]; ok {
			got[ts.Name] = ts
		}
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s missing from the catalog", name)
			continue
		}
		if g.DType != w.dt || !slices.Equal(g.Shape, w.shape) {
			t.Errorf("%s: %s %v, want %s %v", name, g.DType, g.Shape, w.dt, w.shape)
		}
	}
	// absent by construction: no experts or MoE tensors in dense layer 0, no dense MLP in MoE layers
	for _, ts := range c.ShardTensors(0) {
		if strings.Contains(ts.Name, "block_sparse_moe") {
			t.Errorf("layer 0 has %s", ts.Name)
		}
	}
	for _, ts := range c.ShardTensors(1) {
		if strings.Contains(ts.Name, ".mlp.") {
			t.Errorf("layer 1 has %s", ts.Name)
		}
	}
}

func TestK3Schedule(t *testing.T) {
	t.Parallel()
	c := mustK3(t)
	ls := c.layers
	if len(ls) != 93 {
		t.Fatalf("%d layers", len(ls))
	}
	var mla []int
	for i, l := range ls {
		if l.Index != i {
			t.Errorf("layer %d has Index %d", i, l.Index)
		}
		if l.Attention == mLA {
			mla = append(mla, i)
		}
		if l.MoE != (i >= 1) {
			t.Errorf("layer %d MoE=%v", i, l.MoE)
		}
	}
	// The released config's full_attn_layers (1-based 4, 8, …, 92, 93): 0-based l = 3, 7, 11, …, 91, 92.
	want := []int{3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 51, 55, 59, 63, 67, 71, 75, 79, 83, 87, 91, 92}
	if !slices.Equal(mla, want) {
		t.Errorf("MLA layers %v, want %v", mla, want)
	}
	if c.numBlocks() != 8 {
		t.Errorf("%d AttnRes blocks, want 8", c.numBlocks())
	}
}

func TestShardPlacement(t *testing.T) {
	t.Parallel()
	c := mustK3(t)
	counts := map[string]int{}
	for i := range c.NumShards() {
		name := c.ShardName(i)
		n, _ := c.shardStats(i)
		specs := k3Shards()[i]
		if len(specs) != n || n == 0 {
			t.Errorf("shard %s: %d specs, shardStats %d", name, len(specs), n)
		}
		for _, ts := range specs {
			if got := c.shardOf(ts.Name); got != name {
				t.Fatalf("%s is in %s but shardOf says %q", ts.Name, name, got)
			}
			counts[name]++
		}
	}
	// The released layout: five digits, then six; 94 = the text model's
	// model-level tensors, 95 = the projector, 96 = the vision tower.
	P := "language_model.model."
	for name, want := range map[string]string{
		P + "layers.0.self_attn.q_proj.weight":                       "model-00001-of-000096.safetensors",
		P + "layers.92.block_sparse_moe.experts.895.w3.weight_scale": "model-00093-of-000096.safetensors",
		P + "layers.47.self_attn.o_proj.weight_scale_inv":            "model-00048-of-000096.safetensors",
		P + "embed_tokens.weight":                                    "model-00094-of-000096.safetensors",
		"language_model.lm_head.weight":                              "model-00094-of-000096.safetensors",
		P + "norm.weight":                                            "model-00094-of-000096.safetensors",
		P + "output_attn_res_norm.weight":                            "model-00094-of-000096.safetensors",
		P + "output_attn_res_proj.weight":                            "model-00094-of-000096.safetensors",
		"mm_projector.proj.0.weight":                                 "model-00095-of-000096.safetensors",
		"mm_projector.post_norm.weight":                              "model-00095-of-000096.safetensors",
		"vision_tower.encoder.blocks.0.wqkv.weight":                  "model-00096-of-000096.safetensors",
		"vision_tower.patch_embed.proj.weight":                       "model-00096-of-000096.safetensors",
		P + "layers.93.input_layernorm.weight":                       "",
		"something.else":                                             "",
	} {
		if got := c.shardOf(name); got != want {
			t.Errorf("shardOf(%s) = %q, want %q", name, got, want)
		}
	}
	// a MoE layer: 6 per-layer + (KDA 14 | MLA 8) + 8 MoE tensors + 896 × 6 experts
	for shard, want := range map[string]int{
		"model-00002-of-000096.safetensors": 6 + 14 + 8 + 896*6,
		"model-00094-of-000096.safetensors": 5,
		"model-00095-of-000096.safetensors": 3,
		"model-00096-of-000096.safetensors": 165,
	} {
		if n := counts[shard]; n != want {
			t.Errorf("%s has %d tensors, want %d", shard, n, want)
		}
	}
}

// The replica scales keep every built-in layout (PP16 stages; 16-rank
// decode layouts, 8 GPUs a node) applicable.
func TestScaleConstraints(t *testing.T) {
	t.Parallel()
	for _, sc := range []Scale{ScaleFull, ScaleSmall, ScaleTiny} {
		c, err := scaledConfig(sc)
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		if c.NumLayers != 93 || !slices.Equal(c.FullAttnLayers, mustK3(t).FullAttnLayers) || c.NumShards() != 96 {
			t.Errorf("%s: schedule differs from K3", sc)
		}
		v := c.values
		if c.NumExperts%16 != 0 || c.KDAHeads%8 != 0 || c.NumHeads%8 != 0 || v["vocab_size"]%8 != 0 {
			t.Errorf("%s: experts %d, KDA heads %d, MLA heads %d, vocab %d",
				sc, c.NumExperts, c.KDAHeads, c.NumHeads, v["vocab_size"])
		}
		if (v["kv_lora_rank"]+v["qk_rope_head_dim"])%128 == 0 || c.KDAHeads%128 == 0 {
			t.Errorf("%s: kv_a_proj_with_mqa and b_proj rows are multiples of 128", sc)
		}
		if c.Experts != ExpertsMXFP4 || !c.Vision || v["latent_moe_use_norm"] != 1 || v["mla_use_output_gate"] != 1 {
			t.Errorf("%s: not every kind of tensor", sc)
		}
		gb := float64(c.TotalBytes()) / 1e9
		switch sc {
		case ScaleTiny:
			if gb > 0.064 {
				t.Errorf("tiny is %.3f GB", gb)
			}
		case ScaleSmall:
			if gb < 0.7 || gb > 1.3 {
				t.Errorf("small is %.3f GB, want about 1", gb)
			}
		}
	}
	if err := new(Scale).Set("huge"); err == nil {
		t.Error("ParseScale accepted huge")
	}
}

func k3Raw(t *testing.T) map[string]any {
	t.Helper()
	return mustK3(t).Raw()
}

func at(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		m = m[p].(map[string]any)
	}
	return m
}

func encode(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	n := func(v int) json.Number { return json.Number(fmt.Sprint(v)) }
	cases := []struct {
		field  string
		mutate func(m map[string]any)
	}{
		{"model_type", func(m map[string]any) { m["model_type"] = "llama" }},
		{"text_config.model_type", func(m map[string]any) { at(m, "text_config")["model_type"] = "llama" }},
		{"text_config", func(m map[string]any) { m["text_config"] = "x" }},
		{"text_config.num_experts", func(m map[string]any) { delete(at(m, "text_config"), "num_experts") }},
		{"text_config.num_experts", func(m map[string]any) { at(m, "text_config")["num_experts"] = n(16) }},
		{"text_config.num_experts_per_token", func(m map[string]any) { at(m, "text_config")["num_experts_per_token"] = n(0) }},
		{"text_config.hidden_size", func(m map[string]any) { at(m, "text_config")["hidden_size"] = n(0) }},
		{"text_config.hidden_size", func(m map[string]any) { at(m, "text_config")["hidden_size"] = n(-7168) }},
		{"text_config.hidden_size", func(m map[string]any) { at(m, "text_config")["hidden_size"] = "7168" }},
		{"text_config.hidden_size", func(m map[string]any) { at(m, "text_config")["hidden_size"] = json.Number("7168.5") }},
		{"text_config.vocab_size", func(m map[string]any) { at(m, "text_config")["vocab_size"] = n(1 << 30) }},
		{"text_config.num_hidden_layers", func(m map[string]any) { delete(at(m, "text_config"), "num_hidden_layers") }},
		{"text_config.num_key_value_heads", func(m map[string]any) { at(m, "text_config")["num_key_value_heads"] = n(7) }},
		{"text_config.q_lora_rank", func(m map[string]any) { at(m, "text_config")["q_lora_rank"] = nil }},
		{"text_config.attn_res_block_size", func(m map[string]any) { at(m, "text_config")["attn_res_block_size"] = n(0) }},
		{"text_config.first_k_dense_replace", func(m map[string]any) { at(m, "text_config")["first_k_dense_replace"] = n(94) }},
		{"text_config.latent_moe_use_norm", func(m map[string]any) { at(m, "text_config")["latent_moe_use_norm"] = "yes" }},
		{"text_config.linear_attn_config", func(m map[string]any) { delete(at(m, "text_config"), "linear_attn_config") }},
		{"text_config.linear_attn_config.use_full_rank_gate", func(m map[string]any) {
			at(m, "text_config", "linear_attn_config")["use_full_rank_gate"] = false
		}},
		{"text_config.linear_attn_config.num_heads", func(m map[string]any) { at(m, "text_config", "linear_attn_config")["num_heads"] = n(-96) }},
		{"text_config.linear_attn_config.full_attn_layers[23]", func(m map[string]any) {
			at(m, "text_config", "linear_attn_config")["full_attn_layers"].([]any)[23] = n(94)
		}},
		{"text_config.linear_attn_config.full_attn_layers[0]", func(m map[string]any) {
			at(m, "text_config", "linear_attn_config")["full_attn_layers"].([]any)[0] = n(0)
		}},
		{"text_config.linear_attn_config.full_attn_layers[1]", func(m map[string]any) {
			at(m, "text_config", "linear_attn_config")["full_attn_layers"].([]any)[1] = n(4)
		}},
		{"text_config.linear_attn_config.full_attn_layers", func(m map[string]any) {
			delete(at(m, "text_config", "linear_attn_config"), "full_attn_layers")
		}},
		{"text_config.linear_attn_config.kda_layers[0]", func(m map[string]any) {
			at(m, "text_config", "linear_attn_config")["kda_layers"].([]any)[0] = n(4)
		}},
		{"text_config.linear_attn_config.kda_layers", func(m map[string]any) {
			l := at(m, "text_config", "linear_attn_config")
			l["kda_layers"] = l["kda_layers"].([]any)[1:]
		}},
		{"text_config.linear_attn_config.kda_layers[69]", func(m map[string]any) {
			l := at(m, "text_config", "linear_attn_config")
			l["kda_layers"] = append(l["kda_layers"].([]any), n(1))
		}},
		{"text_config.quantization_config.quant_method", func(m map[string]any) {
			at(m, "text_config", "quantization_config")["quant_method"] = "gptq"
		}},
		{"text_config.quantization_config", func(m map[string]any) { at(m, "text_config")["quantization_config"] = "x" }},
		{"quantization_config.quant_method", func(m map[string]any) { m["quantization_config"] = map[string]any{"quant_method": "gptq"} }},
		{"quantization_config.quant_algo", func(m map[string]any) {
			m["quantization_config"] = map[string]any{"quant_method": "modelopt_mixed", "quant_algo": "FP8", "quantized_layers": map[string]any{}}
		}},
		{"quantization_config.quantized_layers.model.layers.1.mlp.experts.group_size", func(m map[string]any) {
			m["quantization_config"] = map[string]any{"quant_method": "modelopt_mixed", "quant_algo": "MIXED_PRECISION", "quantized_layers": map[string]any{
				"model.layers.1.mlp.experts": map[string]any{"quant_algo": "NVFP4", "group_size": n(32)}}}
		}},
		{"text_config.quantization_config.config_groups.group_0.weights.group_size", func(m map[string]any) {
			at(m, "text_config", "quantization_config", "config_groups", "group_0", "weights")["group_size"] = n(16)
		}},
		{"text_config.quantization_config.config_groups", func(m map[string]any) {
			at(m, "text_config", "quantization_config", "config_groups", "group_0")["format"] = "pack-quantized"
		}},
		{"text_config.moe_intermediate_size", func(m map[string]any) { at(m, "text_config")["moe_intermediate_size"] = n(3000) }},
		{"vision_config.text_hidden_size", func(m map[string]any) { at(m, "vision_config")["text_hidden_size"] = n(4096) }},
		{"vision_config.vt_hidden_size", func(m map[string]any) { delete(at(m, "vision_config"), "vt_hidden_size") }},
		{"vision_config.merge_kernel_size", func(m map[string]any) { at(m, "vision_config")["merge_kernel_size"] = []any{n(2)} }},
		{"vision_config.merge_kernel_size", func(m map[string]any) { delete(at(m, "vision_config"), "merge_kernel_size") }},
		{"vision_config.qkv_hidden_size", func(m map[string]any) { delete(at(m, "vision_config"), "qkv_hidden_size") }},
		{"vision_config.qkv_hidden_size", func(m map[string]any) { at(m, "vision_config")["qkv_hidden_size"] = n(1000) }},
	}
	for _, c := range cases {
		m := k3Raw(t)
		c.mutate(m)
		_, err := ParseConfig(encode(t, m))
		var fe *fieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: got %v, want a FieldError", c.field, err)
			continue
		}
		if fe.Field != c.field || !strings.HasPrefix(err.Error(), "config: "+c.field+": ") {
			t.Errorf("%s: error names %q: %v", c.field, fe.Field, err)
		}
	}
	for _, bad := range []string{``, `[]`, `null`, `{"model_type": "kimi_linear"} {}`, `{"model_type": `, `"x"`} {
		if _, err := ParseConfig([]byte(bad)); !errors.Is(err, errInvalidConfig) {
			t.Errorf("ParseConfig(%q) = %v", bad, err)
		}
	}
}

// A bare kimi_linear text config (the released text_config on its own):
// names under model., no vision, 94 shards. Under -short the names are read
// from shards 1, 4 and 94 (a KDA and an MLA layer, the model-level tensors)
// and the count from shardStats; the full run lists all 94 shards.
func TestBareTextConfig(t *testing.T) {
	t.Parallel()
	m := k3Raw(t)
	text := at(m, "text_config")
	c, err := ParseConfig(encode(t, text))
	if err != nil {
		t.Fatal(err)
	}
	if c.Experts != ExpertsMXFP4 || c.NumTensors() != mustK3(t).NumTensors()-165-3 {
		t.Errorf("experts %v, %d tensors", c.Experts, c.NumTensors())
	}
	if c.Multimodal || c.Vision || c.NumShards() != 94 {
		t.Fatalf("multimodal %v, vision %v, %d shards", c.Multimodal, c.Vision, c.NumShards())
	}
	k3 := mustK3(t)
	names := map[string]bool{}
	count := 0
	for i := range c.NumShards() {
		if testing.Short() {
			n, _ := c.shardStats(i)
			count += n
			if i != 0 && i != 3 && i != 93 {
				continue
			}
		}
		for _, ts := range c.ShardTensors(i) {
			names[ts.Name] = true
		}
	}
	if !testing.Short() {
		count = len(names)
	}
	if count != k3.NumTensors()-165-3 {
		t.Errorf("%d tensors", count)
	}
	for _, n := range []string{"model.embed_tokens.weight", "lm_head.weight", "model.layers.3.self_attn.kv_b_proj.weight"} {
		if !names[n] {
			t.Errorf("%s missing", n)
		}
	}
	if got := c.shardOf("lm_head.weight"); got != "model-00094-of-000094.safetensors" {
		t.Errorf("lm_head in %q", got)
	}
	// errors name bare fields
	delete(text, "num_experts")
	if _, err := ParseConfig(encode(t, text)); err == nil || !strings.HasPrefix(err.Error(), "config: num_experts: ") {
		t.Errorf("bare config error: %v", err)
	}
}

// Optional features change the catalog the way a loader would expect.
func TestConfigVariants(t *testing.T) {
	t.Parallel()
	m := k3Raw(t)
	tc := at(m, "text_config")
	tc["tie_word_embeddings"] = true
	tc["latent_moe_use_norm"] = false
	tc["mla_use_output_gate"] = false
	delete(tc, "quantization_config")
	delete(m, "vision_config")
	c, err := ParseConfig(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if c.Experts != ExpertsBF16 || c.NumShards() != 94 || c.QuantizationPath != "" || c.quantizationConfig() != nil {
		t.Fatalf("experts %v, %d shards", c.Experts, c.NumShards())
	}
	want := 497220 - 1 /* lm_head */ - 92 /* norm */ - 24 /* MLA g_proj */ - 92*896*3 /* scales */ - (165 + 3)
	if c.NumTensors() != want || len(c.catalog()) != want {
		t.Errorf("%d tensors, want %d", c.NumTensors(), want)
	}
	for _, ts := range c.ShardTensors(1) {
		if strings.HasSuffix(ts.Name, "experts.0.w2.weight") && !slices.Equal(ts.Shape, []int64{3584, 3072}) {
			t.Errorf("BF16 w2 shape %v", ts.Shape)
		}
	}
}

func TestRawIsACopy(t *testing.T) {
	t.Parallel()
	c := mustK3(t)
	r := c.Raw()
	at(r, "text_config")["hidden_size"] = json.Number("1")
	if at(c.Raw(), "text_config")["hidden_size"] != json.Number("7168") {
		t.Fatal("Raw shares state with the config")
	}
	b, err := MarshalConfig(c.Raw())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, readReleased(t)) {
		t.Error("the released config does not re-render to its own bytes")
	}
}

func BenchmarkK3Catalog(b *testing.B) {
	c := mustK3(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.catalog()
	}
}

// A map that recurs in a document (quantized_layers gives every module the
// same entry) renders exactly as distinct copies of it do, at every depth
// it recurs at, in maps and in lists.
func TestMarshalConfigSharedMaps(t *testing.T) {
	t.Parallel()
	doc := func(shared func() map[string]any) map[string]any {
		layers := map[string]any{}
		for i := range 50 {
			layers["m"+strconv.Itoa(i)] = shared()
		}
		return map[string]any{
			"a":      shared(),
			"layers": layers,
			"list":   []any{shared(), []any{shared(), map[string]any{"x": shared()}}},
			"q":      map[string]any{"quantized_layers": layers, "deeper": map[string]any{"layers": layers}},
		}
	}
	entry := map[string]any{"quant_algo": "FP8_PB_WO", "group_size": 16, "nested": map[string]any{"k": []any{1, "é"}}}
	got, err := MarshalConfig(doc(func() map[string]any { return entry }))
	if err != nil {
		t.Fatal(err)
	}
	want, err := MarshalConfig(doc(func() map[string]any { return deepCopy(entry).(map[string]any) }))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("a shared map renders otherwise than its copies:\n%s\nwant\n%s", got, want)
	}
	if !strings.Contains(string(got), "\n      \"group_size\": 16,\n") {
		t.Fatalf("no entry rendered at depth 3:\n%s", got)
	}
}
