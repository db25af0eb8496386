package engines

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// compatNotes is the hand-written part of docs/COMPATIBILITY.md: what each
// --format writes and where those rules come from (not engine verdicts).
//
//go:embed compat_notes.md
var compatNotes []byte

var outcomeCell = map[Outcome]string{
	Resident: "resident", dequantized: "BF16 at load", Unknown: "not read", wrong: "**loads wrong**", refused: "**refused**",
}

// ruleNo numbers the rules as the rule table lists them (R1…).
func ruleNo(id string) string {
	for i, r := range rules.Rules {
		if r.ID == id {
			return fmt.Sprintf("R%d", i+1)
		}
	}
	return ""
}

// cell is a verdict in a table cell: the outcome and the rules that set it.
func cell(v Verdict) string {
	var ids []string
	for _, it := range v.Items {
		if n := ruleNo(it.Rule); it.Outcome == v.Outcome && n != "" && !slices.Contains(ids, n) {
			ids = append(ids, n)
		}
	}
	s := outcomeCell[v.Outcome]
	if len(ids) > 0 {
		s += " " + strings.Join(ids, ",")
	}
	return s
}

// compatibility renders docs/COMPATIBILITY.md from the rules.
func compatibility() []byte {
	var b bytes.Buffer
	b.WriteString(`# What the K3 engines load from a checkpoint

Generated from [engines/rules.json](../engines/rules.json) by ` + "`go test ./engines -update`" + `;
do not edit by hand. ` + "`k3ckpt check PATH|URL`" + ` evaluates the same rules over any
checkpoint's configs and headers; ` + "`k3ckpt convert --target ENGINE[/GPU]`" + ` picks the
conversion the engine keeps most of resident.

Outcomes: **resident** = loaded and kept in its stored format (FP8, NVFP4, MXFP4);
**BF16 at load** = loaded, but FP8 weights are dequantized to BF16 (saves disk, not GPU
memory); **loads wrong** = loads without an error, some weights read wrongly (silent
garbage); **refused** = the engine stops with an error; *not read* = the code path was
not found or not read: unknown. BF16 tensors no rule names load as BF16. Evidence:
*read* = from the engine's source at the commit named; *executed* = its functions were
run over k3ckpt outputs (engines/testdata/).

Engines, as read:
`)
	for _, e := range rules.Engines {
		fmt.Fprintf(&b, "- %s (%s): %s\n", e.Name, e.Repo, e.Read)
	}
	b.WriteString("\n## Conversions × engines × GPUs\n\nWhat each `convert` output becomes (predicted from the rules for the release as source; the numbers are the rules below that decide the cell; an output equal to one above is not repeated).\n\n")
	b.WriteString("| output |")
	for _, e := range rules.Engines {
		for _, g := range gPUs {
			fmt.Fprintf(&b, " %s %s |", e.Name, g)
		}
	}
	b.WriteString("\n| --- |" + strings.Repeat(" --- |", len(rules.Engines)*len(gPUs)) + "\n")
	row := func(label string, f *Facts) {
		fmt.Fprintf(&b, "| %s |", label)
		for _, e := range rules.Engines {
			for _, g := range gPUs {
				v, _ := evaluate(f, e.Name, g)
				fmt.Fprintf(&b, " %s |", cell(v))
			}
		}
		b.WriteString("\n")
	}
	row("the release, unconverted", releaseFacts())
	seen := map[string]bool{factsKey(releaseFacts()): true}
	for _, p := range profiles() {
		f, err := predict(releaseFacts(), p)
		if err != nil || seen[factsKey(f)] { // not applicable to the release, or the same output as a row above
			continue
		}
		seen[factsKey(f)] = true
		row("`"+p.Flags()+"`", f)
	}
	b.WriteString("\n## Rules\n\nFirst match wins, in this order, per tensor group; a rule without groups is about the whole checkpoint. Rules with a switch (`env`) describe an opt-in, not the default `check` evaluates.\n\n")
	b.WriteString("| # | engine | GPU | convention | groups (form) | outcome | engine's message | why | source | evidence |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for i, r := range rules.Rules {
		groups := "whole checkpoint"
		if len(r.Groups) > 0 {
			groups = strings.Join(r.Groups, ", ") + " (" + joinForms(r.Forms) + ")"
			if len(r.Scales) > 0 {
				groups += ", scale " + joinScales(r.Scales)
			}
			if len(r.Declared) > 0 {
				groups += ", declared " + strings.Join(quoteAll(r.Declared), "/")
			}
		}
		for _, c := range r.Also {
			groups += "; with " + strings.Join(c.Groups, ", ") + " " + joinForms(c.Forms)
		}
		outcome := outcomeCell[r.Outcome]
		if r.Env != "" {
			outcome += " with `" + r.Env + "`"
		}
		msg := ""
		if r.Message != "" {
			msg = "`" + strings.ReplaceAll(r.Message, "|", `\|`) + "`"
		} else if r.Outcome == refused {
			msg = "(not quoted)"
		}
		gpus := make([]string, len(r.GPUs))
		for j, g := range r.GPUs {
			gpus[j] = string(g)
		}
		convs := make([]string, len(r.Conventions))
		for j, c := range r.Conventions {
			convs[j] = string(c)
		}
		fmt.Fprintf(&b, "| R%d | %s %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", i+1, r.Engine, r.Version, strings.Join(gpus, ", "),
			strings.Join(convs, ", "), groups, outcome, msg, strings.ReplaceAll(r.Why, "|", `\|`), r.Source.cite(), r.Evidence)
	}
	b.WriteString("\n")
	b.Write(compatNotes)
	return b.Bytes()
}

// factsKey identifies what a checkpoint holds, for rows that would repeat.
func factsKey(f *Facts) string {
	k := string(f.Convention)
	for _, p := range f.Parts {
		k += fmt.Sprintf("|%s %s %s %s", p.Group, p.Form, p.Scale, p.Declared)
	}
	return k
}

func joinForms(fs []form) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, "/")
}

func joinScales(ss []scale) string {
	s := make([]string, len(ss))
	for i, x := range ss {
		s[i] = string(x)
		if x == "" {
			s[i] = "none"
		}
	}
	return strings.Join(s, "/")
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		if s == "" {
			out[i] = "nothing"
		} else {
			out[i] = s
		}
	}
	return out
}

// readmeSection renders the body of README's "Which engine loads what":
// per engine and GPU, what convert --target picks and what the default
// convert output becomes.
func readmeSection() []byte {
	var b bytes.Buffer
	b.WriteString(`
` + "`k3ckpt check PATH|URL [--engine E] [--gpu sm90|sm100]`" + ` says what each engine on each GPU
makes of any checkpoint, from its headers; ` + "`k3ckpt convert --target E/GPU SRC DST`" + ` writes
what that engine keeps most of resident. Generated from the rules in
[docs/COMPATIBILITY.md](docs/COMPATIBILITY.md) (sources, commits, functions):

| engine | GPU | ` + "`convert --target`" + ` picks | default ` + "`convert`" + ` output |
| --- | --- | --- | --- |
`)
	def, _ := predict(releaseFacts(), profiles()[0])
	for _, e := range rules.Engines {
		for _, g := range gPUs {
			pick := ""
			c, err := Choose(nil, e.Name, g, nil)
			switch {
			case err == nil:
				pick = "`" + c.Profile.Flags() + "`"
			case errors.Is(err, errNoGain):
				pick = "nothing: serve the release unconverted"
			default:
				pick = "none known to load"
			}
			v, _ := evaluate(def, e.Name, g)
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", e.Name, g, pick, cell(v))
		}
	}
	b.WriteString("\n")
	return b.Bytes()
}
