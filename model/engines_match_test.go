package model

import (
	"path"
	"testing"
)

// MatchModule's literal fast path gives what the general matcher gives, for
// every spelling of every exporter pattern against every module of K3
// (one expert per layer keeps it quick), and for hand-picked edge patterns.
// Under -short only the modules outside the layers and those of the first
// four layers (a KDA and an MLA one, the dense layer and MoE ones) are
// matched; the full run matches all 93 layers.
func TestMatchModuleFastPathIsPathMatch(t *testing.T) {
	t.Parallel()
	c := mustK3(t)
	var mods []string // each distinct module spelling once (a weight and its scale share one)
	seen := map[string]bool{}
	for _, specs := range k3Shards() {
		for _, ts := range specs {
			tn := k3Classifier.ParseName(ts.Name)
			if tn.Expert > 0 || testing.Short() && tn.Layer >= 4 {
				continue
			}
			for _, sp := range k3Classifier.ModuleSpellings(tn.Module) {
				if !seen[sp] {
					seen[sp] = true
					mods = append(mods, sp)
				}
			}
		}
	}
	pats := []string{"*", "**", "", "x", "*.weight", "language_model.*", "*?*", "[a]*", "*experts.0*"}
	for _, p := range c.ModelOptExcludes() {
		pats = append(pats, k3Classifier.ModuleSpellings(p)...)
	}
	for _, p := range pats {
		for _, m := range mods {
			want, err := path.Match(p, m)
			want = want && err == nil
			if got := ModuleMatcher(p)(m); got != want {
				t.Fatalf("ModuleMatcher(%q)(%q) = %v, path.Match says %v", p, m, got, want)
			}
		}
	}
}
