package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
)

// ReportName is the file, beside the shards, with the error of every lossy step.
const ReportName = "quantization_report.json"

const reportSchema = 1 // changes with the report's meaning

// Report is quantization_report.json: the error per tensor group and in total.
type Report struct {
	Schema int           `json:"schema"`
	Groups []ReportEntry `json:"groups"`
	Total  ReportEntry   `json:"total"`
}

// ReportEntry is the error over a set of quantized tensors (quant.ErrStats).
// RelFro (√(Σ(x−x̂)²/Σx²)) and SQNR (10·log10(Σx²/Σ(x−x̂)²) dB) are null
// where the quotient is not finite.
type ReportEntry struct {
	Group       string   `json:"group,omitempty"`
	Tensors     int64    `json:"tensors"`
	Blocks      int64    `json:"blocks"`
	MaxAbsError float64  `json:"max_abs_error"`
	RelFro      *float64 `json:"rel_fro_error"`
	SQNR        *float64 `json:"sqnr_db"`
	Lossless    bool     `json:"lossless"`
	Saturated   int64    `json:"saturated"`
	NaN         int64    `json:"nan"`
	ZeroTiles   int64    `json:"zero_tiles"`
	LossyBlocks int64    `json:"lossy_blocks"`
	SumSq       float64  `json:"sum_sq"`
	SumSqError  float64  `json:"sum_sq_error"`
}

// errSums is a set of tensors' ErrStats and their count.
type errSums struct {
	Tensors int64 `json:"tensors"`
	quant.ErrStats
}

func (s *errSums) add(t errSums) {
	s.Tensors += t.Tensors
	s.ErrStats.Add(t.ErrStats)
}

// groupSums is errSums of one tensor group.
type groupSums struct {
	Group string `json:"group"`
	errSums
}

// fileReport is one shard's share of the report, kept in its done record
// so that a resumed run and merge add the same partial sums.
type fileReport struct {
	Groups []groupSums `json:"groups"`
	Total  errSums     `json:"total"`
}

// errCollector gathers the error of each quantized tensor of the file being
// written or verified. Accumulators are allocated errChunk at a time and
// never handed out twice, so a kernel left holding one cannot add to
// another tensor's.
type errCollector struct {
	tensors []namedErrs
	chunk   []quant.ErrStats
}

const errChunk = 64

type namedErrs struct {
	name string
	s    *quant.ErrStats
}

// measureErrors is off only in the benchmark of what measuring costs.
var measureErrors = true

// tensor returns a fresh accumulator for the named tensor, replacing any other.
func (c *errCollector) tensor(name string) *quant.ErrStats {
	if !measureErrors {
		return nil
	}
	if len(c.chunk) == cap(c.chunk) {
		c.chunk = make([]quant.ErrStats, 0, errChunk)
	}
	c.chunk = c.chunk[:len(c.chunk)+1]
	s := &c.chunk[len(c.chunk)-1]
	c.tensors = append(c.tensors, namedErrs{name, s})
	return s
}

// take folds what was collected into the file's report (or nil) and starts over.
func (c *errCollector) take(cls *model.Classifier) *fileReport {
	if len(c.tensors) == 0 {
		return nil
	}
	// By name; of a name filed twice the later, as a map would keep it.
	slices.SortStableFunc(c.tensors, func(a, b namedErrs) int { return strings.Compare(a.name, b.name) })
	groups := make([]errSums, model.NumAllGroups())
	r := &fileReport{}
	for i, t := range c.tensors {
		if i+1 < len(c.tensors) && c.tensors[i+1].name == t.name {
			continue
		}
		one := errSums{Tensors: 1, ErrStats: *t.s}
		groups[cls.ParseName(t.name).Group].add(one)
		r.Total.add(one)
	}
	for g := range model.Group(len(groups)) {
		if groups[g].Tensors > 0 {
			r.Groups = append(r.Groups, groupSums{Group: g.String(), errSums: groups[g]})
		}
	}
	clear(c.tensors)
	c.tensors = c.tensors[:0]
	return r
}

// buildReport adds the files' reports (nil: nothing quantized) in plan order.
func buildReport(files []*fileReport) *Report {
	var total errSums
	byGroup := map[string]errSums{}
	for _, f := range files {
		if f == nil {
			continue
		}
		total.add(f.Total)
		for _, g := range f.Groups {
			s := byGroup[g.Group]
			s.add(g.errSums)
			byGroup[g.Group] = s
		}
	}
	r := &Report{Schema: reportSchema, Groups: []ReportEntry{}, Total: total.entry("")}
	for g := range model.Group(model.NumAllGroups()) {
		if s, ok := byGroup[g.String()]; ok {
			r.Groups = append(r.Groups, s.entry(g.String()))
		}
	}
	return r
}

func (s *errSums) entry(group string) ReportEntry {
	e := ReportEntry{Group: group, Tensors: s.Tensors, Blocks: s.Blocks, MaxAbsError: s.MaxAbs,
		Lossless: s.SumSqErr == 0 && s.NaN == 0, Saturated: s.Saturated, NaN: s.NaN, ZeroTiles: s.ZeroTiles,
		LossyBlocks: s.LossyBlocks, SumSq: s.SumSq, SumSqError: s.SumSqErr}
	if s.SumSq > 0 {
		rel := math.Sqrt(s.SumSqErr / s.SumSq)
		e.RelFro = &rel
		if s.SumSqErr > 0 {
			db := 10 * math.Log10(s.SumSq/s.SumSqErr)
			e.SQNR = &db
		}
	}
	return e
}

// marshal renders the report as the file holds it.
func (r *Report) marshal() ([]byte, error) {
	for _, e := range append([]ReportEntry{r.Total}, r.Groups...) {
		for _, v := range []float64{e.MaxAbsError, e.SumSq, e.SumSqError} {
			if math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("%s: group %s: a non-finite error sum (%g)", ReportName, e.Group, v)
			}
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// readReport reads DST's quantization_report.json.
func readReport(d *destination) (*Report, error) {
	b, err := d.readFile(ReportName)
	if err != nil {
		return nil, err
	}
	r, err := ParseReport(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.path(ReportName), err)
	}
	return r, nil
}

// ParseReport reads a quantization_report.json; unknown fields and another
// schema are errors.
func ParseReport(b []byte) (*Report, error) {
	var r Report
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if r.Schema != reportSchema {
		return nil, fmt.Errorf("schema %d, this version reads %d", r.Schema, reportSchema)
	}
	return &r, nil
}

// diffReports names the first group and field where got differs from want.
func diffReports(got, want *Report) string {
	if got.Schema != want.Schema {
		return fmt.Sprintf("schema %d, want %d", got.Schema, want.Schema)
	}
	byGroup := func(r *Report, group string) (ReportEntry, bool) {
		i := slices.IndexFunc(r.Groups, func(e ReportEntry) bool { return e.Group == group })
		if i < 0 {
			return ReportEntry{}, false
		}
		return r.Groups[i], true
	}
	for _, w := range want.Groups {
		g, ok := byGroup(got, w.Group)
		if !ok {
			return fmt.Sprintf("group %s is missing", w.Group)
		}
		if d := diffEntry(g, w); d != "" {
			return fmt.Sprintf("group %s: %s", w.Group, d)
		}
	}
	for _, e := range got.Groups {
		if _, ok := byGroup(want, e.Group); !ok {
			return fmt.Sprintf("group %s is not one this conversion quantized", e.Group)
		}
	}
	if d := diffEntry(got.Total, want.Total); d != "" {
		return "total: " + d
	}
	return ""
}

// diffEntry names the first field of got and want that differs.
func diffEntry(got, want ReportEntry) string {
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		gb, _ := json.Marshal(gv.Field(i).Interface())
		wb, _ := json.Marshal(wv.Field(i).Interface())
		if !bytes.Equal(gb, wb) {
			name, _, _ := strings.Cut(gv.Type().Field(i).Tag.Get("json"), ",")
			return fmt.Sprintf("%s is %s, the source and output give %s", name, gb, wb)
		}
	}
	return ""
}

// reports says whether the plan has a lossy step, and so writes the report.
func (p *Plan) reports() bool {
	return slices.ContainsFunc(p.Files, func(fp *filePlan) bool { return slices.ContainsFunc(fp.Steps, lossy) })
}

// lossy says whether a step is the pass of a lossy conversion that measures
// its tensor (with s.errs.tensor).
func lossy(st step) bool {
	return st.Kind == stepScales || st.Kind == stepPack || (st.Kind == stepNVFP4 && st.Part == partCodes)
}

// writeReport writes DST's report atomically from the shards' records.
func writeReport(dst string, shards []string, done []fileRecord) (fileRecord, error) {
	files := make([]*fileReport, len(shards))
	for _, r := range done {
		if i := slices.Index(shards, r.Name); i >= 0 {
			files[i] = r.Report
		}
	}
	b, err := buildReport(files).marshal()
	if err != nil {
		return fileRecord{}, err
	}
	f, rec, err := stageFile(filepath.Join(dst, ReportName), b)
	if err == nil {
		err = f.Commit()
	}
	return rec, err
}

// checkReport requires DST's report to be rep.Report byte for byte.
func checkReport(rep *VerifyReport, dst *destination) {
	want, err := rep.Report.marshal()
	if err != nil {
		rep.fail("%v", err)
		return
	}
	got, err := dst.readFile(ReportName)
	if err != nil {
		rep.fail("%s: %v", ReportName, err)
		return
	}
	if bytes.Equal(got, want) {
		return
	}
	d := "same values, other bytes"
	if r, err := ParseReport(got); err != nil {
		d = err.Error()
	} else if diff := diffReports(r, rep.Report); diff != "" {
		d = diff
	}
	rep.fail("%s differs from the report recomputed from the source and the output: %s", ReportName, d)
}
