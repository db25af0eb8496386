package engines

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
)

// GPU is a CUDA compute capability class an engine's code tests for.
type GPU string

// The GPUs K3 is served on.
const (
	sM90  GPU = "sm90"  // Hopper (H100, H200)
	sM100 GPU = "sm100" // Blackwell (B200, B300, GB200, GB300)
)

// gPUs lists the capability classes every verdict is given for.
var gPUs = []GPU{sM90, sM100}

// Outcome is what an engine does with a tensor group (or a checkpoint).
type Outcome string

// Outcomes, from best to worst.
const (
	Resident    Outcome = "resident"    // loaded and kept in its stored format (FP8, NVFP4, MXFP4, BF16)
	dequantized Outcome = "dequantized" // loaded, but turned into BF16 at load (saves disk, not GPU memory)
	Unknown     Outcome = "unknown"     // no rule covers it (the code path was not found or not read)
	wrong       Outcome = "wrong"       // loads without an error, but the weights are read wrongly
	refused     Outcome = "refused"     // the engine stops with an error
)

var outcomeRank = map[Outcome]int{Resident: 0, dequantized: 1, Unknown: 2, wrong: 3, refused: 4}

// worse reports whether a is worse than b.
func worse(a, b Outcome) bool { return outcomeRank[a] > outcomeRank[b] }

// Fails reports whether the outcome means the checkpoint is not served as it is.
func (o Outcome) Fails() bool { return o == wrong || o == refused }

// source is where a rule was read: a file and function at a commit, or a PR.
type source struct {
	Repo     string `json:"repo"`
	Commit   string `json:"commit,omitempty"`
	Path     string `json:"path,omitempty"`
	Function string `json:"function,omitempty"`
	// PR names a pull request (#N) when the rule rests on one.
	PR string `json:"pr,omitempty"`
}

// cite cites the source in one line.
func (s source) cite() string {
	c := s.Repo + s.PR
	if s.Path != "" {
		c += " " + s.Path
	}
	if s.Commit != "" {
		c += " @" + s.Commit
	}
	if s.Function != "" {
		c += " " + s.Function
	}
	return c
}

// cond names tensor groups and the forms they must be stored in.
type cond struct {
	Groups []string `json:"groups"`
	Forms  []form   `json:"forms"`
}

// rule is one verdict of one engine: for checkpoints of the conventions on
// the GPUs, the groups stored in the forms (and scale layouts, and declared
// algorithms) have Outcome. A rule without groups is about the whole
// checkpoint (a capability check).
type rule struct {
	ID          string       `json:"id"`
	Engine      string       `json:"engine"`
	Version     string       `json:"version"`
	GPUs        []GPU        `json:"gpus"`
	Conventions []convention `json:"conventions"`
	Groups      []string     `json:"groups,omitempty"`
	Forms       []form       `json:"forms,omitempty"`
	Scales      []scale      `json:"scales,omitempty"` // narrows FP8 groups to scale layouts
	// Declared narrows to what the config declares for the group ("": nothing).
	Declared []string `json:"declared,omitempty"`
	Also     []cond   `json:"also,omitempty"` // conditions on other groups (a fused layer's other members)
	// Env is an opt-in switch the rule needs (NAME=value); rules without it
	// describe the engine's defaults, which check evaluates.
	Env      string  `json:"env,omitempty"`
	Outcome  Outcome `json:"outcome"`
	Message  string  `json:"message,omitempty"`
	Why      string  `json:"why"`
	Source   source  `json:"source"`
	Evidence string  `json:"evidence"`

	groups model.GroupSet
}

// engine is an engine the rules speak about.
type engine struct {
	Name string `json:"name"`
	Repo string `json:"repo"`
	Read string `json:"read"` // which versions the rules were read at
}

// table is rules.json.
type table struct {
	Schema int `json:"schema"`
	// Family is the model family the rules were read for and hold for.
	Family  string   `json:"family"`
	Engines []engine `json:"engines"`
	Rules   []rule   `json:"rules"`
}

//go:embed rules.json
var rulesJSON []byte

// rules is rules.json, checked by the tests (load).
var rules = func() *table {
	var t table
	if err := json.Unmarshal(rulesJSON, &t); err != nil {
		panic("engines: rules.json: " + err.Error())
	}
	for i := range t.Rules {
		r := &t.Rules[i]
		var err error
		if r.groups, err = model.ParseGroupSet(strings.Join(r.Groups, ",")); err != nil {
			panic("engines: rules.json: rule " + r.ID + ": " + err.Error())
		}
	}
	return &t
}()

// EngineNames lists the engines, in the table's order.
func EngineNames() []string {
	out := make([]string, len(rules.Engines))
	for i, e := range rules.Engines {
		out[i] = e.Name
	}
	return out
}

// lookupEngine finds an engine by name, ignoring case, '-' and '_'
// (trtllm, TensorRT-LLM and tensorrt_llm are one engine; so is trt).
func lookupEngine(name string) (string, error) {
	norm := func(s string) string { return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s)) }
	n := norm(name)
	for _, e := range rules.Engines {
		if k := norm(e.Name); k == n || (n == "trt" || n == "trtllm") && k == "tensorrtllm" {
			return e.Name, nil
		}
	}
	return "", fmt.Errorf("engine %q is not one of %s", name, strings.Join(EngineNames(), ", "))
}

// ParseGPU reads sm90 or sm100 (also hopper, blackwell).
func ParseGPU(s string) (GPU, error) {
	switch strings.ToLower(s) {
	case "sm90", "hopper", "h100", "h200":
		return sM90, nil
	case "sm100", "blackwell", "b200", "b300":
		return sM100, nil
	}
	return "", fmt.Errorf("GPU %q: want sm90 (Hopper) or sm100 (Blackwell)", s)
}

// item is what one engine makes of some parts of a checkpoint, and which
// rule says so ("": BF16 parts load as BF16, others are Unknown).
type item struct {
	Groups   []string `json:"groups"`
	Form     form     `json:"form"`
	Outcome  Outcome  `json:"outcome"`
	Why      string   `json:"why"`
	Message  string   `json:"message,omitempty"`
	Rule     string   `json:"rule,omitempty"`
	Source   string   `json:"source,omitempty"`
	Evidence string   `json:"evidence,omitempty"` // how the rule was established: "read" or "executed"
	Modules  int      `json:"modules"`
	Example  string   `json:"example"` // one module's name
}

// Verdict is what an engine on a GPU makes of a checkpoint: its worst
// item's outcome, and the items.
type Verdict struct {
	Engine  string   `json:"engine"`
	GPU     GPU      `json:"gpu"`
	Outcome Outcome  `json:"outcome"`
	Items   []item   `json:"items"`
	OptIn   []string `json:"opt_in,omitempty"` // rules that would apply with an engine switch set

	parts []partOutcome // per part, for costs
}

type partOutcome struct {
	group   model.Group
	form    form
	outcome Outcome
	bytes   int64
}

// Summary is the verdict in one line: the outcome and the first reason.
func (v Verdict) Summary() string {
	for _, it := range v.Items {
		if it.Outcome == v.Outcome && v.Outcome != Resident {
			msg := it.Why
			if it.Message != "" {
				msg += `: "` + it.Message + `"`
			}
			return fmt.Sprintf("%s: %s (%s)", outcomeWords[v.Outcome], msg, compactGroups(it.Groups))
		}
	}
	return outcomeWords[v.Outcome]
}

// compactGroups joins group names, naming a family ("kda") for all of its
// linear groups when every one is listed.
func compactGroups(names []string) string {
	var out []string
	done := map[string]bool{}
	for _, n := range names {
		if _, err := model.ParseGroup(n); err != nil {
			out = append(out, n)
			continue
		}
		fam, _, _ := strings.Cut(n, ".")
		if done[fam] {
			continue
		}
		all := fam != n
		members, _ := model.ParseGroupSet(fam) // a family name stands for its groups
		for h := range model.Group(model.NumAllGroups()) {
			all = all && !(members.Has(h) && linear(h) && !slices.Contains(names, h.String()))
		}
		if all {
			done[fam], n = true, fam
		}
		out = append(out, n)
	}
	return strings.Join(out, ",")
}

// outcomeWords is how reports say an outcome.
var outcomeWords = map[Outcome]string{
	Resident:    "loads, quantized weights kept resident",
	dequantized: "loads, some FP8 weights dequantized to BF16 at load",
	wrong:       "loads WRONG (silently)",
	refused:     "refused",
	Unknown:     "unknown (code path not read)",
}

// evaluate says what an engine on a GPU makes of a checkpoint under its
// defaults: every part gets the first rule that matches it; a rule about
// the whole checkpoint (a capability check) adds an item of its own.
func evaluate(f *Facts, engine string, gpu GPU) (Verdict, error) {
	name, err := lookupEngine(engine)
	if err != nil {
		return Verdict{}, err
	}
	v := Verdict{Engine: name, GPU: gpu, Outcome: Resident}
	add := func(it item) {
		if worse(it.Outcome, v.Outcome) {
			v.Outcome = it.Outcome
		}
		for i := range v.Items {
			o := &v.Items[i]
			if o.Rule == it.Rule && o.Form == it.Form && o.Outcome == it.Outcome && o.Why == it.Why {
				o.Groups = append(o.Groups, it.Groups...)
				o.Modules += it.Modules
				return
			}
		}
		v.Items = append(v.Items, it)
	}
	for i := range rules.Rules {
		r := &rules.Rules[i]
		if r.Engine != name || len(r.Groups) > 0 || !r.holds(f, gpu) {
			continue
		}
		if r.Env != "" {
			v.OptIn = append(v.OptIn, fmt.Sprintf("with %s: %s (%s)", r.Env, r.Outcome, r.Why))
			continue
		}
		it := r.item()
		it.Groups = []string{"checkpoint"}
		add(it)
	}
	for _, p := range f.Parts {
		it := item{Outcome: Unknown, Why: fmt.Sprintf("no rule for %s %s under %s: this path of %s was not read", p.Form, p.Group, f.Convention, name)}
		if p.Form == BF16 {
			it = item{Outcome: Resident, Why: "BF16 weights load as BF16"}
		}
		for i := range rules.Rules {
			r := &rules.Rules[i]
			if r.Engine != name || len(r.Groups) == 0 || !r.matches(f, p, gpu) {
				continue
			}
			if r.Env != "" {
				note := fmt.Sprintf("with %s: %s %s (%s)", r.Env, p.Group, r.Outcome, r.Why)
				if !slices.Contains(v.OptIn, note) {
					v.OptIn = append(v.OptIn, note)
				}
				continue
			}
			it = r.item()
			break
		}
		it.Groups, it.Form, it.Modules, it.Example = []string{p.Group.String()}, p.Form, p.Modules, p.Example
		v.parts = append(v.parts, partOutcome{p.Group, p.Form, it.Outcome, p.Bytes})
		add(it)
	}
	return v, nil
}

// holds reports whether a rule's family, GPU, convention and conditions
// apply (a config of no family known is read as K3's, as its names are).
func (r *rule) holds(f *Facts, gpu GPU) bool {
	if f.family != "" && f.family != rules.Family || !slices.Contains(r.GPUs, gpu) || !slices.Contains(r.Conventions, f.Convention) {
		return false
	}
	for _, c := range r.Also {
		gs, _ := model.ParseGroupSet(strings.Join(c.Groups, ","))
		if !f.has(gs, c.Forms) {
			return false
		}
	}
	return true
}

// matches reports whether the rule is about part p.
func (r *rule) matches(f *Facts, p part, gpu GPU) bool {
	return r.groups.Has(p.Group) && slices.Contains(r.Forms, p.Form) &&
		(len(r.Scales) == 0 || slices.Contains(r.Scales, p.Scale)) &&
		(len(r.Declared) == 0 || slices.Contains(r.Declared, p.Declared)) && r.holds(f, gpu)
}

func (r *rule) item() item {
	return item{Outcome: r.Outcome, Why: r.Why, Message: r.Message, Rule: r.ID, Source: r.Source.cite(), Evidence: r.Evidence}
}

// gpusOf lists gpu, or every GPU when "".
func gpusOf(gpu GPU) []GPU {
	if gpu == "" {
		return gPUs
	}
	return []GPU{gpu}
}

// EvaluateAll evaluates every engine on every GPU (or the engine and gpu given).
func EvaluateAll(f *Facts, engine string, gpu GPU) ([]Verdict, error) {
	names := EngineNames()
	if engine != "" {
		n, err := lookupEngine(engine)
		if err != nil {
			return nil, err
		}
		names = []string{n}
	}
	var out []Verdict
	for _, n := range names {
		for _, g := range gpusOf(gpu) {
			v, err := evaluate(f, n, g)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
	}
	return out, nil
}
