package layout

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// scheduleConfig is the tiny (TP-splittable) config with a layer schedule unlike K3's: 100
// layers (more than K3's 93), MLA at layers 2, 50, 97 and 100 (1-based).
func scheduleConfig(t testing.TB) ([]byte, []int) {
	t.Helper()
	obj := must(decodeJSONObject(testckpt.TPConfigJSON(t)))(t) // pp8-tp8 splits its experts
	text := obj["text_config"].(map[string]any)
	const layers = 100
	full := []int{2, 50, 97, 100}
	var kda []int
	for l := 1; l <= layers; l++ {
		if !slices.Contains(full, l) {
			kda = append(kda, l)
		}
	}
	text["num_hidden_layers"] = json.Number(fmt.Sprint(layers))
	lin := text["linear_attn_config"].(map[string]any)
	lin["full_attn_layers"], lin["kda_layers"] = full, kda
	return must(json.Marshal(obj))(t), full
}

// o_proj and g_proj are told apart by the checkpoint's own schedule, not
// K3's: with MLA at other positions and layers past K3's 93, every built-in
// layout places them (none is left unmatched), and a layout that treats the
// MLA output projections apart from KDA's puts each where the source's
// config says it belongs, both through PlanExport (the source's config) and
// through Place on a layout built for the config (inspect --layout).
func TestOwnLayerSchedule(t *testing.T) {
	t.Parallel()
	cfgJSON, full := scheduleConfig(t)
	dir := filepath.Join(t.TempDir(), "src")
	check(t, model.Synth(dir, model.SynthOptions{Config: cfgJSON, HeaderOnly: true, Seed: 1}))
	src := must(OpenSource(dir))(t)
	defer src.Close()
	m := must(src.Model())(t)
	for _, name := range Names() {
		l := must(builtinLayout(name, m, must(DefaultOptions(name))(t)))(t)
		if _, err := PlanExport(src, l, ExportOptions{Ranks: []int{0}}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// dp16 with the MLA gate and output projections replicated instead of
	// in the weight-shard split.
	l := must(builtinLayout("dp16", m, must(DefaultOptions("dp16"))(t)))(t)
	for i := range l.Rules {
		if l.Rules[i].Name == "weight-shard" {
			l.Rules[i].Groups = slices.DeleteFunc(l.Rules[i].Groups, func(g string) bool { return g == "mla.o_proj" || g == "mla.g_proj" })
		}
	}
	l.Rules = append(l.Rules, rule{Name: "mla-out", Groups: []string{"mla.o_proj", "mla.g_proj"}, Action: replicate})
	js := must(l.jsonText())(t)
	fromFile := must(parseLayout(js))(t) // a user's layout file: no model attached
	want := func(layer int) string {     // 0-based layer
		if slices.Contains(full, layer+1) {
			return "mla-out"
		}
		return "weight-shard"
	}
	p := must(PlanExport(src, fromFile, ExportOptions{Ranks: []int{0}}))(t)
	got := map[string]string{}
	for _, e := range p.Dirs[0].man.Tensors {
		got[e.Name] = e.Rule
	}
	pl := must(l.Place(src.Specs))(t) // built for the config: its schedule
	pcs := must(pl.Pieces(0))(t)
	placed := map[string]string{}
	for _, pc := range pcs {
		placed[pc.Name] = pc.Rule
	}
	for _, layer := range []int{1, 3, 49, 92, 95, 96, 98, 99} {
		for _, proj := range []string{"o_proj", "g_proj"} {
			name := fmt.Sprintf("language_model.model.layers.%d.self_attn.%s.weight", layer, proj)
			if got[name] != want(layer) {
				t.Errorf("PlanExport: %s placed by rule %q, want %q", name, got[name], want(layer))
			}
			if placed[name] != want(layer) {
				t.Errorf("Place: %s placed by rule %q, want %q", name, placed[name], want(layer))
			}
		}
	}
}
