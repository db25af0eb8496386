package inspect

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// MaxListedWarnings bounds the individual problems a report spells out; the
// rest are counted, so a checkpoint with half a million bad tensors still gets a
// readable report.
const MaxListedWarnings = 20

// DefaultRecipe is the recipe of the FP8 step in the per-rank memory steps.
const DefaultRecipe = "attn-moe-dense-fp8"

// Default layouts for --by rank and --by stage when no --layout is given.
const (
	DefaultRankLayout  = "dp16"
	DefaultStageLayout = "pp16"
)

// Options choose what Audit accounts and plans.
type Options struct {
	// By selects the rows of the main table.
	By GroupBy
	// Recipe, when set, adds the accounting of the checkpoint the convert
	// recipe would produce (and plans Layout on that checkpoint).
	Recipe string
	// Format is the scale-tensor convention of the recipe's output.
	Format convert.Format
	// Experts, when ExpertsNVFP4, accounts the routed experts cast to NVFP4
	// (with Recipe, or alone: the checkpoint otherwise as it is).
	Experts convert.ExpertsMode
	// Layout, when set, is a built-in layout name or a layout JSON file: the
	// report then gives per-rank (and per-stage) resident bytes.
	Layout string
	// PPPartition overrides the layers per pipeline stage of the layout.
	PPPartition []int
	// Strict turns tensors that disagree with config.json into an error.
	Strict bool
	// Steps adds the per-rank memory steps of the layout (BF16 baseline →
	// text only → FP8 → weight shard → vocab TP8), the data of the chart.
	Steps bool
}

// Report is the result of an audit. Its JSON form is the --json output.
type Report struct {
	// Source is the path or URL inspected.
	Source string `json:"source"`
	// BytesRead is every byte read: headers, index, config files.
	BytesRead int64 `json:"bytes_read"`
	Accounting
	// Files lists the shards with their header and data sizes.
	Files []FileRow `json:"files"`
	// By is the grouping of Groups.
	By GroupBy `json:"by"`
	// Groups is the table selected by By (for stage and rank: the layout's).
	Groups []Row `json:"groups"`
	// Quantization holds the quantization sections of the checkpoint's configs.
	Quantization []QuantSection `json:"quantization,omitempty"`
	// Warnings lists problems that did not stop the audit.
	Warnings []string `json:"warnings,omitempty"`
	// Recipe is the what-if accounting of Options.Recipe.
	Recipe *RecipeReport `json:"recipe,omitempty"`
	// Layout is the per-rank / per-stage accounting of Options.Layout.
	Layout *LayoutReport `json:"layout,omitempty"`
	// Ranks, Stages and Steps are Layout's, at the top level of the JSON
	// object ("ranks": [{"rank", "bytes", "components"}] as the issue asks).
	Ranks  []RankRow  `json:"ranks,omitempty"`
	Stages []StageRow `json:"stages,omitempty"`
	Steps  []Step     `json:"steps,omitempty"`
}

// Accounting is the tensor count and bytes of a checkpoint, by component and dtype.
type Accounting struct {
	TensorCount int64      `json:"tensor_count"`
	TotalBytes  int64      `json:"total_bytes"`
	Components  []Row      `json:"components"`
	DTypes      []DTypeRow `json:"dtypes"`
}

// DTypeRow is one dtype's share of a checkpoint.
type DTypeRow struct {
	DType string `json:"dtype"`
	Sum
}

// FileRow is one shard: its header (what inspect reads) and its tensors.
type FileRow struct {
	FileEntry
	Sum
}

// RecipeReport is the accounting of the checkpoint a recipe would produce.
type RecipeReport struct {
	Name    string              `json:"name"`
	Format  convert.Format      `json:"format"`
	Experts convert.ExpertsMode `json:"experts"`
	// Splits are the fused groups the recipe splits (engines load them wrongly).
	Splits []convert.SplitReport `json:"fused_splits,omitempty"`
	Accounting
}

// LayoutReport is the resident bytes of every rank (and stage) under a layout.
type LayoutReport struct {
	Name string `json:"name"`
	// Recipe is the recipe the planned tensors come from ("" = the checkpoint as is).
	Recipe string `json:"recipe,omitempty"`
	// Options are the built-in layout's switches used (nil for a layout file).
	Options      *layout.Options `json:"options,omitempty"`
	DroppedBytes int64           `json:"dropped_bytes"`
	// Unaligned lists FP8 weights whose split cuts a scale block (their scale stays replicated).
	Unaligned []string `json:"unaligned_scales,omitempty"`
	// Ranks is what every rank holds (in JSON: the report's "ranks").
	Ranks []RankRow `json:"-"`
	// Stages is every pipeline stage of a stage layout (the report's "stages").
	Stages []StageRow `json:"-"`
	// Steps is the per-rank memory story of Options.Steps (the report's "steps").
	Steps []Step `json:"-"`
}

// RankRow is what one rank holds.
type RankRow struct {
	Rank       int   `json:"rank"`
	Stage      int   `json:"stage"`
	Tensors    int64 `json:"tensors"`
	Bytes      int64 `json:"bytes"`
	Components []Row `json:"components"`
}

// StageRow is one pipeline stage: its layers [first, end), the source files its
// loader must open, the distinct tensors it holds and its bytes over all its ranks.
type StageRow struct {
	Stage   int      `json:"stage"`
	Layers  [2]int   `json:"layers"`
	Files   []string `json:"files"`
	Tensors int64    `json:"tensors"`
	Bytes   int64    `json:"bytes"`
}

// check validates the options (before anything is read) and returns the
// layout to plan, "" for none.
func (o Options) check() (string, error) {
	if int(o.By) >= numGroupBy {
		return "", fmt.Errorf("%w: group %d", ErrUsage, o.By)
	}
	name := o.Layout
	if name == "" && o.By == ByRank {
		name = DefaultRankLayout
	}
	if name == "" && o.By == ByStage {
		name = DefaultStageLayout
	}
	if o.Steps && name == "" {
		return "", fmt.Errorf("%w: the memory steps (--chart) need a layout", ErrUsage)
	}
	if o.Recipe != "" {
		if _, err := convert.Lookup(o.Recipe); err != nil {
			return "", fmt.Errorf("%w: --recipe: %w", ErrUsage, err)
		}
	}
	return name, nil
}

// Inspect opens a checkpoint (directory, index, single file or http(s) URL),
// reading only headers, the index and config files, and audits it.
func Inspect(path string, opts Options) (*Report, error) {
	if _, err := opts.check(); err != nil {
		return nil, err
	}
	src, err := streamHeaders(context.Background(), path)
	if err != nil {
		return nil, err
	}
	return audit(src, path, opts)
}

// auditor holds what an audit keeps of a checkpoint: its file names and,
// when it plans, the flattened tensor table (every tensor in file order, with
// its component and file).
type auditor struct {
	src    *headers
	cfg    *model.Config // nil when config.json is absent or unusable
	specs  []safetensors.TensorSpec
	comps  []model.Component
	fileOf []int32
	warn   warnings
	opts   Options
}

// Audit accounts an opened checkpoint; source names it in the report.
func Audit(ck *safetensors.Checkpoint, source string, opts Options) (*Report, error) {
	return audit(checkpointHeaders(ck), source, opts)
}

func audit(src *headers, source string, opts Options) (*Report, error) {
	layoutName, err := opts.check()
	if err != nil {
		return nil, err
	}
	a := &auditor{src: src, opts: opts}
	rep := &Report{Source: source, By: opts.By}
	var auxBytes int64
	if rep.Quantization, auxBytes, err = a.readConfigs(); err != nil {
		return nil, err
	}
	perFile, err := a.scan()
	if err != nil {
		return nil, err
	}
	a.fill(rep, perFile)
	if opts.Recipe != "" || opts.Experts != convert.ExpertsKeep {
		if rep.Recipe, err = a.recipe(opts.Recipe); err != nil {
			return nil, err
		}
	}
	if layoutName != "" {
		if rep.Layout, err = a.layoutReport(layoutName); err != nil {
			return nil, err
		}
		rep.Ranks, rep.Stages, rep.Steps = rep.Layout.Ranks, rep.Layout.Stages, rep.Layout.Steps
	}
	switch opts.By {
	case ByStage:
		rep.Groups = stageGroups(rep.Layout)
	case ByRank:
		rep.Groups = rankGroups(rep.Layout)
	}
	if opts.Strict && a.warn.shape > 0 {
		return nil, fmt.Errorf("%w: %d tensors: %s", ErrShape, a.warn.shape, a.warn.firstShape)
	}
	rep.Warnings = a.warn.list()
	if f := src.fetched(); f > 0 {
		rep.BytesRead = f // remote: everything fetched, aux files included
	} else {
		rep.BytesRead = src.read() + auxBytes
	}
	return rep, nil
}

// warnings collects problems, listing the first few of each kind.
type warnings struct {
	listed     []string
	more       int
	shape      int
	firstShape string
}

func (w *warnings) add(s string) {
	if len(w.listed) < MaxListedWarnings {
		w.listed = append(w.listed, s)
	} else {
		w.more++
	}
}

func (w *warnings) list() []string {
	out := slices.Clone(w.listed)
	if w.more > 0 {
		out = append(out, fmt.Sprintf("and %d more warnings", w.more))
	}
	return out
}

// fill writes the checkpoint's own accounting into the report.
func (a *auditor) fill(rep *Report, per []fileTotals) {
	var comp [model.NumComponents]Sum
	var dt [256]Sum
	layers := map[int]*Sum{}
	for fi := range per {
		p := &per[fi]
		rep.TensorCount += p.row.Tensors
		rep.TotalBytes += p.row.Bytes
		for c := range comp {
			comp[c].merge(p.comp[c])
		}
		for d := range dt {
			dt[d].merge(p.dtype[d])
		}
		for l, s := range p.layers {
			if layers[l] == nil {
				layers[l] = &Sum{}
			}
			layers[l].merge(*s)
		}
		rep.Files = append(rep.Files, p.row)
	}
	rep.Components = componentRows(comp[:])
	rep.DTypes = dtypeRows(dt[:])
	switch a.opts.By {
	case ByComponent:
		rep.Groups = rep.Components
	case ByDType:
		for _, d := range rep.DTypes {
			rep.Groups = append(rep.Groups, Row{Key: d.DType, Sum: d.Sum})
		}
	case ByLayer:
		keys := slices.Sorted(func(yield func(int) bool) {
			for l := range layers {
				if !yield(l) {
					return
				}
			}
		})
		for _, l := range keys {
			key := "model"
			if l >= 0 {
				key = strconv.Itoa(l)
			}
			rep.Groups = append(rep.Groups, Row{Key: key, Sum: *layers[l]})
		}
		// Model-level tensors after the layers, as in the checkpoint's files.
		if len(keys) > 0 && keys[0] < 0 {
			rep.Groups = append(rep.Groups[1:], rep.Groups[0])
		}
	case ByFile:
		for _, f := range rep.Files {
			rep.Groups = append(rep.Groups, Row{Key: f.Path, Sum: f.Sum})
		}
	}
}

// componentRank orders component names as componentRows does: the schema's
// order, other (and any unknown name) last.
func componentRank(name string) int {
	c, err := model.ParseComponent(name)
	if err != nil || c == model.Other {
		return model.NumComponents
	}
	return int(c)
}

// componentRows lists the non-empty components in the schema's order, with
// other last so unclassified tensors stand out.
func componentRows(comp []Sum) []Row {
	var rows []Row
	for c := 1; c < len(comp); c++ {
		if comp[c].Tensors > 0 {
			rows = append(rows, Row{Key: model.Component(c).String(), Sum: comp[c]})
		}
	}
	if comp[model.Other].Tensors > 0 {
		rows = append(rows, Row{Key: model.Other.String(), Sum: comp[model.Other]})
	}
	return rows
}

// dtypeRows lists the dtypes present, largest share first.
func dtypeRows(dt []Sum) []DTypeRow {
	var rows []DTypeRow
	for d, s := range dt {
		if s.Tensors > 0 {
			rows = append(rows, DTypeRow{DType: safetensors.DType(d).String(), Sum: s})
		}
	}
	slices.SortStableFunc(rows, func(x, y DTypeRow) int { return -cmpInt64(x.Bytes, y.Bytes) })
	return rows
}

func cmpInt64(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// planned is a tensor list to account: the checkpoint's own, or a recipe's
// output, with each tensor's component and file.
type planned struct {
	recipe string
	specs  []safetensors.TensorSpec
	comps  []model.Component
	fileOf []int32
}

func (a *auditor) source() *planned {
	return &planned{specs: a.specs, comps: a.comps, fileOf: a.fileOf}
}

// applyRecipe plans a recipe's output. Each output tensor is accounted with
// the tensor it is made from: a scale belongs to its weight's component (the
// schema's rule), and the output keeps the source's shard names.
func (a *auditor) applyRecipe(name string) (*planned, error) {
	r, err := lookupRecipe(name)
	if err != nil {
		return nil, fmt.Errorf("%w: --recipe: %w", ErrUsage, err)
	}
	outs, err := convert.PlanTensors(r, a.specs, a.convertOptions())
	if err != nil {
		return nil, err
	}
	p := &planned{recipe: name,
		specs:  make([]safetensors.TensorSpec, len(outs)),
		comps:  make([]model.Component, len(outs)),
		fileOf: make([]int32, len(outs))}
	j := 0 // outputs follow the input order: walk both lists together
	for i, o := range outs {
		for j < len(a.specs) && a.specs[j].Name != o.Source {
			j++
		}
		if j == len(a.specs) {
			return nil, fmt.Errorf("recipe %s: output %s: source %s out of order", name, o.Name, o.Source)
		}
		p.specs[i], p.comps[i], p.fileOf[i] = o.TensorSpec, a.comps[j], a.fileOf[j]
	}
	return p, nil
}

func (p *planned) accounting() Accounting {
	var comp [model.NumComponents]Sum
	var dt [256]Sum
	var acc Accounting
	for i, s := range p.specs {
		n, _ := safetensors.ByteSize(s.DType, s.Shape) // validated by the codec or the planner
		comp[p.comps[i]].add(n)
		dt[s.DType].add(n)
		acc.TensorCount++
		acc.TotalBytes += n
	}
	acc.Components = componentRows(comp[:])
	acc.DTypes = dtypeRows(dt[:])
	return acc
}

func (a *auditor) recipe(name string) (*RecipeReport, error) {
	p, err := a.applyRecipe(name)
	if err != nil {
		return nil, err
	}
	r, err := lookupRecipe(name)
	if err != nil {
		return nil, err
	}
	splits, err := convert.RecipeSplits(r, a.specs, a.convertOptions())
	if err != nil {
		return nil, err
	}
	return &RecipeReport{Name: r.Name, Format: a.opts.Format, Experts: a.opts.Experts, Splits: splits, Accounting: p.accounting()}, nil
}

// layoutModel gives the layout package the model dimensions it derives the
// built-in layouts from: the config's, or K3's without one.
func (a *auditor) layoutModel() layout.Model {
	if a.cfg == nil {
		return layout.K3()
	}
	return layout.ModelOf(a.cfg)
}

// resolveLayout builds the layout with the given switches; a layout file has
// none (nil options).
func (a *auditor) resolveLayout(name string, o *layout.Options) (*layout.Layout, error) {
	lo := layout.Options{}
	if o != nil {
		lo = *o
	}
	lo.PPPartition = a.opts.PPPartition
	return layout.Resolve(name, a.layoutModel(), lo)
}

func (a *auditor) layoutReport(name string) (*LayoutReport, error) {
	var opts *layout.Options
	if o, err := layout.DefaultOptions(name); err == nil {
		opts = &o
	}
	l, err := a.resolveLayout(name, opts)
	if err != nil {
		return nil, err
	}
	p := a.source()
	if a.opts.Recipe != "" {
		if p, err = a.applyRecipe(a.opts.Recipe); err != nil {
			return nil, err
		}
	}
	plan, err := l.Place(p.specs)
	if err != nil {
		return nil, err
	}
	lr := &LayoutReport{Name: l.Name, Recipe: p.recipe, Options: opts, DroppedBytes: plan.DroppedBytes, Unaligned: plan.Unaligned}
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

// accountPlan sums every rank's pieces by component and, for pipeline
// layouts, lists each stage's layers and the files its loader opens.
func (a *auditor) accountPlan(plan *layout.Placement, p *planned) ([]RankRow, []StageRow, error) {
	l := plan.Layout
	ranks := make([]RankRow, plan.Ranks())
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
		var comp [model.NumComponents]Sum
		st := plan.StageOf(r)
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
		ranks[r] = RankRow{Rank: r, Stage: st, Tensors: int64(len(pcs)), Bytes: plan.RankBytes[r], Components: componentRows(comp[:])}
	}
	if stageFiles == nil {
		return ranks, nil, nil
	}
	stages := make([]StageRow, l.Stages())
	for s := range stages {
		first, end := l.StageLayers(s)
		stages[s] = StageRow{Stage: s, Layers: [2]int{first, end}, Files: []string{}, Tensors: stageTensors[s]}
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

// memoryStep is one change of the seed's per-rank weight memory story (DP16
// decode): which tensors (source or FP8) under which layout switches.
type memoryStep struct {
	label string
	fp8   bool
	opts  layout.Options
}

// memorySteps is the seed's order of changes, each on top of the previous.
var memorySteps = []memoryStep{
	{"BF16 baseline", false, layout.Options{}},
	{"text only", false, layout.Options{TextOnly: true}},
	{"FP8", true, layout.Options{TextOnly: true}},
	{"weight shard", true, layout.Options{TextOnly: true, WeightShard: true}},
	{"vocab TP8", true, layout.Options{TextOnly: true, WeightShard: true, VocabTP: true}},
}

// steps plans the layout once per memory step and reports, for each, the
// rank holding the most bytes. Steps that change no rank's bytes (weight
// shard outside dp16, FP8 on a converted source) are left out. A layout file
// has no switches: its steps are the checkpoint as is and after the recipe.
func (a *auditor) steps(name string, builtin bool) ([]Step, error) {
	recipe := a.opts.Recipe
	if recipe == "" {
		recipe = DefaultRecipe
	}
	src := a.source()
	// A checkpoint past the FP8 step (its config.json declares a block-FP8
	// conversion, or it holds the converter's FP8 weights: the
	// compressed-tensors convention declares nothing new) is its own FP8
	// step; any other is planned through the recipe, whose failure is the
	// report's.
	converted := a.cfg != nil && a.cfg.Converted != "" || slices.ContainsFunc(src.specs, func(s safetensors.TensorSpec) bool {
		return s.DType == convert.WeightDType
	})
	fp8 := src
	if !converted {
		var err error
		if fp8, err = a.applyRecipe(recipe); err != nil {
			return nil, err
		}
	}
	list := memorySteps
	if !builtin {
		list = []memoryStep{{"as is", false, layout.Options{}}, {"FP8", true, layout.Options{}}}
	}
	var out []Step
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
		top := 0
		for r, b := range plan.RankBytes {
			if b > plan.RankBytes[top] {
				top = r
			}
		}
		pcs, err := plan.Pieces(top)
		if err != nil {
			return nil, err
		}
		var comp [model.NumComponents]Sum
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
		out = append(out, Step{Label: label, Rank: top, Total: plan.RankBytes[top], Sliced: sliced, Components: componentRows(comp[:])})
	}
	return out, nil
}

func rankGroups(lr *LayoutReport) []Row {
	var rows []Row
	for _, r := range lr.Ranks {
		rows = append(rows, Row{Key: strconv.Itoa(r.Rank), Sum: Sum{Tensors: r.Tensors, Bytes: r.Bytes}})
	}
	return rows
}

func stageGroups(lr *LayoutReport) []Row {
	if len(lr.Stages) == 0 {
		return rankGroups(lr)
	}
	var rows []Row
	for _, s := range lr.Stages {
		rows = append(rows, Row{Key: strconv.Itoa(s.Stage), Sum: Sum{Tensors: s.Tensors, Bytes: s.Bytes}})
	}
	return rows
}
