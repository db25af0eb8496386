package convert

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// quantizedOnK3 counts the weights each built-in recipe quantizes on K3's
// schedule (69 KDA layers, 24 MLA layers, 92 MoE layers, the dense layer 0),
// from the recipes' definitions rather than the planner:
// attn-moe-dense-fp8 takes KDA q/k/v/g/o, the 6 MLA projections, per MoE
// layer the 3 shared-expert and 2 latent projections, and the 3 dense MLP
// projections; modelopt-k3 takes KDA q/k/v/g/o/b/f_a/f_b and the 6 MLA
// projections.
var quantizedOnK3 = map[string]int{
	AttnMoEDenseFP8: 5*69 + 6*24 + 5*92 + 3, // 952
	ModelOptK3:      8*69 + 6*24,            // 696
}

// A bare kimi_linear checkpoint (a replica's text_config as the whole config:
// model.layers.…, no language_model. prefix, no vision) converts with both
// built-in recipes in ModelOpt's and compressed-tensors' format and verifies
// (DeepSeek's is refused: it has no place for the MXFP4 experts'
// description); each plan quantizes the recipe's count of weights, as many
// as on the multimodal checkpoint, and ModelOpt's quantized_layers spell the
// modules as the bare checkpoint does. Under -short the mini replica's bare
// form, each recipe and format converted once (every pair planned), in the
// full suite every pair converted and the tiny one's form too.
func TestConvertBareKimiLinear(t *testing.T) {
	t.Parallel()
	miniJSON, err := miniConfigJSON()
	if err != nil {
		t.Fatal(err)
	}
	configs := [][]byte{miniJSON}
	if !testing.Short() {
		tiny, err := model.FamilyConfigJSON("", model.ScaleTiny)
		if err != nil {
			t.Fatal(err)
		}
		configs = append(configs, tiny)
	}
	for _, mmJSON := range configs {
		mmCfg, err := model.ParseConfig(mmJSON)
		if err != nil {
			t.Fatal(err)
		}
		bare := filepath.Join(t.TempDir(), "bare")
		if err := model.Synth(bare, model.SynthOptions{Config: testckpt.BareConfig(t, mmJSON), Seed: 7}); err != nil {
			t.Fatal(err)
		}
		c := openSrc(t, bare)
		for _, f := range c.Files {
			for _, ti := range f.Tensors {
				if !strings.HasPrefix(ti.Name, "model.") && !strings.HasPrefix(ti.Name, "lm_head.") {
					t.Fatalf("bare checkpoint holds %s", ti.Name)
				}
			}
		}
		for _, recipe := range []string{AttnMoEDenseFP8, ModelOptK3} {
			r, err := Lookup(recipe)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []model.Format{modelOpt, deepSeek, compressedTensors} {
				opts := Options{Format: f}
				what := fmt.Sprintf("%d layers, %s/%v", mmCfg.NumLayers, recipe, f)
				p, err := NewPlan(c, nil, r, opts)
				if f == deepSeek {
					// DeepSeek's fp8 quantization_config says nothing of the
					// MXFP4 experts; a bare config has no text_config to keep
					// their description in, so the plan is refused, not
					// written without it.
					if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), "text_config") || !strings.Contains(err.Error(), "--format modelopt") {
						t.Errorf("%s: plan of the bare checkpoint: %v, want ErrConfig saying the experts' description has nowhere to go", what, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: plan of the bare checkpoint: %v", what, err)
				}
				mm, err := PlanTensors(r, catalogOf(t, mmCfg), opts)
				if err != nil {
					t.Fatal(err)
				}
				mmQuantized := 0
				for _, o := range mm {
					if o.Role == roleWeight {
						mmQuantized++
					}
				}
				if got, want := p.Totals.Quantized, quantizedIn(mmCfg, recipe); got != want || mmQuantized != want {
					t.Errorf("%s: %d quantized (multimodal %d), want %d", what, got, mmQuantized, want)
				}
				if testing.Short() && (recipe == ModelOptK3) != (f == modelOpt) {
					continue // -short: each recipe and each format converted once
				}
				dst := filepath.Join(t.TempDir(), "out")
				res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2})
				if err != nil || !res.Finalized {
					t.Fatalf("%s: convert: %v", what, err)
				}
				rep := verifyDir(t, bare, dst)
				if want := quantizedIn(mmCfg, recipe); !rep.OK || len(rep.Tensors) != want {
					t.Errorf("%s: verify: ok %v, %d quantized tensors checked, want %d: %v", what, rep.OK, len(rep.Tensors), want, rep.Violations)
				}
				out := readJSONFile(t, filepath.Join(dst, model.ConfigName))
				if out["model_type"] != "kimi_linear" {
					t.Errorf("%s: converted model_type %v", what, out["model_type"])
				}
				if f == modelOpt {
					checkBareLayers(t, what, decodeJSON(t, readFile(t, filepath.Join(dst, model.ConfigName))), mmCfg, recipe, opts)
				}
			}
		}
	}
}

// checkBareLayers checks that out (a bare checkpoint's converted
// config.json) declares in quantized_layers every module the multimodal
// checkpoint of config declares, under the bare spellings model.layers.…
// and layers.… only.
func checkBareLayers(t *testing.T, what string, out map[string]any, config *model.Config, recipe string, opts Options) {
	t.Helper()
	layers, _ := out[quantKey].(map[string]any)["quantized_layers"].(map[string]any)
	_, mmOut, _ := configsFor(t, config, recipe, opts)
	mmLayers := mmOut[quantKey].(map[string]any)["quantized_layers"].(map[string]any)
	want := 0
	for n := range mmLayers {
		if after, ok := strings.CutPrefix(n, "language_model."); ok {
			want++
			if _, ok := layers[after]; !ok {
				t.Errorf("%s: %s not declared (the multimodal checkpoint declares %s)", what, after, n)
			}
		}
	}
	for n := range layers {
		if !strings.HasPrefix(n, "model.layers.") && !strings.HasPrefix(n, "layers.") {
			t.Errorf("%s: quantized_layers holds %s, not a bare spelling", what, n)
		}
	}
	if len(layers) == 0 || len(layers) != 2*want {
		t.Errorf("%s: %d quantized_layers, want %d (model.layers.… and layers.… of the multimodal's %d modules)", what, len(layers), 2*want, want)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
