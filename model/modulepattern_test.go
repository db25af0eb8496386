package model

import (
	"regexp"
	"strings"
	"testing"
)

func TestModuleRegexp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		module   string
		anyLayer bool
		want     string
		matches  []string
		misses   []string
	}{
		{"language_model.model.layers.3.block_sparse_moe.shared_experts.up_proj", true,
			`(?:.*\.)?layers\.\d+\.(?:block_sparse_moe|mlp)\.shared_experts\.up_proj$`,
			[]string{"language_model.model.layers.7.block_sparse_moe.shared_experts.up_proj", "model.layers.3.mlp.shared_experts.up_proj", "layers.90.mlp.shared_experts.up_proj"},
			[]string{"model.layers.3.mlp.shared_experts.up_projx", "model.layers.3.xmlp.shared_experts.up_proj"}},
		{"model.layers.12.self_attn.q_b_proj", false,
			`(?:.*\.)?layers\.12\.self_attn\.q_b_proj$`,
			[]string{"language_model.model.layers.12.self_attn.q_b_proj", "layers.12.self_attn.q_b_proj"},
			[]string{"model.layers.13.self_attn.q_b_proj", "model.layers.112.self_attn.q_b_proj"}},
		{"language_model.lm_head", true, `(?:.*\.)?lm_head$`,
			[]string{"lm_head", "language_model.lm_head"}, []string{"xlm_head"}},
	} {
		got := moduleRegexp(c.module, c.anyLayer)
		if got != c.want {
			t.Errorf("moduleRegexp(%q, %v) = %q, want %q", c.module, c.anyLayer, got, c.want)
			continue
		}
		re := regexp.MustCompile(`^(?:` + got + `)`)
		for _, m := range c.matches {
			if !re.MatchString(m) {
				t.Errorf("%s does not match %s", got, m)
			}
		}
		for _, m := range c.misses {
			if re.MatchString(m) {
				t.Errorf("%s matches %s", got, m)
			}
		}
	}
	if l, k := moduleKind("model.layers.0.mlp.gate_proj"); l != 0 || k != "mlp.gate_proj" {
		t.Errorf("moduleKind = %d, %q", l, k)
	}
}

func TestExpertBank(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"language_model.model.layers.5.block_sparse_moe.experts.17.w1.weight_packed": "language_model.model.layers.5.block_sparse_moe.experts",
		"model.layers.5.block_sparse_moe.experts.0.w2.weight_scale_2":                "model.layers.5.block_sparse_moe.experts",
		"model.layers.5.mlp.experts.3.down_proj.weight":                              "model.layers.5.mlp.experts",
		"model.layers.5.block_sparse_moe.shared_experts.up_proj.weight":              "",
		"model.layers.5.block_sparse_moe.experts.w1.weight":                          "",
		"model.layers.5.block_sparse_moe.gate.weight":                                "",
		"vision_tower.encoder.blocks.0.mlp.fc0.weight":                               "",
	} {
		if got := k3Classifier.ExpertBank(name); got != want {
			t.Errorf("ExpertBank(%q) = %q, want %q", name, got, want)
		}
	}
}

// ExpertBank names a bank for exactly the names ParseName reads as routed
// experts: every tensor of the small catalog and names a little off.
func TestExpertBankIsParseName(t *testing.T) {
	t.Parallel()
	b, err := scaledConfigJSON(ScaleSmall)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	experts := 0
	for i := range c.NumShards() {
		for _, s := range c.ShardTensors(i) {
			for _, n := range []string{s.Name, strings.TrimPrefix(s.Name, "language_model."), "x" + s.Name,
				strings.Replace(s.Name, "layers.", "layers.x", 1), strings.Replace(s.Name, "experts.", "experts.x", 1),
				strings.Replace(s.Name, "block_sparse_moe.", "mlp.", 1), strings.Replace(s.Name, ".w1.", ".", 1),
				s.Name[:strings.LastIndexByte(s.Name, '.')+1], strings.Replace(s.Name, "layers.", "layers.1234567890", 1)} {
				got, isExpert := k3Classifier.ExpertBank(n), k3Classifier.ParseName(n).Group == GroupExperts
				if (got != "") != isExpert || isExpert && !strings.HasPrefix(n, got+".") || isExpert && !strings.HasSuffix(got, ".experts") {
					t.Fatalf("ExpertBank(%q) = %q; ParseName reads an expert: %v", n, got, isExpert)
				}
				if isExpert {
					experts++
				}
			}
		}
	}
	if experts == 0 {
		t.Fatal("no expert names probed")
	}
}
