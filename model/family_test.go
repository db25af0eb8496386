package model

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

var useQwen = sync.OnceValue(func() error {
	b, err := os.ReadFile("testdata/qwen3moe/schema.json")
	if err != nil {
		return err
	}
	return UseSchema(b)
})

func qwenConfig(t *testing.T) (*Config, []byte) {
	t.Helper()
	if err := useQwen(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/qwen3moe/config.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return c, b
}

// A family that is not built in, from its schema file alone: a
// Qwen3-MoE-shaped config gets the tensors transformers' Qwen3MoeModel
// names (modeling_qwen3_moe.py: self_attn.{q,k,v,o}_proj, q_norm, k_norm,
// mlp.gate, mlp.experts.E.{gate,up,down}_proj), shaped from its config.
func TestSchemaFileFamily(t *testing.T) {
	t.Parallel()
	c, cfgJSON := qwenConfig(t)
	if c.sch.family != "qwen3-moe" || c.NumLayers != 3 || c.NumExperts != 8 || c.Experts != ExpertsBF16 || c.NumShards() != 4 {
		t.Fatalf("family %s, %d layers, %d experts (%v), %d shards", c.sch.family, c.NumLayers, c.NumExperts, c.Experts, c.NumShards())
	}
	// Per layer: 2 norms, 4 projections, 2 head norms, the router, 8 experts × 3.
	if n := c.NumTensors(); n != 3*(9+8*3)+3 {
		t.Errorf("%d tensors", n)
	}
	want := map[string][]int64{
		"model.embed_tokens.weight":                     {256, 64},
		"lm_head.weight":                                {256, 64},
		"model.norm.weight":                             {64},
		"model.layers.2.self_attn.q_proj.weight":        {128, 64},
		"model.layers.2.self_attn.k_proj.weight":        {32, 64},
		"model.layers.2.self_attn.o_proj.weight":        {64, 128},
		"model.layers.0.self_attn.k_norm.weight":        {16},
		"model.layers.1.mlp.gate.weight":                {8, 64},
		"model.layers.1.mlp.experts.7.down_proj.weight": {64, 32},
		"model.layers.1.mlp.experts.0.up_proj.weight":   {32, 64},
	}
	got := map[string]safetensors.TensorSpec{}
	for _, ts := range c.catalog() {
		got[ts.Name] = ts
	}
	for name, shape := range want {
		if ts, ok := got[name]; !ok || ts.DType != safetensors.BF16 || !slices.Equal(ts.Shape, shape) {
			t.Errorf("%s: %+v, want BF16 %v", name, ts, shape)
		}
	}
	groups := map[string]string{
		"model.layers.1.self_attn.q_norm.weight":        "attn.q_norm",
		"model.layers.1.mlp.experts.3.gate_proj.weight": "experts",
		"model.layers.1.mlp.gate.weight":                "router.gate",
		"lm_head.weight":                                "lm_head",
		"model.norm.weight":                             "final_norms",
	}
	for name, g := range groups {
		if n := c.Classifier.ParseName(name); n.Group.String() != g || (g == "experts") != (n.Expert == 3) {
			t.Errorf("%s: %+v, want group %s", name, n, g)
		}
	}
	if comp := c.Classifier.Classify("model.layers.0.self_attn.v_proj.weight"); comp.String() != "attention" {
		t.Errorf("v_proj is %v", comp)
	}
	if s := c.shardOf("lm_head.weight"); s != "model-00004-of-000004.safetensors" {
		t.Errorf("lm_head in %s", s)
	}

	// synth writes it, and its index lists the catalog.
	dir := filepath.Join(t.TempDir(), "qwen")
	if err := Synth(dir, SynthOptions{Config: cfgJSON, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	idx := ck.Index()
	if idx == nil {
		t.Fatalf("%s: no index", dir)
	}
	if len(idx.WeightMap) != c.NumTensors() || idx.TotalSize != c.TotalBytes() {
		t.Errorf("index: %d tensors, %d bytes; catalog %d, %d", len(idx.WeightMap), idx.TotalSize, c.NumTensors(), c.TotalBytes())
	}
	if idx.WeightMap["model.layers.2.mlp.experts.5.down_proj.weight"] != "model-00003-of-000004.safetensors" {
		t.Errorf("placement: %v", idx.WeightMap["model.layers.2.mlp.experts.5.down_proj.weight"])
	}
}

// The reader reads the file's dims with their bounds and names the key.
func TestSchemaFileConfigErrors(t *testing.T) {
	t.Parallel()
	_, b := qwenConfig(t)
	for _, tc := range []struct{ from, to, want string }{
		{`"num_key_value_heads": 2`, `"num_key_value_heads": 9`, "config: num_key_value_heads: must be in 1..8, got 9"},
		{`"num_experts": 8,`, ``, "config: num_experts: missing"},
		{`"tie_word_embeddings": false`, `"tie_word_embeddings": 0`, "config: tie_word_embeddings: must be true or false"},
		{`"vocab_size": 256`, `"vocab_size": 256, "quantization_config": {}`, "config: quantization_config: family qwen3-moe reads BF16 checkpoints only"},
	} {
		bad := strings.Replace(string(b), tc.from, tc.to, 1)
		if _, err := ParseConfig([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.to, err, tc.want)
		}
	}
}
