package layout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	st "github.com/k3ckpt/k3ckpt/safetensors"
)

func mustConfig(t testing.TB, b []byte) *model.Config {
	t.Helper()
	c, err := model.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A bare kimi_linear checkpoint (model.… names, no vision) places under
// every built-in layout exactly as the multimodal one does without vision:
// the same bytes on every rank, the same pieces under the bare names.
func TestBareKimiLinearEveryLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	mmJSON := testckpt.TPConfigJSON(t)
	mm := mustConfig(t, mmJSON)
	bareJSON := bareConfig(t, mmJSON)
	bare := mustConfig(t, bareJSON)
	mmSpecs, bareSpecs := specsOf(mm), specsOf(bare)
	if !strings.HasPrefix(bareSpecs[0].Name, "model.") {
		t.Fatalf("bare catalog starts with %s", bareSpecs[0].Name)
	}
	if b, m := ModelOf(bare), ModelOf(mm); b.Layers != m.Layers || b.AttnHeads != m.AttnHeads || b.LinearHeads != m.LinearHeads ||
		b.Experts != m.Experts || b.AttnResBlock != m.AttnResBlock {
		t.Fatalf("bare dims %+v, multimodal %+v", b, m)
	}
	for _, name := range Names() {
		def, err := DefaultOptions(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []Options{def, {}, {TextOnly: true, WeightShard: name == "dp16", VocabTP: name != "pp16"}} {
			o.TextOnly = true // a bare checkpoint has no vision to keep
			l, err := builtinLayout(name, ModelOf(bare), o)
			if err != nil {
				t.Fatal(err)
			}
			pb, err := l.Place(bareSpecs)
			if err != nil {
				t.Fatalf("%s %+v: bare checkpoint: %v", name, o, err)
			}
			pm, err := l.Place(mmSpecs)
			if err != nil {
				t.Fatalf("%s %+v: %v", name, o, err)
			}
			if len(pb.Dropped) != 0 {
				t.Errorf("%s %+v: bare checkpoint drops %d tensors", name, o, len(pb.Dropped))
			}
			// The model's bare catalog has BF16 experts where the multimodal
			// one has MXFP4 codes and scales: experts compare by rule and
			// holding, every other tensor piece for piece.
			type expertKey struct{ layer, expert, proj int }
			for _, r := range []int{0, pb.ranks() - 1} {
				want := map[string]piece{}
				wantExpert := map[expertKey]piece{}
				for _, pc := range pieces(t, pm, r) {
					if tn := model.K3Classifier().ParseName(pc.Name); tn.Group == model.GroupExperts {
						wantExpert[expertKey{tn.Layer, tn.Expert, int(tn.Proj)}] = pc
						continue
					}
					want[bareName(pc.Name)] = pc
				}
				got := pieces(t, pb, r)
				seen, seenExperts := 0, map[expertKey]bool{}
				for _, pc := range got {
					if tn := model.K3Classifier().ParseName(pc.Name); tn.Group == model.GroupExperts {
						k := expertKey{tn.Layer, tn.Expert, int(tn.Proj)}
						w, ok := wantExpert[k]
						if !ok || w.Rule != pc.Rule || w.Held != pc.Held || w.Axis != pc.Axis {
							t.Errorf("%s rank %d: %s = %+v, multimodal %+v", name, r, pc.Name, pc, w)
						}
						seenExperts[k] = true
						continue
					}
					w, ok := want[pc.Name]
					seen++
					if !ok || pc.Held != w.Held || pc.Axis != w.Axis || pc.Start != w.Start || pc.Stop != w.Stop || pc.Rule != w.Rule || pc.Scale != w.Scale || pc.Bytes != w.Bytes {
						t.Errorf("%s rank %d: %s = %+v, multimodal %+v", name, r, pc.Name, pc, w)
					}
				}
				if seen != len(want) || len(seenExperts) != len(wantExpert) {
					t.Errorf("%s rank %d: %d bare pieces and %d experts, multimodal %d and %d", name, r, seen, len(seenExperts), len(want), len(wantExpert))
				}
			}
		}
	}
	// The whole export plan, from headers only.
	src, reads := fakeSource(t, bareJSON, bareSpecs, shardOfName(bare))
	for _, name := range Names() {
		o, _ := DefaultOptions(name)
		o.TextOnly = true
		l, err := builtinLayout(name, ModelOf(bare), o)
		if err != nil {
			t.Fatal(err)
		}
		p, err := PlanExport(src, l, ExportOptions{})
		if err != nil {
			t.Fatalf("%s: plan of a bare checkpoint: %v", name, err)
		}
		if p.Files == 0 || len(p.Dirs) != l.ranks() {
			t.Errorf("%s: %d files in %d dirs", name, p.Files, len(p.Dirs))
		}
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("planning read tensor data %d times", n)
	}
}

// Planning reads headers only; the named checks read data, and Execute runs
// them before creating anything.
func TestPlanReadsHeadersOnly(t *testing.T) {
	t.Parallel()
	_, fp := tinyCatalogs()
	src, reads := fakeSource(t, nil, fp, layerFiles(int(tinyDims.layers)))
	l, err := builtinLayout("dp2-dcp8", tinyDims.model(), Options{TextOnly: true, VocabTP: true})
	if err != nil {
		t.Fatal(err)
	}
	// One A_log whose padding past the 16 heads is not zero.
	alog := slices.IndexFunc(src.Specs, func(s st.TensorSpec) bool { return strings.HasSuffix(s.Name, "self_attn.A_log") })
	bad := make([]byte, 4*128)
	bad[len(bad)-1] = 1
	src.data[alog] = bytes.NewReader(bad)
	p, err := PlanExport(src, l, ExportOptions{Pack: packUE8M0, Ranks: []int{0, 9}})
	if err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("PlanExport read tensor data %d times", n)
	}
	kinds := map[string]int{}
	for _, c := range p.Checks {
		kinds[c.Kind]++
	}
	kda := 0
	for l := int64(0); l < tinyDims.layers; l++ {
		if !tinyDims.isMLA(l) {
			kda++
		}
	}
	if kinds[checkZeroPadding] != kda || kinds[checkUE8M0Scale] == 0 {
		t.Errorf("checks %v, want %d zero-padding (one per KDA A_log) and some ue8m0-scale", kinds, kda)
	}
	// Validation reads the data and fails on the padding; Execute refuses
	// before creating DST.
	if err := p.Validate(context.Background()); !errors.Is(err, errPadding) || !strings.Contains(err.Error(), src.Specs[alog].Name) {
		t.Errorf("validate: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := p.Execute(context.Background(), dst, ExecOptions{}); !errors.Is(err, errPadding) {
		t.Errorf("execute: %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed validation created %s", dst)
	}
	// The plan prints and round-trips through JSON with what it decided.
	var text bytes.Buffer
	if err := p.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"layout dp2-dcp8, 16 ranks", "rank-00", "rank-09", "check ue8m0-scale:", "check zero-padding: " + itoa(kda)} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Layout != "dp2-dcp8" || len(back.Dirs) != 2 || back.Dirs[1].Dir != "rank-09" || back.Dirs[1].Files[0].Size != p.Dirs[1].files[0].lay.Size || len(back.Checks) != len(p.Checks) {
		t.Errorf("JSON plan %s", b[:min(len(b), 400)])
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Text-only layouts drop exactly the tensors of the shards that hold the
// vision tower and the projector (95 and 96 in the release), and those
// shards hold nothing else. The released config places them; every built-in
// layout's drop is checked on the tiny config whose experts split 8 ways
// (96 shards, a shallower vision tower and the projector in the same two;
// pp8-tp8 fits it), as placing the release's 497,220 tensors under each
// layout would cost a second; TestPP16Stages and TestDP16SpecFigures count
// the release's 168 dropped tensors under pp16 and dp16.
func TestTextOnlyDropsVisionShards(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "model", "testdata", "k3", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	visionOf := func(c *model.Config, specs []st.TensorSpec) (shards map[string]bool, names []string) {
		shards = map[string]bool{}
		shardOf := shardOfName(c)
		for _, s := range specs {
			if g := model.K3Classifier().ParseName(s.Name).Group; g.String() == "vision_tower" || g.String() == "mm_projector" {
				shards[shardOf(s.Name)] = true
			}
		}
		for _, s := range specs {
			if shards[shardOf(s.Name)] {
				names = append(names, s.Name)
			}
		}
		slices.Sort(names)
		return shards, names
	}
	release := mustConfig(t, raw)
	visionShards, want := visionOf(release, specsOf(release))
	if len(visionShards) != 2 || !visionShards["model-00095-of-000096.safetensors"] || !visionShards["model-00096-of-000096.safetensors"] {
		t.Errorf("vision sits in %v, want the released shards 95 and 96", visionShards)
	}
	if len(want) != 3+165 {
		t.Errorf("the vision shards hold %d tensors, want the 3 mm_projector and 165 vision_tower", len(want))
	}
	c := mustConfig(t, testckpt.TPConfigJSON(t))
	specs := specsOf(c)
	if visionShards, want = visionOf(c, specs); !maps.Equal(visionShards, map[string]bool{
		"model-00095-of-000096.safetensors": true, "model-00096-of-000096.safetensors": true}) {
		t.Fatalf("tiny: vision sits in %v, want shards 95 and 96", visionShards)
	}
	for _, name := range Names() {
		l, err := builtinLayout(name, ModelOf(c), Options{TextOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		p, err := l.Place(specs)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, i := range p.Dropped {
			got = append(got, specs[i].Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s text-only drops %d tensors, the vision shards hold %d", name, len(got), len(want))
		}
	}
}

// Written rank files keep the source files' names where a rank copies a
// file whole, and the index names every file a rank writes.
func TestNamesFromIndex(t *testing.T) {
	t.Parallel()
	bf, _ := tinyCatalogs()
	names := layerFiles(int(tinyDims.layers))
	src, _ := fakeSource(t, nil, bf, names)
	l, err := builtinLayout("pp16", tinyDims.model(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := PlanExport(src, l, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range p.Dirs {
		for _, of := range d.files {
			if of.verbatim == nil {
				// Only the stages sharing the model-level shard write files.
				if d.Stage != 0 && d.Stage != 15 {
					t.Errorf("%s writes %s instead of copying its layer shards", d.Dir, of.name)
				}
				continue
			}
			if of.name != of.verbatim.Path {
				t.Errorf("%s copies %s as %s", d.Dir, of.verbatim.Path, of.name)
			}
		}
		for tensor, f := range d.index.WeightMap {
			if !slices.ContainsFunc(d.files, func(of *outFile) bool { return of.name == f }) {
				t.Errorf("%s: index maps %s to %s, which the directory does not hold", d.Dir, tensor, f)
			}
		}
	}
}

// TestMain runs the tests; under -short, four times GOMAXPROCS of the
// parallel ones at once unless -test.parallel is given: the short export
// tests spend their time waiting on fsync of small files, not on the CPU
// (the full run's larger fixtures would only compete for memory).
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && testing.Short() {
		if err := flag.Set("test.parallel", strconv.Itoa(4*runtime.GOMAXPROCS(0))); err != nil {
			panic(err)
		}
	}
	testckpt.Main(m)
}

var _ = st.F32

// specsOf is every tensor of c, shard by shard.
func specsOf(c *model.Config) []st.TensorSpec {
	var out []st.TensorSpec
	for i := range c.NumShards() {
		out = append(out, c.ShardTensors(i)...)
	}
	return out
}

// shardOfName maps each tensor of c to the file that holds it ("" for a
// name c does not have).
func shardOfName(c *model.Config) func(string) string {
	m := map[string]string{}
	for i := range c.NumShards() {
		for _, s := range c.ShardTensors(i) {
			m[s.Name] = c.ShardName(i)
		}
	}
	return func(name string) string { return m[name] }
}
