package inspect

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// planned is the checkpoint's or a recipe output's tensors, with components and files.
type planned struct {
	recipe string
	specs  []safetensors.TensorSpec
	comps  []model.Component
	fileOf []int32
	// splits reports the fused groups the recipe splits (nil for the source).
	splits func() []convert.SplitReport
}

// asIs is the recipe of an --experts what-if without --recipe: every tensor
// kept, so only the experts' cast changes the accounting.
var asIs = &convert.Recipe{Name: "as-is", Doc: "every tensor kept (only --experts changes)"}

// applyRecipe plans a recipe's output ("": asIs), each output tensor in the
// component and file of the tensor it is made from; planned once per audit
// and shared, the result must not be modified.
func (a *auditor) applyRecipe(name string) (*planned, error) {
	if p := a.plans[name]; p != nil {
		return p, nil
	}
	r, err := asIs, error(nil)
	if name != "" {
		r, err = convert.Lookup(name)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: --recipe: %w", errUsage, err)
	}
	opts := convert.Options{Format: a.opts.Format, Experts: a.opts.Experts}
	outs, err := convert.PlanTensors(r, a.own.specs, opts)
	if err != nil {
		return nil, err
	}
	p := &planned{recipe: name,
		specs:  make([]safetensors.TensorSpec, len(outs)),
		comps:  make([]model.Component, len(outs)),
		fileOf: make([]int32, len(outs)),
		splits: sync.OnceValue(func() []convert.SplitReport { return convert.RecipeSplits(outs, opts) })}
	j := 0 // outputs follow the input order: walk both lists together
	for i, o := range outs {
		for j < len(a.own.specs) && a.own.specs[j].Name != o.Source {
			j++
		}
		if j == len(a.own.specs) {
			return nil, fmt.Errorf("recipe %s: output %s: source %s out of order", name, o.Name, o.Source)
		}
		p.specs[i], p.comps[i], p.fileOf[i] = o.TensorSpec, a.own.comps[j], a.own.fileOf[j]
	}
	a.plans[name] = p
	return p, nil
}

func (p *planned) accounting() accounting {
	var l ledger
	for i, s := range p.specs {
		n, _ := safetensors.ByteSize(s.DType, s.Shape) // validated by the codec or the planner
		l.add(p.comps[i], s.DType, n)
	}
	return l.accounting()
}

// resolveLayout builds the layout with switches o (nil for a layout file)
// for the config's model dimensions, or K3's without one.
func (a *auditor) resolveLayout(name string, o *layout.Options) (*layout.Layout, error) {
	lo := layout.Options{}
	if o != nil {
		lo = *o
	}
	lo.PPPartition = a.opts.PPPartition
	return layout.Resolve(name, layout.ModelOf(a.cfg), lo)
}

func (a *auditor) layoutReport(name string) (*layoutReport, error) {
	var opts *layout.Options
	if o, err := layout.DefaultOptions(name); err == nil {
		opts = &o
	}
	l, err := a.resolveLayout(name, opts)
	if err != nil {
		return nil, err
	}
	p := &a.own
	if a.opts.Recipe != "" || a.opts.Experts != convert.ExpertsKeep {
		if p, err = a.applyRecipe(a.opts.Recipe); err != nil {
			return nil, err
		}
	}
	plan, err := l.Place(p.specs)
	if err != nil {
		return nil, err
	}
	lr := &layoutReport{Name: l.Name, Recipe: p.recipe, Experts: a.opts.Experts, Options: opts, DroppedBytes: plan.DroppedBytes, Unaligned: plan.Unaligned}
	if opts != nil {
		lr.Options.PPPartition = l.Partition
	}
	if lr.Ranks, lr.Stages, err = a.accountPlan(plan, p); err != nil {
		return nil, err
	}
	if a.opts.Steps {
		if lr.Steps, err = a.steps(name, opts != nil); err != nil {
			return nil, err
		}
	}
	return lr, nil
}

// accountPlan sums every rank's pieces by component and lists each pipeline
// stage's layers and the files its loader opens.
func (a *auditor) accountPlan(plan *layout.Placement, p *planned) ([]rankRow, []stageRow, error) {
	l := plan.Layout
	ranks := make([]rankRow, len(plan.RankBytes))
	var stageFiles [][]bool
	var stageTensors []int64
	var seenIn []int32 // per tensor: 1 + the last stage that counted it
	if l.Stages() > 1 {
		stageFiles = make([][]bool, l.Stages())
		for s := range stageFiles {
			stageFiles[s] = make([]bool, len(a.src.names))
		}
		stageTensors = make([]int64, l.Stages())
		seenIn = make([]int32, len(p.specs))
	}
	for r := range ranks {
		pcs, err := plan.Pieces(r)
		if err != nil {
			return nil, nil, err
		}
		var comp [model.NumComponents]tally
		st := r / l.RanksPerStage // rank r is in stage r / RanksPerStage
		for _, pc := range pcs {
			comp[p.comps[pc.Index]].add(pc.Bytes)
			if stageFiles != nil {
				stageFiles[st][p.fileOf[pc.Index]] = true
				if seenIn[pc.Index] != int32(st+1) { // ranks come in stage order
					seenIn[pc.Index] = int32(st + 1)
					stageTensors[st]++
				}
			}
		}
		ranks[r] = rankRow{Rank: r, Stage: st, Tensors: int64(len(pcs)), Bytes: plan.RankBytes[r], Components: componentRows(comp[:])}
	}
	if stageFiles == nil {
		return ranks, nil, nil
	}
	stages := make([]stageRow, l.Stages())
	for s := range stages {
		first, end := l.StageLayers(s)
		stages[s] = stageRow{Stage: s, Layers: [2]int{first, end}, Files: []string{}, Tensors: stageTensors[s]}
		for fi, used := range stageFiles[s] {
			if used {
				stages[s].Files = append(stages[s].Files, a.src.names[fi])
			}
		}
	}
	for _, r := range ranks {
		stages[r.Stage].Bytes += r.Bytes
	}
	return ranks, stages, nil
}

// memoryStep is one step of the memory story: source or FP8, under switches.
type memoryStep struct {
	label string
	fp8   bool
	opts  layout.Options
}

// fp8Label names the step planned through the recipe.
const fp8Label = "FP8"

// memorySteps is the order of changes, each on top of the previous.
var memorySteps = []memoryStep{
	{"BF16 baseline", false, layout.Options{}},
	{"text only", false, layout.Options{TextOnly: true}},
	{fp8Label, true, layout.Options{TextOnly: true}},
	{"weight shard", true, layout.Options{TextOnly: true, WeightShard: true}},
	{"vocab TP8", true, layout.Options{TextOnly: true, WeightShard: true, VocabTP: true}},
}

// steps plans the layout for each memory step that changes a rank's bytes
// (a layout file's: as is and FP8) and reports the rank holding the most.
func (a *auditor) steps(name string, builtin bool) ([]step, error) {
	src := &a.own
	// A converted checkpoint (declared, or holding FP8 weights: the
	// compressed-tensors convention declares nothing new) is its own FP8 step.
	converted := a.cfg != nil && a.cfg.Converted != "" || slices.ContainsFunc(src.specs, func(s safetensors.TensorSpec) bool {
		return s.DType == safetensors.F8_E4M3
	})
	fp8 := src
	if !converted {
		var err error
		if fp8, err = a.applyRecipe(cmp.Or(a.opts.Recipe, defaultRecipe)); err != nil {
			return nil, err
		}
	}
	list := memorySteps
	if !builtin {
		list = []memoryStep{{"as is", false, layout.Options{}}, {fp8Label, true, layout.Options{}}}
	}
	var out []step
	var prev []int64
	for _, ms := range list {
		l, err := a.resolveLayout(name, &ms.opts)
		if err != nil {
			return nil, err
		}
		p := src
		if ms.fp8 {
			p = fp8
		}
		plan, err := l.Place(p.specs)
		if err != nil {
			return nil, fmt.Errorf("step %q: %w", ms.label, err)
		}
		if prev != nil && slices.Equal(prev, plan.RankBytes) {
			continue // the switch does not apply to this layout or checkpoint
		}
		prev = plan.RankBytes
		top := slices.Index(plan.RankBytes, slices.Max(plan.RankBytes))
		pcs, err := plan.Pieces(top)
		if err != nil {
			return nil, err
		}
		var comp [model.NumComponents]tally
		var sliced int64
		for _, pc := range pcs {
			comp[p.comps[pc.Index]].add(pc.Bytes)
			if pc.Held == layout.HeldSlice {
				n, _ := safetensors.ByteSize(pc.DType, pc.Shape)
				sliced += n
			}
		}
		label := ms.label
		if converted && label == memorySteps[0].label {
			label = "source"
		}
		out = append(out, step{Label: label, Rank: top, Total: plan.RankBytes[top], Sliced: sliced, Components: componentRows(comp[:])})
	}
	return out, nil
}
