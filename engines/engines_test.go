package engines

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

var update = flag.Bool("update", false, "rewrite docs/COMPATIBILITY.md and README's engine section from rules.json")

func TestMain(m *testing.M) { testckpt.Main(m) }

// planned holds planFacts' results, one per profile for the test binary
// (read-only: nothing evaluates Facts in place).
var planned sync.Map

// replica is the tiny header-only replica, and under -short the tiny one cut
// to 16 layers (every tensor kind in 19 shards; testckpt.LayersConfigJSON):
// the verdicts follow the tensor kinds, not how many layers hold them.
func replica(t *testing.T) string {
	t.Helper()
	if !testing.Short() {
		return testckpt.Replica(t, model.ScaleTiny)
	}
	cfg := testckpt.LayersConfigJSON(t, model.ScaleTiny, 16)
	return testckpt.Dir(t, "replica-tiny-16", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: cfg, HeaderOnly: true})
	})
}

// planFacts plans profile p over replica and reads the facts of
// the planned output (configs and headers, nothing written).
func planFacts(t *testing.T, p Profile) *Facts {
	t.Helper()
	if f, ok := planned.Load(p); ok {
		return f.(*Facts)
	}
	src, err := safetensors.Open(replica(t))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r, err := convert.Lookup(p.Recipe)
	if err != nil {
		t.Fatal(err)
	}
	var o convert.Options
	if o.Format, err = convert.ParseFormat(p.Format); err != nil {
		t.Fatal(err)
	}
	if err = o.Experts.UnmarshalText([]byte(p.Experts)); err != nil {
		t.Fatal(err)
	}
	plan, err := convert.NewPlan(src, nil, r, o)
	if err != nil {
		t.Fatal(err)
	}
	var files [][]safetensors.TensorInfo
	for _, f := range plan.Files {
		files = append(files, f.Layout.Tensors)
	}
	f, err := FactsOf(plan.Config, plan.HFQuantConfig, files)
	if err != nil {
		t.Fatal(err)
	}
	planned.Store(p, f)
	return f
}

func shape(f *Facts) []string {
	var out []string
	for _, p := range f.Parts {
		out = append(out, strings.Join([]string{p.Group.String(), string(p.Form), string(p.Scale), p.Declared}, " "))
	}
	slices.Sort(out)
	return append(out, "convention "+string(f.Convention))
}

// TestPredictMatchesPlan: what Predict says convert writes (the basis of
// --target and of the docs' table) is what the planner writes, for every
// profile.
func TestPredictMatchesPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	src, err := Scan(t.Context(), replica(t))
	if err != nil {
		t.Fatal(err)
	}
	if src.Convention != release || len(src.Problems) > 0 {
		t.Fatalf("the release replica: %+v", src)
	}
	for _, p := range profiles() {
		pred, err := predict(src, p)
		if errors.Is(err, errNotApplicable) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got, want := shape(pred), shape(planFacts(t, p))
		if !slices.Equal(got, want) {
			t.Errorf("%s: predicted\n%s\nplanned\n%s", p.Flags(), strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func verdict(t *testing.T, f *Facts, engine string, gpu GPU) Verdict {
	t.Helper()
	v, err := evaluate(f, engine, gpu)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ruleOf is the rule that decided group g's item in v ("" if none).
func ruleOf(v Verdict, g string) (Outcome, string) {
	for _, it := range v.Items {
		if slices.Contains(it.Groups, g) {
			return it.Outcome, it.Rule
		}
	}
	return "", ""
}

// TestVerdicts checks the verdicts re-read in the engines' code (the rules)
// over the planned outputs of convert (under -short, of the 16-layer
// replica).
func TestVerdicts(t *testing.T) {
	def := planFacts(t, Profile{"modelopt", convert.AttnMoEDenseFP8, "keep"})
	nv := planFacts(t, Profile{"modelopt", convert.ModelOptK3, "nvfp4"})
	ds := planFacts(t, Profile{"deepseek", convert.AttnMoEDenseFP8, "keep"})
	for _, c := range []struct {
		f       *Facts
		engine  string
		gpu     GPU
		group   string
		outcome Outcome
		rule    string
	}{
		// tokenspeed: KimiKDAMergedProj refuses BF16 f_a/b beside FP8 q; Blackwell only.
		{def, "tokenspeed", sM100, "kda.f_a_proj", refused, "tokenspeed.modelopt.kda-split"},
		{def, "tokenspeed", sM90, "checkpoint", refused, "tokenspeed.modelopt.capability"},
		{nv, "tokenspeed", sM100, "kda.q_proj", Resident, "tokenspeed.modelopt.kda-merged"},
		{nv, "tokenspeed", sM100, "kda.f_b_proj", dequantized, "tokenspeed.modelopt.fb"},
		// TensorRT-LLM: FP8 dequantized to BF16 at load by default, on Hopper too.
		{def, "TensorRT-LLM", sM90, "kda.q_proj", dequantized, "trtllm.fp8-dequant"},
		{def, "TensorRT-LLM", sM100, "experts", Resident, "trtllm.mxfp4-sm100"},
		{ds, "TensorRT-LLM", sM100, "kda.q_proj", refused, "trtllm.fp8-scale-inv"},
		// SGLang main serves NVIDIA's layout; NVFP4 MoE is Blackwell-only.
		{nv, "SGLang", sM100, "mla.q_b_proj", Resident, "sglang.modelopt.attention-fp8"},
		{nv, "SGLang", sM100, "experts", Resident, "sglang.modelopt.nvfp4-sm100"},
		{nv, "SGLang", sM90, "experts", refused, "sglang.modelopt.nvfp4-sm90"},
		{def, "SGLang", sM100, "latent.up_proj", wrong, "sglang.modelopt.latent-fp8"},
		// vLLM: FP8_PB_WO dispatch is an open PR.
		{nv, "vLLM", sM100, "kda.q_proj", refused, "vllm.modelopt.fp8"},
		{def, "vLLM", sM100, "kda.b_proj", wrong, "vllm.modelopt.kda-split"},
	} {
		v := verdict(t, c.f, c.engine, c.gpu)
		o, r := ruleOf(v, c.group)
		if o != c.outcome || r != c.rule {
			t.Errorf("%s %s %s: %s by %q, want %s by %q", c.engine, c.gpu, c.group, o, r, c.outcome, c.rule)
		}
	}
	// The worst item decides: the default output fails in three engines.
	for _, e := range []string{"SGLang", "vLLM", "tokenspeed"} {
		if v := verdict(t, def, e, sM100); !v.Outcome.Fails() {
			t.Errorf("default output in %s sm100: %s", e, v.Outcome)
		}
	}
	if v := verdict(t, def, "TensorRT-LLM", sM100); v.Outcome != dequantized {
		t.Errorf("default output in TensorRT-LLM sm100: %s", v.Outcome)
	}
	// An opt-in switch is reported, never applied by default.
	if v := verdict(t, def, "TensorRT-LLM", sM100); len(v.OptIn) == 0 || !strings.Contains(v.OptIn[0], "KIMI_K3_FP8_WEIGHT_READ=1") {
		t.Errorf("TensorRT-LLM sm100 opt-in: %q", v.OptIn)
	}
}

// TestMissingScale: an FP8 weight whose scale is gone is a problem of the
// checkpoint, and TensorRT-LLM's refusal. Under -short on the 16-layer replica.
func TestMissingScale(t *testing.T) {
	src, err := safetensors.Open(replica(t))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r, _ := convert.Lookup(convert.AttnMoEDenseFP8)
	plan, err := convert.NewPlan(src, nil, r, convert.Options{Format: model.ModelOpt})
	if err != nil {
		t.Fatal(err)
	}
	var files [][]safetensors.TensorInfo
	dropped := ""
	for _, f := range plan.Files {
		ts := f.Layout.Tensors
		if dropped == "" {
			if i := slices.IndexFunc(ts, func(t safetensors.TensorInfo) bool { return strings.HasSuffix(t.Name, "q_proj.weight_scale") }); i >= 0 {
				dropped = ts[i].Name
				ts = slices.Delete(slices.Clone(ts), i, i+1)
			}
		}
		files = append(files, ts)
	}
	f, err := FactsOf(plan.Config, plan.HFQuantConfig, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Problems) != 1 || !strings.Contains(f.Problems[0], strings.TrimSuffix(dropped, "_scale")) {
		t.Fatalf("problems %q, want one naming %s", f.Problems, dropped)
	}
	v := verdict(t, f, "TensorRT-LLM", sM100)
	if o, r := ruleOf(v, "kda.q_proj"); v.Outcome != refused || o != refused || r != "trtllm.fp8-scale-inv" {
		t.Errorf("TensorRT-LLM on a missing scale: %s (%s by %s)", v.Outcome, o, r)
	}
}

// TestHandEditedConfig: a quant_method no rule knows leaves every
// quantized part unknown (never a guess), and a ModelOpt config that does
// not declare an FP8 module is a problem.
func TestHandEditedConfig(t *testing.T) {
	f, err := FactsOf([]byte(`{"quantization_config": {"quant_method": "awq"}}`), nil, [][]safetensors.TensorInfo{{
		{Name: "model.layers.0.self_attn.q_proj.weight", DType: safetensors.F8_E4M3, Shape: []int64{128, 128}, End: 128 * 128},
		{Name: "model.layers.0.self_attn.q_proj.weight_scale", DType: safetensors.F32, Shape: []int64{1, 1, 1, 1}, Begin: 128 * 128, End: 128*128 + 4},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if f.Convention != other {
		t.Fatalf("convention %s", f.Convention)
	}
	for _, e := range []string{"SGLang", "vLLM", "tokenspeed"} {
		if v := verdict(t, f, e, sM100); v.Outcome != Unknown {
			t.Errorf("%s on an unknown config: %s", e, v.Outcome)
		}
	}
	g, err := FactsOf([]byte(`{"quantization_config": {"quant_method": "modelopt_mixed", "quant_algo": "MIXED_PRECISION", "quantized_layers": {}}}`), nil,
		[][]safetensors.TensorInfo{{
			{Name: "model.layers.0.self_attn.q_proj.weight", DType: safetensors.F8_E4M3, Shape: []int64{128, 128}, End: 128 * 128},
			{Name: "model.layers.0.self_attn.q_proj.weight_scale", DType: safetensors.F32, Shape: []int64{1, 1, 1, 1}, Begin: 128 * 128, End: 128*128 + 4},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Problems) != 1 || !strings.Contains(g.Problems[0], "not declared FP8_PB_WO") {
		t.Errorf("undeclared FP8 module: problems %q", g.Problems)
	}
}

// TestChoose: the targets differ between Hopper and Blackwell where the
// rules say so.
func TestChoose(t *testing.T) {
	if _, err := Choose(nil, "sglang", sM90, nil); !errors.Is(err, errNoGain) {
		t.Errorf("SGLang sm90: %v, want ErrNoGain (its FP8 paths need NVFP4 experts, Blackwell-only)", err)
	}
	c, err := Choose(nil, "sglang", sM100, nil)
	if err != nil || c.Profile != (Profile{"modelopt", convert.ModelOptK3, "nvfp4"}) {
		t.Errorf("SGLang sm100: %+v %v", c.Profile, err)
	}
	c, err = Choose(nil, "TensorRT-LLM", sM100, nil)
	if err != nil || c.Profile != (Profile{"modelopt", convert.AttnMoEDenseFP8, "keep"}) || c.Verdict.Outcome != dequantized {
		t.Errorf("TensorRT-LLM sm100: %+v %s %v", c.Profile, c.Verdict.Outcome, err)
	}
	if _, err := Choose(nil, "tokenspeed", sM90, nil); !errors.Is(err, ErrNoTarget) {
		t.Errorf("tokenspeed sm90: %v, want ErrNoTarget", err)
	}
	_, err = Choose(nil, "tokenspeed", sM100, func(p Profile) bool { return p.Recipe == convert.AttnMoEDenseFP8 })
	if !errors.Is(err, ErrNoTarget) || !strings.Contains(err.Error(), "FP8-resident merged KDA projection") {
		t.Errorf("tokenspeed sm100 with the default recipe: %v", err)
	}
	if _, err := Choose(nil, "nosuch", sM90, nil); err == nil {
		t.Error("unknown engine accepted")
	}
}

// The names rules.json may use (load checks them).
var (
	conventions = []convention{release, modelOpt, deepSeek, compressedTensors, noQuant, other}
	forms       = []form{BF16, fP8, fP8NoScale, mXFP4, nVFP4, fP4, odd}
	scales      = []scale{scale4D, scale2D, scaleInv, scaleE8}
)

// load parses and checks a rule table: every rule names a known engine,
// GPU, convention, group, form, outcome and evidence, and a source.
func load(b []byte) (*table, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var t table
	if err := dec.Decode(&t); err != nil {
		return nil, err
	}
	if t.Schema != 1 {
		return nil, fmt.Errorf("schema %d, want 1", t.Schema)
	}
	if t.Family == "" {
		return nil, fmt.Errorf("no family")
	}
	ids := map[string]bool{}
	for i := range t.Rules {
		r := &t.Rules[i]
		if err := r.check(&t); err != nil {
			return nil, fmt.Errorf("rule %d (%s): %w", i, r.ID, err)
		}
		if ids[r.ID] {
			return nil, fmt.Errorf("rule %d: duplicate id %q", i, r.ID)
		}
		ids[r.ID] = true
	}
	return &t, nil
}

func (r *rule) check(t *table) error {
	if r.ID == "" || r.Why == "" || r.Version == "" {
		return fmt.Errorf("id, version and why are required")
	}
	if !slices.ContainsFunc(t.Engines, func(e engine) bool { return e.Name == r.Engine }) {
		return fmt.Errorf("unknown engine %q", r.Engine)
	}
	if len(r.GPUs) == 0 || len(r.Conventions) == 0 {
		return fmt.Errorf("gpus and conventions are required")
	}
	for _, g := range r.GPUs {
		if !slices.Contains(gPUs, g) {
			return fmt.Errorf("unknown gpu %q", g)
		}
	}
	for _, c := range r.Conventions {
		if !slices.Contains(conventions, c) {
			return fmt.Errorf("unknown convention %q", c)
		}
	}
	var err error
	if r.groups, err = model.ParseGroupSet(strings.Join(r.Groups, ",")); err != nil {
		return err
	}
	if (len(r.Groups) == 0) != (len(r.Forms) == 0) {
		return fmt.Errorf("groups and forms go together")
	}
	for _, f := range r.Forms {
		if !slices.Contains(forms, f) {
			return fmt.Errorf("unknown form %q", f)
		}
	}
	for _, s := range r.Scales {
		if s != "" && !slices.Contains(scales, s) { // "": no scale
			return fmt.Errorf("unknown scale %q", s)
		}
	}
	for _, c := range r.Also {
		if _, err := model.ParseGroupSet(strings.Join(c.Groups, ",")); err != nil || len(c.Forms) == 0 {
			return fmt.Errorf("also: groups %v forms %v: %v", c.Groups, c.Forms, err)
		}
	}
	if _, ok := outcomeRank[r.Outcome]; !ok {
		return fmt.Errorf("unknown outcome %q", r.Outcome)
	}
	if r.Evidence != "read" && r.Evidence != "executed" {
		return fmt.Errorf("evidence %q: want read or executed", r.Evidence)
	}
	if r.Source.Repo == "" || (r.Source.Path == "" && r.Source.PR == "") {
		return fmt.Errorf("source needs a repository and a path or pull request")
	}
	return nil
}

// TestRulesChecked: load rejects tables with unknown names or no source.
func TestRulesChecked(t *testing.T) {
	if _, err := load(rulesJSON); err != nil {
		t.Fatalf("rules.json: %v", err)
	}
	for _, bad := range []struct{ from, to string }{
		{`"engine": "SGLang"`, `"engine": "SGlang2"`},
		{`"gpus": [`, `"gpus": ["sm80", `},
		{`"kda.f_a_proj"`, `"kda.nope"`},
		{`"outcome": "refused"`, `"outcome": "maybe"`},
		{`"evidence": "read"`, `"evidence": "guessed"`},
		{`"schema": 1`, `"schema": 1, "extra": 0`},
	} {
		b := bytes.Replace(rulesJSON, []byte(bad.from), []byte(bad.to), 1)
		if bytes.Equal(b, rulesJSON) {
			t.Fatalf("%s not in rules.json", bad.from)
		}
		if _, err := load(b); err == nil {
			t.Errorf("%s → %s accepted", bad.from, bad.to)
		}
	}
	var tb table
	if err := json.Unmarshal(rulesJSON, &tb); err != nil {
		t.Fatal(err)
	}
	tb.Rules[3].Source = source{Repo: "x/y"}
	b, _ := json.Marshal(tb)
	if _, err := load(b); err == nil || !strings.Contains(err.Error(), "source") {
		t.Errorf("a rule without a path or PR: %v", err)
	}
}

func checkGenerated(t *testing.T, path string, want []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Errorf("%s is stale: run go test ./engines -update", path)
	}
}

// TestCompatibilityDoc: docs/COMPATIBILITY.md is what the rules say.
func TestCompatibilityDoc(t *testing.T) {
	checkGenerated(t, "../docs/COMPATIBILITY.md", compatibility())
}

const readmeHeading = "## Which engine loads what\n"

// TestReadmeSection: README's engine section is generated from the rules.
func TestReadmeSection(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(readmeHeading))
	if i < 0 {
		t.Fatalf("README.md has no %q", readmeHeading)
	}
	start := i + len(readmeHeading)
	end := bytes.Index(b[start:], []byte("\n## "))
	if end < 0 {
		t.Fatal("README.md: no section after the engine section")
	}
	end += start + 1
	want := slices.Concat(b[:start], readmeSection(), b[end:])
	checkGenerated(t, "../README.md", want)
}

// TestExecutedRules: a rule marked "executed" is backed by a run of the
// engine's own code (testdata/device/*_results.json) that agrees with it,
// and every run result names a rule.
func TestExecutedRules(t *testing.T) {
	files, _ := filepath.Glob("testdata/device/*_results.json")
	ran := map[string]bool{}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Engine  string
			Results []struct {
				Rule, Outcome, Detail string
				Agrees                bool
			}
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, r := range res.Results {
			i := slices.IndexFunc(rules.Rules, func(x rule) bool { return x.ID == r.Rule })
			if i < 0 {
				t.Errorf("%s: result for unknown rule %s", p, r.Rule)
				continue
			}
			if !r.Agrees {
				t.Errorf("%s: %s disagrees: %s %s", p, r.Rule, r.Outcome, r.Detail)
			}
			if r.Outcome == string(rules.Rules[i].Outcome) {
				ran[r.Rule] = true
			}
			if m := rules.Rules[i].Message; r.Outcome == "refused" && m != "" && !strings.Contains(r.Detail, strings.TrimPrefix(strings.SplitN(m, "…", 2)[0], "TypeError: ")) {
				t.Errorf("%s: %s: the engine said %q, the rule quotes %q", p, r.Rule, r.Detail, m)
			}
		}
	}
	for _, r := range rules.Rules {
		if (r.Evidence == "executed") != ran[r.ID] {
			t.Errorf("rule %s: evidence %s, but a run that reproduces its outcome: %v", r.ID, r.Evidence, ran[r.ID])
		}
	}
}

// TestFusedGroupsAgreeWithRules: an engine whose rules fail a split KDA
// fusion is among the engines model's fused-group table (the --dry-run and
// inspect warning) names for it.
func TestFusedGroupsAgreeWithRules(t *testing.T) {
	for _, r := range rules.Rules {
		if len(r.Also) == 0 || !r.Outcome.Fails() {
			continue
		}
		const l = "language_model.model.layers.1.self_attn."
		found := false
		for _, sp := range model.FindSplits([]string{l + "q_proj", l + "k_proj", l + "v_proj", l + "g_proj"}, []string{l + "f_a_proj", l + "b_proj"}) {
			if slices.Contains(sp.Group.Engines, r.Engine) {
				found = true
			}
		}
		if !found {
			t.Errorf("rule %s: %s fails a split KDA fusion, but model's fused groups do not name it", r.ID, r.Engine)
		}
	}
}

// TestRulesHoldForTheirFamily: rules.json was read for Kimi-K3's engine
// code, so a DeepSeek-V3 checkpoint (model_type deepseek_v3) gets none of
// its verdicts, even where the group names agree (MLA); the same tensors
// under a config of no known family are read as K3's and get them.
func TestRulesHoldForTheirFamily(t *testing.T) {
	files := [][]safetensors.TensorInfo{{
		{Name: "model.layers.0.self_attn.q_a_proj.weight", DType: safetensors.F8_E4M3, Shape: []int64{128, 128}, End: 128 * 128},
		{Name: "model.layers.0.self_attn.q_a_proj.weight_scale", DType: safetensors.F32, Shape: []int64{1, 1, 1, 1}, Begin: 128 * 128, End: 128*128 + 4},
	}}
	q := `"quantization_config": {"quant_method": "modelopt_mixed", "quant_algo": "MIXED_PRECISION", "quantized_layers": {"model.layers.0.self_attn.q_a_proj": {"quant_algo": "FP8_PB_WO"}}}`
	for _, c := range []struct {
		config string
		ruled  bool
	}{
		{`{"model_type": "deepseek_v3", ` + q + `}`, false},
		{`{` + q + `}`, true},
	} {
		f, err := FactsOf([]byte(c.config), nil, files)
		if err != nil {
			t.Fatal(err)
		}
		ruled := false
		for _, e := range []string{"SGLang", "vLLM", "TensorRT-LLM", "tokenspeed"} {
			for _, gpu := range gPUs {
				for _, it := range verdict(t, f, e, gpu).Items {
					ruled = ruled || it.Rule != ""
				}
			}
		}
		if ruled != c.ruled {
			t.Errorf("%s: a rule applies: %v, want %v", c.config, ruled, c.ruled)
		}
	}
}
