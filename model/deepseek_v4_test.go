package model

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

func deepseekV4(t *testing.T, sc Scale, edit func(map[string]any)) (*Config, error) {
	t.Helper()
	b, err := FamilyConfigJSON("deepseek-v4", sc)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var raw map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		edit(raw)
		if b, err = json.Marshal(raw); err != nil {
			t.Fatal(err)
		}
	}
	return ParseConfig(b)
}

// The DeepSeek-V4 family gives V4-Flash's tensors as vLLM's V4 loaders and
// DeepSeek's inference/model.py build them (testdata/deepseek-v4/FACTS.md):
// each shape below is the sources' formula evaluated by hand for the
// reported config (H 4096, 64 heads of 512, q/o LoRA 1024, 8 o_groups,
// 256 experts of 2048, hc_mult 4, an indexer of 64 heads of 128), and the
// per-layer schedule is compress_ratios[n] (0, 0, 4, 128, 4, …, 4), the
// first 3 layers hash-routed, the MTP layer mtp.0. with ratio 1.
func TestDeepSeekV4Family(t *testing.T) {
	c, err := deepseekV4(t, ScaleFull, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.sch.family != "deepseek-v4" || c.NumLayers != 44 || c.NumExperts != 256 {
		t.Fatalf("family %s, %d layers, %d experts", c.sch.family, c.NumLayers, c.NumExperts)
	}
	specs := map[string]safetensors.TensorSpec{}
	for _, ts := range c.catalog() {
		specs[ts.Name] = ts
	}
	type want struct {
		dt    string
		shape []int64
	}
	for name, w := range map[string]want{
		"embed.weight":                                  {"BF16", []int64{129280, 4096}},
		"head.weight":                                   {"BF16", []int64{129280, 4096}},
		"hc_head_fn":                                    {"F32", []int64{4, 16384}},
		"layers.0.hc_attn_fn":                           {"F32", []int64{24, 16384}},
		"layers.0.hc_ffn_scale":                         {"F32", []int64{3}},
		"layers.0.attn.attn_sink":                       {"F32", []int64{64}},
		"layers.0.attn.wq_a.weight":                     {"F8_E4M3", []int64{1024, 4096}},
		"layers.0.attn.wq_a.scale":                      {"F8_E8M0", []int64{8, 32}},
		"layers.0.attn.wq_b.weight":                     {"F8_E4M3", []int64{32768, 1024}},
		"layers.0.attn.wkv.weight":                      {"F8_E4M3", []int64{512, 4096}},
		"layers.0.attn.wo_a.weight":                     {"F8_E4M3", []int64{8192, 4096}},
		"layers.0.attn.wo_b.scale":                      {"F8_E8M0", []int64{32, 64}},
		"layers.0.ffn.gate.tid2eid":                     {"I64", []int64{129280, 6}},
		"layers.0.ffn.shared_experts.w2.weight":         {"F8_E4M3", []int64{4096, 2048}},
		"layers.0.ffn.experts.255.w1.weight":            {"I8", []int64{2048, 2048}},
		"layers.0.ffn.experts.255.w1.scale":             {"F8_E8M0", []int64{2048, 128}},
		"layers.0.ffn.experts.0.w2.weight":              {"I8", []int64{4096, 1024}},
		"layers.0.ffn.experts.0.w2.scale":               {"F8_E8M0", []int64{4096, 64}},
		"layers.3.ffn.gate.bias":                        {"F32", []int64{256}},
		"layers.2.attn.compressor.ape":                  {"F32", []int64{4, 1024}},
		"layers.2.attn.compressor.wkv.weight":           {"BF16", []int64{1024, 4096}},
		"layers.3.attn.compressor.ape":                  {"F32", []int64{128, 512}},
		"layers.3.attn.compressor.wgate.weight":         {"BF16", []int64{512, 4096}},
		"layers.42.attn.indexer.wq_b.weight":            {"F8_E4M3", []int64{8192, 1024}},
		"layers.42.attn.indexer.weights_proj.weight":    {"BF16", []int64{64, 4096}},
		"layers.42.attn.indexer.compressor.ape":         {"F32", []int64{4, 256}},
		"layers.42.attn.indexer.compressor.norm.weight": {"BF16", []int64{128}},
		"mtp.0.e_proj.weight":                           {"F8_E4M3", []int64{4096, 4096}},
		"mtp.0.hc_head_base":                            {"F32", []int64{4}},
		"mtp.0.ffn.gate.bias":                           {"F32", []int64{256}},
		"mtp.0.ffn.experts.7.w3.scale":                  {"F8_E8M0", []int64{2048, 128}},
	} {
		ts, ok := specs[name]
		if !ok || ts.DType.String() != w.dt || !slices.Equal(ts.Shape, w.shape) {
			t.Errorf("%s: %v %s %v, want %s %v", name, ok, ts.DType, ts.Shape, w.dt, w.shape)
		}
	}
	for _, name := range []string{
		"layers.0.attn.compressor.ape", "layers.1.attn.compressor.wkv.weight", "layers.3.attn.indexer.wq_b.weight",
		"layers.2.ffn.gate.bias", "layers.3.ffn.gate.tid2eid", "mtp.0.attn.compressor.ape", "mtp.0.ffn.gate.tid2eid",
		"layers.43.attn_norm.weight", "model.layers.0.attn_norm.weight", "lm_head.weight",
	} {
		if _, ok := specs[name]; ok {
			t.Errorf("%s: in the catalog, want none", name)
		}
	}
	// Every layer but the MTP one has its ratio's tensors.
	ratios := []int{0, 0}
	for n := 2; n < 43; n++ {
		ratios = append(ratios, 4+124*(n%2))
	}
	for n, r := range ratios {
		p := "layers." + strconv.Itoa(n) + ".attn."
		_, comp := specs[p+"compressor.norm.weight"]
		_, idx := specs[p+"indexer.wq_b.scale"]
		if comp != (r > 0) || idx != (r == 4) {
			t.Errorf("layer %d (ratio %d): compressor %v, indexer %v", n, r, comp, idx)
		}
	}
	if len(specs) != 69187 || c.NumTensors() != 69187 {
		t.Errorf("%d tensors", len(specs))
	}
	// The classifier reads DeepSeek's spellings, the MTP layer as layer 43.
	cls := c.Classifier
	for name, w := range map[string]struct {
		group         string
		layer, expert int
		proj          expertProjection
	}{
		"mtp.0.ffn.experts.3.w2.scale":         {"experts", 43, 3, expertW2},
		"layers.5.ffn.experts.0.w1.weight":     {"experts", 5, 0, expertW1},
		"layers.5.attn.wq_b.scale":             {"v4.attn.wq_b", 5, -1, expertProjection(0)},
		"mtp.0.e_proj.weight":                  {"mtp.eh_proj", 43, -1, expertProjection(0)},
		"layers.2.attn.indexer.compressor.ape": {"v4.attn.indexer", 2, -1, expertProjection(0)},
		"head.weight":                          {"lm_head", -1, -1, expertProjection(0)},
		"hc_head_fn":                           {"final_norms", -1, -1, expertProjection(0)},
		"embed.weight":                         {"embedding", -1, -1, expertProjection(0)},
	} {
		tn := cls.ParseName(name)
		if tn.Group.String() != w.group || tn.Layer != w.layer || tn.Expert != w.expert || tn.Proj != w.proj {
			t.Errorf("%s: group %s layer %d expert %d %s, want %+v", name, tn.Group, tn.Layer, tn.Expert, tn.Proj, w)
		}
	}
}

// A V4 config whose per-layer list or divisibility is wrong is an error
// that names the key and says what is wrong.
func TestDeepSeekV4ConfigErrors(t *testing.T) {
	for _, c := range []struct {
		edit func(map[string]any)
		want string
	}{
		{func(m map[string]any) { m["compress_ratios"] = []any{0, 4} }, "compress_ratios: has 2 entries, want at least 4"},
		{func(m map[string]any) { m["compress_ratios"] = []any{0, 4, 129, 4} }, "compress_ratios[2]: must be in 0..128, got 129"},
		{func(m map[string]any) { m["compress_ratios"] = []any{0, 4, 8, 4} }, "compress_ratios[2]: must be one of [0 4 128], got 8"},
		{func(m map[string]any) { m["compress_ratios"] = "4" }, "compress_ratios: must be an array of integers"},
		{func(m map[string]any) { delete(m, "compress_ratios") }, "compress_ratios: missing"},
		{func(m map[string]any) { m["hidden_size"] = 200 }, "hidden_size: must be a multiple of 128, got 200"},
		{func(m map[string]any) { m["num_hash_layers"] = 5 }, "num_hash_layers: must be in 0..4, got 5"},
	} {
		_, err := deepseekV4(t, ScaleTiny, c.edit)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error with %q", err, c.want)
		}
	}
}

// A comparison reads 1 or 0, below + and - in precedence; ! negates it all.
func TestExprCompare(t *testing.T) {
	vals := map[string]int64{"a": 4, "b": 3}
	en := func(n string) (int64, error) { return vals[n], nil }
	for src, want := range map[string]int64{
		"a == 4": 1, "a == b + 1": 1, "b < a": 1, "a < b": 0, "!b < a": 0, "(1-b)*(a == 4)": -2, "2*(b < 4)+1": 3,
	} {
		e, err := parseExpr(src)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := e.eval(en); err != nil || v != want {
			t.Errorf("%s = %d (%v), want %d", src, v, err, want)
		}
	}
}
