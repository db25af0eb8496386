package convert

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// miniSrc is a five-layer replica with the tiny one's dimensions and side
// files, for tests that need some K3 checkpoint but not the 93-layer
// schedule's figures: layer 0 dense with KDA, layers 1 and 2 KDA with MoE,
// layers 3 and 4 MLA with MoE, then the three model-level shards (8 shards,
// a twelfth of the tiny replica's bytes). Every tensor group and every
// layer kind of K3 is in it, at the same layer indexes as in the tiny
// replica (layer 3 is the first MLA layer in both). miniRef is its default
// conversion.
var miniSrc, miniRef string

// miniLayers is the mini replica's layer count; its 1-based MLA layers are
// 4 and 5, as K3 puts MLA at every fourth layer and at the last one.
const miniLayers = 5

// miniConfigJSON is the tiny replica's config.json with five layers.
func miniConfigJSON() ([]byte, error) {
	b, err := model.FamilyConfigJSON("", model.ScaleTiny)
	if err != nil {
		return nil, err
	}
	return testckpt.EditTextConfig(b, func(text map[string]any) error {
		lin, ok := text["linear_attn_config"].(map[string]any)
		if !ok {
			return fmt.Errorf("tiny config has no linear_attn_config")
		}
		text["num_hidden_layers"] = miniLayers
		lin["full_attn_layers"] = []any{4, 5}
		lin["kda_layers"] = []any{1, 2, 3}
		return nil
	})
}

// makeReplica synthesizes the checkpoint configJSON describes (nil: the
// tiny scale) into dir with the side files added.
func makeReplica(dir string, configJSON []byte) error {
	if err := model.Synth(dir, model.SynthOptions{Scale: model.ScaleTiny, Config: configJSON, Seed: 7}); err != nil {
		return err
	}
	for name, body := range sideFiles {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// quantizedOn counts the weights attn-moe-dense-fp8 quantizes in the
// checkpoint in dir (quantizedIn).
func quantizedOn(t testing.TB, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, model.ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return quantizedIn(cfg, AttnMoEDenseFP8)
}

// quantizedIn counts the weights a built-in recipe quantizes in the
// checkpoint cfg describes, from the recipes' definitions and the config's
// schedule rather than the planner: attn-moe-dense-fp8 takes KDA q/k/v/g/o,
// the 6 MLA projections, per MoE layer the 3 shared-expert and 2 latent
// projections, per dense layer the 3 MLP projections; modelopt-k3 takes KDA
// q/k/v/g/o/b/f_a/f_b and the 6 MLA projections.
func quantizedIn(cfg *model.Config, recipe string) int {
	full := map[int]bool{}
	for _, l := range cfg.FullAttnLayers {
		full[l] = true
	}
	kda, mla, dense := 5, 6, 3
	moe := 5
	if recipe == ModelOptK3 {
		kda, dense, moe = 8, 0, 0
	}
	n := 0
	for l := 1; l <= cfg.NumLayers; l++ {
		if full[l] {
			n += mla
		} else {
			n += kda
		}
		if l <= cfg.FirstKDense {
			n += dense
		} else {
			n += moe
		}
	}
	return n
}

// miniShard is the file name of the mini replica's 0-based shard i.
func miniShard(i int) string {
	return fmt.Sprintf(model.ShardNameFormat, i+1, miniLayers+3)
}

// TestMiniReplica checks the mini replica is what its tests rely on.
func TestMiniReplica(t *testing.T) {
	t.Parallel()
	c := openSrc(t, miniSrc)
	if len(c.Files) != miniLayers+3 {
		t.Fatalf("%d shards, want %d", len(c.Files), miniLayers+3)
	}
	for _, name := range []string{
		"language_model.model.layers.0.mlp.down_proj.weight",
		"language_model.model.layers.0.self_attn.f_a_proj.weight",
		"language_model.model.layers.1.self_attn.q_proj.weight",
		"language_model.model.layers.2.block_sparse_moe.experts.5.w3.weight_packed",
		"language_model.model.layers.3.self_attn.q_b_proj.weight",
		"language_model.model.layers.4.self_attn.kv_a_proj_with_mqa.weight",
	} {
		if _, _, ok := c.Lookup(name); !ok {
			t.Errorf("no %s", name)
		}
	}
	// 3 KDA + 2 MLA layers, 1 dense + 4 MoE.
	if got, want := quantizedOn(t, miniSrc), 3*5+2*6+3+4*5; got != want {
		t.Errorf("quantizedOn(mini) = %d, want %d", got, want)
	}
	for recipe, want := range quantizedOnK3 {
		if got := quantizedIn(tinyConfig(t), recipe); got != want {
			t.Errorf("%s: quantizedIn(tiny) = %d, want %d", recipe, got, want)
		}
	}
	if strings.Contains(miniShard(0), "000096") {
		t.Errorf("mini shard name %s", miniShard(0))
	}
}
