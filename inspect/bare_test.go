package inspect

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// The recipe what-if of a bare kimi_linear checkpoint (the text_config as the
// whole config: no language_model. prefix, no vision) is the multimodal
// checkpoint's less its vision tensors, which every recipe keeps as they
// are: the same rows for every text component, before and after, and totals
// smaller by exactly the vision row. The relation holds tensor by tensor,
// so the tiny replica (every kind of tensor on the released schedule) checks
// it for every recipe and convention; the full-size one checks it once
// more where the multimodal what-if is the released 1403.79 GiB.
func TestBareRecipeWhatIf(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	type run struct {
		sc      model.Scale
		recipes []string
		formats []model.Format
	}
	for _, run := range []run{
		{model.ScaleTiny, convert.RecipeNames(), []model.Format{model.ModelOpt, model.CompressedTensors}},
		{model.ScaleFull, []string{defaultRecipe}, []model.Format{model.ModelOpt}},
	} {
		sc := run.sc
		mm := fakeOf(t, sc)
		bare := fakeConfig(t, bareConfigJSON(t, sc))
		for _, recipe := range run.recipes {
			for _, f := range run.formats {
				what := fmt.Sprintf("%s %s/%v", sc, recipe, f)
				opts := Options{Recipe: recipe, Format: f}
				a, b := auditFake(t, mm, opts), auditFake(t, bare, opts)
				var vision tally
				for _, r := range a.Components {
					if r.Key == "vision" {
						vision = r.tally
					}
				}
				if vision.Tensors == 0 {
					t.Fatalf("%s: the multimodal checkpoint has no vision row", what)
				}
				if a.TensorCount-b.TensorCount != vision.Tensors || a.TotalBytes-b.TotalBytes != vision.Bytes {
					t.Errorf("%s: bare checkpoint %d tensors %d bytes, multimodal %d/%d, vision %d/%d", what, b.TensorCount, b.TotalBytes, a.TensorCount, a.TotalBytes, vision.Tensors, vision.Bytes)
				}
				var av tally
				var text []row
				for _, r := range a.Recipe.Components {
					if r.Key == "vision" {
						av = r.tally
					} else {
						text = append(text, r)
					}
				}
				if av != vision {
					t.Errorf("%s: the recipe changes the vision tensors: %+v before, %+v after", what, vision, av)
				}
				if !reflect.DeepEqual(b.Recipe.Components, text) {
					t.Errorf("%s: bare what-if components %+v, want the multimodal's without vision %+v", what, b.Recipe.Components, text)
				}
				if a.Recipe.TensorCount-b.Recipe.TensorCount != vision.Tensors || a.Recipe.TotalBytes-b.Recipe.TotalBytes != vision.Bytes {
					t.Errorf("%s: what-if after: bare %d/%d, multimodal %d/%d, vision %d/%d", what, b.Recipe.TensorCount, b.Recipe.TotalBytes, a.Recipe.TensorCount, a.Recipe.TotalBytes, vision.Tensors, vision.Bytes)
				}
				if sc == model.ScaleFull && recipe == defaultRecipe && f == model.ModelOpt {
					if got := gib2(a.Recipe.TotalBytes); got != "1403.79" {
						t.Errorf("multimodal what-if %s GiB, want 1403.79", got)
					}
				}
			}
		}
	}
}

// bareConfigJSON is the config.json of a bare kimi_linear checkpoint (no
// language_model. prefix, no vision) at a built-in scale: the scale's
// text_config as the whole config, its quantization_config then at the top
// level.
func bareConfigJSON(tb testing.TB, scale model.Scale) []byte {
	tb.Helper()
	b, err := model.FamilyConfigJSON("", scale)
	if err != nil {
		tb.Fatal(err)
	}
	return testckpt.BareConfig(tb, b)
}
