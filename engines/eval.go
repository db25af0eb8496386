package engines

import (
	"fmt"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
)

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
		var hit *rule
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
			hit = r
			break
		}
		var it item
		switch {
		case hit != nil:
			it = hit.item()
		case p.Form == BF16:
			it = item{Outcome: Resident, Why: "BF16 weights load as BF16"}
		default:
			it = item{Outcome: Unknown, Why: fmt.Sprintf("no rule for %s %s under %s: this path of %s was not read", p.Form, p.Group, f.Convention, name)}
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
