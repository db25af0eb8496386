package inspect

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// maxListedWarnings bounds the problems a report spells out; the rest are counted.
const maxListedWarnings = 20

// defaultRecipe is the recipe of the FP8 step in the per-rank memory steps.
const defaultRecipe = "attn-moe-dense-fp8"

// Default layouts for --by rank and --by stage when no --layout is given.
const (
	DefaultRankLayout  = "dp16"
	defaultStageLayout = "pp16"
)

// Options choose what Audit accounts and plans.
type Options struct {
	// By selects the rows of the main table (ParseGroupBy; "": by component).
	By groupBy
	// Recipe adds the accounting of the recipe's output (Layout is planned on it).
	Recipe string
	// Format is the scale-tensor convention of the recipe's output.
	Format model.Format
	// Experts accounts the routed experts as convert would write them.
	Experts convert.ExpertsMode
	// Layout (a built-in name or a layout file) adds resident bytes per rank and stage.
	Layout string
	// PPPartition overrides the layers per pipeline stage of the layout.
	PPPartition []int
	// Strict turns tensors that disagree with config.json into an error.
	Strict bool
	// Steps adds the per-rank memory steps of the layout, the chart's data.
	Steps bool
	// Chart is SaveChart's path: Inspect checks it first and adds the steps
	// (of DefaultRankLayout when Layout is empty).
	Chart string
}

// Report is the result of an audit. Its JSON form is the --json output.
type Report struct {
	Source    string `json:"source"`     // the path or URL inspected
	BytesRead int64  `json:"bytes_read"` // headers, index, config files
	accounting
	Files        []fileRow       `json:"files"`                         // the shards
	By           groupBy         `json:"by"`                            // the grouping of Groups
	Groups       []row           `json:"groups"`                        // the table By selects
	Quantization []quantSection  `json:"quantization,omitempty"`        // from the checkpoint's configs
	QuantReport  *convert.Report `json:"quantization_report,omitempty"` // a converted checkpoint's
	Warnings     []string        `json:"warnings,omitempty"`            // problems that did not stop the audit
	Recipe       *recipeReport   `json:"recipe,omitempty"`              // the what-if of Options.Recipe
	Layout       *layoutReport   `json:"layout,omitempty"`              // the accounting of Options.Layout
	// Ranks, Stages and Steps are Layout's, at the top level of the JSON.
	Ranks  []rankRow  `json:"ranks,omitempty"`
	Stages []stageRow `json:"stages,omitempty"`
	Steps  []step     `json:"steps,omitempty"`
}

// accounting is the tensor count and bytes of a checkpoint, by component and dtype.
type accounting struct {
	TensorCount int64      `json:"tensor_count"`
	TotalBytes  int64      `json:"total_bytes"`
	Components  []row      `json:"components"`
	DTypes      []dTypeRow `json:"dtypes"`
}

// dTypeRow is one dtype's share of a checkpoint.
type dTypeRow struct {
	DType string `json:"dtype"`
	tally
}

// fileRow is one shard: its header (what inspect reads) and its tensors.
type fileRow struct {
	fileItem
	tally
}

// recipeReport is the accounting of the checkpoint a recipe would produce.
type recipeReport struct {
	Name    string              `json:"name"`
	Format  model.Format        `json:"format"`
	Experts convert.ExpertsMode `json:"experts"`
	// Splits are the fused groups the recipe splits (engines load them wrongly).
	Splits []convert.SplitReport `json:"fused_splits,omitempty"`
	accounting
}

// layoutReport is the resident bytes of every rank (and stage) under a layout.
type layoutReport struct {
	Name    string              `json:"name"`
	Recipe  string              `json:"recipe,omitempty"`  // of the planned tensors ("": the checkpoint as is)
	Experts convert.ExpertsMode `json:"experts,omitempty"` // the --experts what-if of the planned tensors
	// Options are the built-in layout's switches used (nil for a layout file).
	Options      *layout.Options `json:"options,omitempty"`
	DroppedBytes int64           `json:"dropped_bytes"`
	// Unaligned lists FP8 weights whose split cuts a scale block (their scale stays replicated).
	Unaligned []string `json:"unaligned_scales,omitempty"`
	// Ranks, Stages and Steps are in the JSON at the report's top level.
	Ranks  []rankRow  `json:"-"`
	Stages []stageRow `json:"-"`
	Steps  []step     `json:"-"`
}

// rankRow is what one rank holds.
type rankRow struct {
	Rank       int   `json:"rank"`
	Stage      int   `json:"stage"`
	Tensors    int64 `json:"tensors"`
	Bytes      int64 `json:"bytes"`
	Components []row `json:"components"`
}

// stageRow is one pipeline stage: layers [first, end), the files its loader
// opens, its distinct tensors and its bytes over all its ranks.
type stageRow struct {
	Stage   int      `json:"stage"`
	Layers  [2]int   `json:"layers"`
	Files   []string `json:"files"`
	Tensors int64    `json:"tensors"`
	Bytes   int64    `json:"bytes"`
}

// check validates the options and returns the layout to plan ("": none).
func (o Options) check() (string, error) {
	if o.By != "" && !slices.Contains(groupBys, o.By) {
		return "", fmt.Errorf("%w: group %q", errUsage, o.By)
	}
	name := o.Layout
	switch {
	case name != "":
	case o.By == byRank:
		name = DefaultRankLayout
	case o.By == byStage:
		name = defaultStageLayout
	}
	if o.Steps && name == "" {
		return "", fmt.Errorf("%w: the memory steps (--chart) need a layout", errUsage)
	}
	if o.Recipe != "" {
		if _, err := convert.Lookup(o.Recipe); err != nil {
			return "", fmt.Errorf("%w: --recipe: %w", errUsage, err)
		}
	}
	return name, nil
}

// Inspect opens a checkpoint (directory, index, single file or http(s) URL),
// reading only headers, the index and config files, and audits it.
func Inspect(path string, opts Options) (*Report, error) {
	if opts.Chart != "" {
		if _, err := chartFormat(opts.Chart); err != nil {
			return nil, err
		}
		opts.Steps = true
		if opts.Layout == "" {
			opts.Layout = DefaultRankLayout
		}
	}
	if _, err := opts.check(); err != nil {
		return nil, err
	}
	src, err := streamHeaders(context.Background(), path, !opts.table())
	if err != nil {
		return nil, err
	}
	return audit(src, path, opts)
}

// auditor holds what an audit keeps of a checkpoint.
type auditor struct {
	src   *headers
	cfg   *model.Config // nil when config.json is absent or unusable
	own   planned       // when it plans: every tensor in file order
	warn  warnings
	opts  Options
	plans map[string]*planned // applyRecipe's, by recipe name
	// auxBytes counts the side files read (config files, the quantization report).
	auxBytes int64
}

func audit(src *headers, source string, opts Options) (*Report, error) {
	if opts.By == "" {
		opts.By = byComponent
	}
	layoutName, err := opts.check()
	if err != nil {
		return nil, err
	}
	a := &auditor{src: src, opts: opts, plans: map[string]*planned{}}
	rep := &Report{Source: source, By: opts.By}
	if rep.Quantization, err = a.readConfigs(); err != nil {
		return nil, err
	}
	if rep.QuantReport, err = a.readQuantReport(); err != nil {
		return nil, err
	}
	perFile, err := a.scan()
	if err != nil {
		return nil, err
	}
	a.fill(rep, perFile)
	if opts.Recipe != "" || opts.Experts != convert.ExpertsKeep {
		p, err := a.applyRecipe(opts.Recipe)
		if err != nil {
			return nil, err
		}
		rep.Recipe = &recipeReport{Name: cmp.Or(opts.Recipe, asIs.Name), Format: opts.Format, Experts: opts.Experts, Splits: p.splits(), accounting: p.accounting()}
	}
	if layoutName != "" {
		if rep.Layout, err = a.layoutReport(layoutName); err != nil {
			return nil, err
		}
		rep.Ranks, rep.Stages, rep.Steps = rep.Layout.Ranks, rep.Layout.Stages, rep.Layout.Steps
	}
	switch opts.By {
	case byStage:
		rep.Groups = stageGroups(rep.Layout)
	case byRank:
		rep.Groups = rankGroups(rep.Layout)
	}
	if opts.Strict && a.warn.shape > 0 {
		return nil, fmt.Errorf("%w: %d tensors: %s", errShape, a.warn.shape, a.warn.firstShape)
	}
	rep.Warnings = a.warn.list()
	if f := src.fetched(); f > 0 {
		rep.BytesRead = f // remote: everything fetched, aux files included
	} else {
		rep.BytesRead = src.read() + a.auxBytes
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
	if len(w.listed) < maxListedWarnings {
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
	var all ledger
	layers := map[int]tally{}
	for fi := range per {
		p := &per[fi]
		all.merge(&p.ledger)
		for l, s := range p.layers {
			t := layers[l]
			t.merge(s)
			layers[l] = t
		}
		rep.Files = append(rep.Files, fileRow{p.fileItem, p.all})
	}
	rep.accounting = all.accounting()
	switch a.opts.By {
	case byComponent:
		rep.Groups = rep.Components
	case byDType:
		rep.Groups = dtypeGroups(rep.DTypes)
	case byLayer:
		for _, l := range slices.Sorted(maps.Keys(layers)) {
			if l >= 0 {
				rep.Groups = append(rep.Groups, row{Key: strconv.Itoa(l), tally: layers[l]})
			}
		}
		if t, ok := layers[-1]; ok { // model-level tensors last, as in the checkpoint's files
			rep.Groups = append(rep.Groups, row{Key: "model", tally: t})
		}
	case byFile:
		for _, f := range rep.Files {
			rep.Groups = append(rep.Groups, row{Key: f.Path, tally: f.tally})
		}
	}
}

// componentRank orders component names as componentRows does (unknown last).
func componentRank(name string) int {
	c, err := model.ParseComponent(name)
	if err != nil || c == model.Other {
		return model.NumComponents
	}
	return int(c)
}

// componentRows lists the non-empty components in schema order, other last.
func componentRows(comp []tally) []row {
	var rows []row
	for c := 1; c < len(comp); c++ {
		if comp[c].Tensors > 0 {
			rows = append(rows, row{Key: model.Component(c).String(), tally: comp[c]})
		}
	}
	if comp[model.Other].Tensors > 0 {
		rows = append(rows, row{Key: model.Other.String(), tally: comp[model.Other]})
	}
	return rows
}

// dtypeRows lists the dtypes present, largest share first.
func dtypeRows(dt []tally) []dTypeRow {
	var rows []dTypeRow
	for d, s := range dt {
		if s.Tensors > 0 {
			rows = append(rows, dTypeRow{DType: safetensors.DType(d).String(), tally: s})
		}
	}
	slices.SortStableFunc(rows, func(x, y dTypeRow) int { return cmp.Compare(y.Bytes, x.Bytes) })
	return rows
}

// dtypeGroups is the dtype table as table rows (nil for none).
func dtypeGroups(ds []dTypeRow) []row {
	var rows []row
	for _, d := range ds {
		rows = append(rows, row{Key: d.DType, tally: d.tally})
	}
	return rows
}

func rankGroups(lr *layoutReport) []row {
	var rows []row
	for _, r := range lr.Ranks {
		rows = append(rows, row{Key: strconv.Itoa(r.Rank), tally: tally{Tensors: r.Tensors, Bytes: r.Bytes}})
	}
	return rows
}

// stageGroups is the stage table, the rank table for a layout of one stage.
func stageGroups(lr *layoutReport) []row {
	if len(lr.Stages) == 0 {
		return rankGroups(lr)
	}
	var rows []row
	for _, s := range lr.Stages {
		rows = append(rows, row{Key: strconv.Itoa(s.Stage), tally: tally{Tensors: s.Tensors, Bytes: s.Bytes}})
	}
	return rows
}
