package convert

import (
	"context"
	"errors"
	"fmt"
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

// A bare kimi_linear checkpoint (the tiny replica's text_config as the whole
// config: model.layers.…, no language_model. prefix, no vision) converts with
// both built-in recipes in ModelOpt's and compressed-tensors' format and
// verifies (DeepSeek's is refused: it has no place for the MXFP4 experts'
// description); each plan quantizes the
// recipe's count of weights, as many as on the multimodal checkpoint, and
// ModelOpt's quantized_layers spell the modules as the bare checkpoint does.
func TestConvertBareKimiLinear(t *testing.T) {
	bare := filepath.Join(t.TempDir(), "bare")
	if err := model.Synth(bare, model.SynthOptions{Config: testckpt.BareConfigJSON(t, model.ScaleTiny), Seed: 7}); err != nil {
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
	mm := openSrc(t, tinySrc)
	formats := []Format{ModelOpt, DeepSeek, CompressedTensors}
	if testing.Short() {
		formats = formats[:1]
	}
	for _, recipe := range []string{AttnMoEDenseFP8, ModelOptK3} {
		r, err := Lookup(recipe)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range formats {
			opts := Options{Format: f}
			what := fmt.Sprintf("%s/%v", recipe, f)
			p, err := NewPlan(c, nil, r, opts)
			if f == DeepSeek {
				// DeepSeek's fp8 quantization_config says nothing of the
				// MXFP4 experts; a bare config has no text_config to keep
				// their description in, so the plan is refused, not written
				// without it.
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "text_config") || !strings.Contains(err.Error(), "--format modelopt") {
					t.Errorf("%s: plan of the bare checkpoint: %v, want ErrConfig saying the experts' description has nowhere to go", what, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: plan of the bare checkpoint: %v", what, err)
			}
			pm, err := NewPlan(mm, nil, r, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := p.Totals().Quantized, quantizedOnK3[recipe]; got != want || pm.Totals().Quantized != want {
				t.Errorf("%s: %d quantized (multimodal %d), want %d", what, got, pm.Totals().Quantized, want)
			}
			dst := filepath.Join(t.TempDir(), "out")
			res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2})
			if err != nil || !res.Finalized {
				t.Fatalf("%s: convert: %v", what, err)
			}
			rep := verifyDir(t, bare, dst)
			if !rep.OK || len(rep.Tensors) != quantizedOnK3[recipe] {
				t.Errorf("%s: verify: ok %v, %d quantized tensors checked: %v", what, rep.OK, len(rep.Tensors), rep.Violations)
			}
			out := readJSONFile(t, filepath.Join(dst, ConfigName))
			if out["model_type"] != "kimi_linear" {
				t.Errorf("%s: converted model_type %v", what, out["model_type"])
			}
			if f != ModelOpt {
				continue
			}
			layers, _ := out[quantKey].(map[string]any)["quantized_layers"].(map[string]any)
			_, mmOut, _ := configsFor(t, tinyConfig(t), recipe, opts)
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
	}
}
