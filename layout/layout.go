// Package layout describes how a checkpoint's tensors are spread over pipeline
// stages and GPU ranks, and writes per-stage checkpoints and per-rank exports.
//
// A layout is data: a list of rules, each mapping tensors (by the model's
// tensor groups, or by name patterns) to an action (replicate, split along
// an axis over a group of ranks, expert parallel, drop) and, for pipeline
// layouts, a stage placement. Every tensor of a checkpoint must match exactly
// one rule; block-FP8 scale tensors follow their weight. The built-in layouts
// (pp16, dp16, dp2-dcp8, pp8-tp8) are defined once, in builtin.go, by group,
// so they hold for both name prefixes; users can pass their own as JSON.
//
// The work goes inventory → placement → plan → execute: Layout.Place puts
// every tensor on its ranks (header arithmetic); PlanExport and
// PlanReassemble turn that into a Plan that holds every file's header and
// copy steps and the data checks to run first; Plan.Execute writes it,
// resuming a killed run of the same plan.
package layout

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/model"
)

// Bounds on a layout, so that a bad file cannot make planning allocate or
// match without limit.
const (
	maxRanks  = 1 << 16 // world size
	maxRules  = 4096    // rules, and patterns, groups or projections per rule
	maxLayers = 1 << 16 // layer count (placement keeps a stage per layer)
	// maxPatternCost bounds the patterns' glob alternatives plus segments
	// together: every tensor name may be matched against all of them.
	maxPatternCost = 1 << 16
)

// enum is a small closed set written by name in layout and manifest JSON;
// S gives its names (indexed by value; "" is the omitted default) and its
// JSON field.
type enum[S enumSet] uint8

type enumSet interface {
	set() (names []string, field string)
}

// MarshalText writes the JSON name.
func (e enum[S]) MarshalText() ([]byte, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	var s S
	names, _ := s.set()
	return []byte(names[e]), nil
}

// check refuses a value with no name: JSON cannot make one, a Go caller
// setting a rule's field can.
func (e enum[S]) check() error {
	var s S
	if names, field := s.set(); int(e) >= len(names) {
		return fmt.Errorf("%w: unknown %s value %d", errLayout, field, uint8(e))
	}
	return nil
}

// UnmarshalText parses the JSON name.
func (e *enum[S]) UnmarshalText(b []byte) error {
	var s S
	names, field := s.set()
	if i := slices.Index(names, string(b)); i >= 0 {
		*e = enum[S](i)
		return nil
	}
	valid := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "" })
	*e = 0
	return fmt.Errorf("%w: unknown %s %q (want one of %s)", errLayout, field, b, strings.Join(valid, ", "))
}

// action is what a rule does with the tensors it matches.
type action = enum[actionSet]

type actionSet struct{}

func (actionSet) set() ([]string, string) {
	return []string{replicate: "replicate", actSplit: "split", actExpert: "expert", drop: "drop"}, "action"
}

const (
	replicate action = iota // the whole tensor on every rank of its stage
	// actSplit cuts the tensor along Axis into Parts equal slices; local rank l
	// holds slice l % Parts.
	actSplit
	// actExpert puts the tensor on the one rank of its stage that owns its expert
	// index: rank = expert / (Experts / ranks per stage).
	actExpert
	drop // on no rank (e.g. vision for text-only serving)
)

// stagePlace says which pipeline stage a rule's tensors belong to.
type stagePlace = enum[stageSet]

type stageSet struct{}

func (stageSet) set() ([]string, string) {
	return []string{stageAuto: "", stageLayer: "layer", stageFirst: "first", stageLast: "last"}, "stage"
}

const (
	// stageAuto is stageLayer when the rule's patterns capture <layer>; a
	// pipeline layout rejects it otherwise.
	stageAuto  stagePlace = iota
	stageLayer            // the stage that owns the tensor's <layer>
	stageFirst            // stage 0 (embedding, vision)
	stageLast             // the last stage (final norms, lm_head)
)

// scalePolicy says what happens to the block-FP8 scale of a weight whose split
// cuts a 128-row (or column) block, so the scale rows cannot follow the slices.
type scalePolicy = enum[scalePolicySet]

type scalePolicySet struct{}

func (scalePolicySet) set() ([]string, string) {
	return []string{scaleReplicate: "replicate", scaleReject: "reject"}, "unaligned_scale"
}

const (
	scaleReplicate scalePolicy = iota // the whole scale on every rank of the group
	scaleReject                       // planning fails with errScaleAlign
)

// rule maps tensors, named by patterns or by the model's tensor groups, to
// an action. See pattern.go for the pattern syntax.
type rule struct {
	// Name identifies the rule in errors and manifests.
	Name string `json:"name"`
	// Match lists name patterns; a tensor matches the rule if any matches.
	Match []string `json:"match,omitempty"`
	// Groups lists model tensor groups or families (model.ParseGroupSet), or
	// "layer" for every tensor of a decoder layer, under either name prefix.
	// A group's block-FP8 scales are not matched: they follow their weight.
	Groups []string `json:"groups,omitempty"`
	// Projs narrows the experts group to some projections ("w1", "w2", "w3").
	Projs  []string `json:"projs,omitempty"`
	Action action   `json:"action"`
	// Stage places matched tensors on a pipeline stage (pipeline layouts only).
	Stage stagePlace `json:"stage,omitempty"`
	// Axis and Parts give a split; Parts must divide the ranks per stage.
	Axis  int `json:"axis,omitempty"`
	Parts int `json:"parts,omitempty"`
	// Units, when set, is the number of heads along Axis: a split must not
	// cut one.
	Units int64 `json:"units,omitempty"`
	// Valid, when set, is how many leading entries along Axis are real; the
	// rest is padding the split drops (A_log: 96 heads of 128 entries).
	Valid int64 `json:"valid,omitempty"`
	// Experts is the expert count per layer (actExpert); the ranks per stage
	// must divide it.
	Experts int `json:"experts,omitempty"`
	// UnalignedScale is what a block-FP8 scale does when the split cuts a block.
	UnalignedScale scalePolicy `json:"unaligned_scale,omitempty"`
}

// Layout is a complete description of how tensors spread over ranks.
type Layout struct {
	// Name identifies the layout (a built-in name or the file's).
	Name string `json:"name"`
	Doc  string `json:"doc,omitempty"`
	// Layers is the model's num_hidden_layers.
	Layers int `json:"layers"`
	// Partition is the layers of each pipeline stage
	// (SGLANG_PP_LAYER_PARTITION); empty means one stage of every layer.
	Partition []int `json:"partition,omitempty"`
	// RanksPerStage is the ranks of one stage; rank r is local rank
	// r % RanksPerStage of stage r / RanksPerStage.
	RanksPerStage int `json:"ranks_per_stage"`
	// Rules are matched against every tensor name; exactly one must match.
	Rules []rule `json:"rules"`

	// cls reads names by the layer schedule of the model a built-in was
	// built for (nil: K3's, or the source's when planning an export).
	cls *model.Classifier
}

// Stages is the number of pipeline stages (1 without a partition).
func (l *Layout) Stages() int {
	return max(1, len(l.Partition))
}

func (l *Layout) ranks() int { return l.Stages() * l.RanksPerStage }

// StageLayers returns the [first, end) layer range of stage s.
func (l *Layout) StageLayers(s int) (first, end int) {
	if len(l.Partition) == 0 {
		return 0, l.Layers
	}
	for _, n := range l.Partition[:s] {
		first += n
	}
	return first, first + l.Partition[s]
}

// checkLayers refuses a layout that states a layer count other than the
// checkpoint's num_hidden_layers (0 states none).
func (l *Layout) checkLayers(m Model) error {
	if l.Layers != 0 && m.Layers > 0 && l.Layers != m.Layers {
		return fmt.Errorf("%w: %s: \"layers\" is %d, but the checkpoint's config.json has num_hidden_layers %d; they must be equal",
			errLayout, l.Name, l.Layers, m.Layers)
	}
	return nil
}

type compiledRule struct {
	*rule
	pats     []*pattern
	numeric  bool
	groups   model.GroupSet
	anyLayer bool     // Groups holds anyLayerGroup
	projs    []string // nil: every projection
}

// anyLayerGroup in Rule.Groups matches every tensor of a decoder layer.
const anyLayerGroup = "layer"

// modelLevel are the groups outside the decoder layers (built-in names: no error).
var modelLevel, _ = model.ParseGroupSet("embedding,lm_head,final_norms,vision_tower,mm_projector")

func (r *compiledRule) matchGroup(tn model.TensorName) bool {
	if r.anyLayer && tn.Layer >= 0 {
		return true
	}
	return r.groups.Has(tn.Group) && (r.projs == nil || slices.Contains(r.projs, tn.Proj.String()))
}

// compileGroups reads Groups and Projs; it reports whether every group
// lies inside the decoder layers.
func (cr *compiledRule) compileGroups(l *Layout) (allLayer bool, err error) {
	r := cr.rule
	for _, g := range r.Groups {
		if g == anyLayerGroup {
			cr.anyLayer = true
			continue
		}
		set, err := model.ParseGroupSet(g)
		if err != nil {
			return false, fmt.Errorf("%w: %s: rule %q: %v", errLayout, l.Name, r.Name, err)
		}
		cr.groups |= set
	}
	for _, p := range r.Projs {
		if p != "w1" && p != "w2" && p != "w3" { // the expert projection names of model.TensorName.Proj
			return false, fmt.Errorf("%w: %s: rule %q: unknown expert projection %q (want w1, w2 or w3)", errLayout, l.Name, r.Name, p)
		}
		cr.projs = append(cr.projs, p)
	}
	if len(r.Projs) > 0 && cr.groups != model.Groups(model.GroupExperts) {
		return false, fmt.Errorf("%w: %s: rule %q: projs applies to the experts group alone", errLayout, l.Name, r.Name)
	}
	if r.Action == actExpert && (cr.anyLayer || cr.groups&^model.Groups(model.GroupExperts) != 0) {
		return false, fmt.Errorf("%w: %s: rule %q: an expert rule's groups must be experts", errLayout, l.Name, r.Name)
	}
	return cr.groups&modelLevel == 0, nil
}

// compile validates the layout's structure and patterns (not yet against
// tensors) and compiles them.
func (l *Layout) compile() ([]compiledRule, error) {
	if err := l.validateShape(); err != nil {
		return nil, err
	}
	out := make([]compiledRule, len(l.Rules))
	cost := 0
	for i := range l.Rules {
		r := &l.Rules[i]
		cr := compiledRule{rule: r}
		if len(r.Match) == 0 && len(r.Groups) == 0 {
			return nil, fmt.Errorf("%w: %s: rule %q has no patterns or groups", errLayout, l.Name, r.Name)
		}
		if len(r.Match) > maxRules || len(r.Groups) > maxRules || len(r.Projs) > maxRules {
			return nil, fmt.Errorf("%w: %s: rule %q has more than %d patterns, groups or projections", errLayout, l.Name, r.Name, maxRules)
		}
		allLayer, err := cr.compileGroups(l)
		if err != nil {
			return nil, err
		}
		for _, m := range r.Match {
			p, err := compilePattern(m)
			if err != nil {
				return nil, fmt.Errorf("%s: rule %q: %w", l.Name, r.Name, err)
			}
			allLayer = allLayer && p.layer
			if r.Action == actExpert && !p.expert {
				return nil, fmt.Errorf("%w: %s: rule %q: expert rule pattern %q does not capture <expert>", errLayout, l.Name, r.Name, m)
			}
			cost += len(p.segs)
			for _, sg := range p.segs {
				cost += len(sg.alts)
			}
			if cost > maxPatternCost {
				return nil, fmt.Errorf("%w: %s: rule %q: the layout's patterns add up to more than %d segments and alternatives", errPattern, l.Name, r.Name, maxPatternCost)
			}
			cr.numeric = cr.numeric || p.numeric
			cr.pats = append(cr.pats, p)
		}
		if err := l.validateRule(r, allLayer); err != nil {
			return nil, err
		}
		out[i] = cr
	}
	return out, nil
}

func (l *Layout) validateShape() error {
	if l.Layers < 0 || l.Layers > maxLayers {
		return fmt.Errorf("%w: %s: \"layers\" is %d, out of [0, %d]", errLayout, l.Name, l.Layers, maxLayers)
	}
	if l.RanksPerStage < 1 || l.RanksPerStage > maxRanks {
		return fmt.Errorf("%w: %s: \"ranks_per_stage\" is %d, out of [1, %d]", errLayout, l.Name, l.RanksPerStage, maxRanks)
	}
	if len(l.Rules) == 0 || len(l.Rules) > maxRules {
		return fmt.Errorf("%w: %s: %d rules (want 1..%d)", errLayout, l.Name, len(l.Rules), maxRules)
	}
	if len(l.Partition) > 0 {
		if len(l.Partition) > maxRanks/l.RanksPerStage {
			return fmt.Errorf("%w: %s: \"partition\" has %d stages; × %d ranks per stage exceeds %d ranks", errLayout, l.Name, len(l.Partition), l.RanksPerStage, maxRanks)
		}
		if err := checkPartition(l.Partition, len(l.Partition), l.Layers); err != nil {
			return fmt.Errorf("%s: %w", l.Name, err)
		}
	}
	return nil
}

func (l *Layout) validateRule(r *rule, allLayer bool) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: rule %q: %s", errLayout, l.Name, r.Name, fmt.Sprintf(format, a...))
	}
	if err := cmp.Or(r.Action.check(), r.Stage.check(), r.UnalignedScale.check()); err != nil {
		return fmt.Errorf("%s: rule %q: %w", l.Name, r.Name, err)
	}
	if l.Stages() > 1 && r.Action != drop && (r.Stage == stageAuto || r.Stage == stageLayer) && !allLayer {
		return fail("a pipeline layout needs stage \"first\" or \"last\" for patterns without <layer>")
	}
	if r.Stage == stageLayer && !allLayer {
		return fail("stage \"layer\" needs every pattern to capture <layer>")
	}
	switch r.Action {
	case actSplit:
		if r.Parts < 1 || l.RanksPerStage%r.Parts != 0 {
			return fmt.Errorf("%w: %s: rule %q: %d parts do not divide %d ranks per stage", errIndivisible, l.Name, r.Name, r.Parts, l.RanksPerStage)
		}
		if r.Axis < 0 {
			return fail("negative axis %d", r.Axis)
		}
		if r.Units < 0 || r.Valid < 0 {
			return fail("negative units or valid")
		}
		if r.Units > 0 && r.Units%int64(r.Parts) != 0 {
			return fmt.Errorf("%w: %s: rule %q: %d heads not divisible by %d ranks", errIndivisible, l.Name, r.Name, r.Units, r.Parts)
		}
	case actExpert:
		if r.Experts < 1 || r.Experts%l.RanksPerStage != 0 {
			return fmt.Errorf("%w: %s: rule %q: %d experts not divisible by %d ranks", errIndivisible, l.Name, r.Name, r.Experts, l.RanksPerStage)
		}
	}
	return nil
}

func parseLayout(data []byte) (*Layout, error) {
	var l Layout
	if err := decodeStrict(data, &l); err != nil {
		return nil, fmt.Errorf("%w: %v", errLayout, err)
	}
	if _, err := l.compile(); err != nil {
		return nil, err
	}
	return &l, nil
}

const maxLayoutFile = 16 << 20

func loadLayout(path string) (*Layout, error) {
	data, err := fsx.ReadFile(path, maxLayoutFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errLayout, err)
	}
	l, err := parseLayout(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if l.Name == "" {
		l.Name = path
	}
	return l, nil
}
