package convert

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
)

// The released config.json with a full-size header-only replica of the
// checkpoint it describes: convert --dry-run accepts it as it is (default
// flags, and NVIDIA's recipe with NVFP4 experts), plans K3's 952 quantized
// weights and writes nothing; every plan's config.json is the released one
// except for its quantization section (text_config.quantization_config moved
// to a top-level one of the output's convention; DeepSeek's leaves the
// experts' where it was), SiTU included.
func TestReleasedConfigFullSize(t *testing.T) {
	if testing.Short() {
		t.Skip("synthesizes the full-size header-only replica (~130 MB of disk)")
	}
	t.Parallel()
	released, err := os.ReadFile(filepath.Join("..", "model", "testdata", "k3", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "k3")
	if err := model.Synth(src, model.SynthOptions{Config: released, HeaderOnly: true}); err != nil {
		t.Fatalf("synth from the released config: %v", err)
	}
	for _, flags := range [][]string{nil, {"--recipe", ModelOptK3, "--experts", "nvfp4", "--numerics", "modelopt"}} {
		dst := filepath.Join(t.TempDir(), "never")
		stdout, stderr, code := runCLI(t, append([]string{"convert", src, dst, "--dry-run"}, flags...)...)
		want := fmt.Sprintf("%d quantized", quantizedOnK3[AttnMoEDenseFP8])
		if flags != nil {
			want = fmt.Sprintf("%d quantized", quantizedOnK3[ModelOptK3])
		}
		if code != 0 || !strings.Contains(stdout, want) || !strings.Contains(stdout, "model-00096-of-000096.safetensors") {
			t.Errorf("convert --dry-run %v of the released config: exit %d (want %q): %.2000s %s", flags, code, want, stdout, stderr)
		}
		if _, err := os.Stat(dst); !os.IsNotExist(err) {
			t.Errorf("--dry-run %v created DST", flags)
		}
	}

	var rel map[string]any
	if err := json.Unmarshal(released, &rel); err != nil {
		t.Fatal(err)
	}
	if _, ok := rel[quantKey]; ok {
		t.Fatal("the released config has a top-level quantization_config")
	}
	relText := rel[textKey].(map[string]any)
	if _, ok := relText[quantKey]; !ok {
		t.Fatal("the released config has no text_config.quantization_config")
	}
	c := openSrc(t, src)
	for _, tc := range []struct {
		recipe string
		opts   Options
	}{
		{AttnMoEDenseFP8, Options{Format: modelOpt}},
		{AttnMoEDenseFP8, Options{Format: compressedTensors}},
		{AttnMoEDenseFP8, Options{Format: deepSeek}},
		{ModelOptK3, Options{Format: modelOpt, Experts: ExpertsNVFP4, Numerics: quant.ModelOpt}},
	} {
		what := fmt.Sprintf("%s/%v/%v", tc.recipe, tc.opts.Format, tc.opts.Experts)
		r, err := Lookup(tc.recipe)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPlan(c, nil, r, tc.opts)
		if err != nil {
			t.Fatalf("%s: plan of the released checkpoint: %v", what, err)
		}
		if got := p.Totals.Quantized; got != quantizedOnK3[tc.recipe] {
			t.Errorf("%s: %d quantized, want %d", what, got, quantizedOnK3[tc.recipe])
		}
		var out, want map[string]any
		if err := json.Unmarshal(p.Config, &out); err != nil {
			t.Fatalf("%s: output config.json: %v", what, err)
		}
		json.Unmarshal(released, &want)
		if _, ok := out[quantKey].(map[string]any); !ok {
			t.Errorf("%s: output has no top-level quantization_config", what)
		}
		delete(out, quantKey)
		if tc.opts.Format != deepSeek {
			delete(want[textKey].(map[string]any), quantKey)
		}
		if !reflect.DeepEqual(out, want) {
			t.Errorf("%s: output config.json differs from the released one outside the quantization section", what)
		}
		if act := out[textKey].(map[string]any)["hidden_act"]; act != "situ" {
			t.Errorf("%s: output hidden_act %v, want situ", what, act)
		}
	}
}
