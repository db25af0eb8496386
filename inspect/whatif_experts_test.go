package inspect

import (
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// One routed expert of the release in each form, from its shapes by hand:
// w1 and w3 are [3072, 3584], w2 [3584, 3072] (moe_intermediate_size 3072,
// routed_expert_hidden_size 3584), 11,010,048 weights each.
const (
	projWeights = 3072 * 3584
	// expertFP8: E4M3 codes plus fp32 scales of ⌈3072/128⌉ × ⌈3584/128⌉ =
	// 24 × 28 blocks, per projection.
	expertFP8  = 3 * (projWeights + 4*24*28) // 33,038,208
	expertBF16 = 3 * 2 * projWeights         // 66,060,288
	moeExperts = moeLayers * numExperts      // 82,432
)

// TestWhatIfExperts: inspect's --experts bf16|fp8|mxfp4 and --recipe bf16
// what-ifs give, before anything is converted, the routed experts' bytes
// of each form per component, per DP16 rank and per PP16 stage, exactly as
// the shapes give them.
func TestWhatIfExperts(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	release := fullFake(t)
	full, err := model.FamilyConfigJSON("", model.ScaleFull)
	if err != nil {
		t.Fatal(err)
	}
	bf16Cfg, err := testckpt.EditTextConfig(full, func(text map[string]any) error {
		delete(text, "quantization_config")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	bf16Src := fakeConfig(t, bf16Cfg)
	type baseline struct{ ranks, stages *Report }
	bases := map[*fakeCkpt]baseline{}
	bases[release] = baseline{auditFake(t, release, Options{Layout: "dp16"}), auditFake(t, release, Options{Layout: "pp16"})}
	bases[bf16Src] = baseline{ranks: auditFake(t, bf16Src, Options{Layout: "dp16"})}
	for _, c := range []struct {
		name         string
		src          *fakeCkpt
		recipe       string
		experts      convert.ExpertsMode
		before, want int64 // one expert's bytes
		stages       bool
	}{
		{"fp8", release, "", convert.ExpertsFP8, expertBytes, expertFP8, true},
		{"bf16", release, "", convert.ExpertsBF16, expertBytes, expertBF16, false},
		{"recipe bf16", release, convert.BF16, convert.ExpertsBF16, expertBytes, expertBF16, false},
		{"recipe bf16, experts kept", release, convert.BF16, convert.ExpertsKeep, expertBytes, expertBytes, false},
		{"mxfp4", bf16Src, "", convert.ExpertsMXFP4, expertBF16, expertBytes, false},
		{"fp8 from BF16", bf16Src, "", convert.ExpertsFP8, expertBF16, expertFP8, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each what-if plans the whole release: the cores share them
			base := bases[c.src]
			// Per component, and per rank under DP16 (EP16: 56 experts of each
			// MoE layer per rank).
			rep := auditFake(t, c.src, Options{Recipe: c.recipe, Experts: c.experts, Layout: "dp16"})
			if rep.Recipe == nil {
				t.Fatalf("%s: no what-if", c.name)
			}
			if got := rowBytes(base.ranks.Components, model.RoutedExperts.String()); got != int64(moeExperts)*c.before {
				t.Fatalf("%s: source experts %d bytes, want %d", c.name, got, int64(moeExperts)*c.before)
			}
			if got, want := rowBytes(rep.Recipe.Components, model.RoutedExperts.String()), int64(moeExperts)*c.want; got != want {
				t.Errorf("%s: routed experts %d bytes, want %d", c.name, got, want)
			}
			delta := c.want - c.before
			if got, want := rep.Recipe.TotalBytes-base.ranks.TotalBytes, int64(moeExperts)*delta; got != want {
				t.Errorf("%s: total changes by %d, want %d", c.name, got, want)
			}
			for i, r := range rep.Ranks {
				if got, want := r.Bytes-base.ranks.Ranks[i].Bytes, int64(moeExperts/ep)*delta; got != want {
					t.Fatalf("%s: rank %d changes by %d, want %d", c.name, i, got, want)
				}
			}
			if !c.stages {
				return
			}
			st := auditFake(t, c.src, Options{Recipe: c.recipe, Experts: c.experts, Layout: "pp16"})
			if len(st.Stages) != 16 {
				t.Fatalf("%s: %d stages", c.name, len(st.Stages))
			}
			for i, s := range st.Stages {
				moe := int64(s.Layers[1] - max(s.Layers[0], 1)) // layer 0 is dense
				if got, want := s.Bytes-base.stages.Stages[i].Bytes, moe*numExperts*delta; got != want {
					t.Fatalf("%s: stage %d (layers %v) changes by %d, want %d", c.name, i, s.Layers, got, want)
				}
			}
		})
	}
}
