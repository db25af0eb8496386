package layout_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/k3ckpt/k3ckpt/inspect"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// On the full-size header-only replica (1453.66 GiB of holes), the plan's
// per-rank and per-stage totals and stage files equal inspect's, for every
// built-in layout with the seed scripts' options.
func TestFullSizePlanMatchesInspect(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end on the full-size header-only replica; run without -short")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "full")
	if err := model.Synth(dir, model.SynthOptions{Scale: model.ScaleFull, HeaderOnly: true}); err != nil {
		t.Fatal(err)
	}
	src, err := layout.OpenSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	m, err := src.Model()
	if err != nil {
		t.Fatal(err)
	}
	if k := layout.ModelOf(nil); m.Layers != k.Layers || m.AttnHeads != k.AttnHeads || m.LinearHeads != k.LinearHeads ||
		m.Experts != k.Experts || m.AttnResBlock != k.AttnResBlock {
		t.Errorf("model from config.json %+v, want K3 %+v", m, layout.ModelOf(nil))
	}
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	idx := ck.Index()
	if idx == nil {
		t.Fatalf("%s: no index", dir)
	}
	for _, name := range layout.Names() {
		o, err := layout.DefaultOptions(name)
		if err != nil {
			t.Fatal(err)
		}
		l, err := layout.Resolve(name, m, o)
		if err != nil {
			t.Fatal(err)
		}
		p, err := l.Place(src.Specs)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rep, err := inspect.Inspect(dir, inspect.Options{Layout: name})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Layout.Ranks) != len(p.RankBytes) {
			t.Fatalf("%s: inspect has %d ranks, plan %d", name, len(rep.Layout.Ranks), len(p.RankBytes))
		}
		for r, row := range rep.Layout.Ranks {
			if row.Bytes != p.RankBytes[r] || row.Tensors != int64(p.RankPieces[r]) {
				t.Errorf("%s rank %d: inspect %d B / %d tensors, plan %d B / %d", name, r, row.Bytes, row.Tensors, p.RankBytes[r], p.RankPieces[r])
			}
		}
		for _, sr := range rep.Layout.Stages {
			a, b := l.StageLayers(sr.Stage)
			var bytes int64
			for r := sr.Stage * l.RanksPerStage; r < (sr.Stage+1)*l.RanksPerStage; r++ {
				bytes += p.RankBytes[r]
			}
			files, err := layout.PlacementFiles(p, sr.Stage*l.RanksPerStage, idx.WeightMap)
			if err != nil {
				t.Fatal(err)
			}
			if sr.Layers != [2]int{a, b} || sr.Bytes != bytes || fmt.Sprint(sr.Files) != fmt.Sprint(files) {
				t.Errorf("%s stage %d: inspect %v %d B %v, plan [%d %d] %d B %v", name, sr.Stage, sr.Layers, sr.Bytes, sr.Files, a, b, bytes, files)
			}
		}
	}
}
