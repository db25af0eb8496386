package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
)

// reportCases are the lossy conversions the report is checked on, each from
// the mini replica (pack: from its BF16 decode); convert/testdata/report_ref
// holds the Python reference for each (gen_report_ref.py).
var reportCases = []struct {
	name, recipe string
	opts         Options
	fromBF16     bool
}{
	{"fp8-deepseek", AttnMoEDenseFP8, Options{}, false},
	{"fp8-deepseek-ue8m0", AttnMoEDenseFP8, Options{Format: deepSeek, ScaleFmt: quant.ScaleUE8M0}, false},
	{"nvfp4-modelopt-numerics", ModelOptK3, Options{Format: modelOpt, Experts: ExpertsNVFP4, Numerics: quant.ModelOpt}, false},
	{"mxfp4-pack", BF16, Options{Experts: ExpertsMXFP4}, true},
}

// miniBF16 is the mini replica decoded to BF16 (shared).
func miniBF16(t *testing.T) string {
	dir, _ := sharedConversion(t, miniSrc, BF16, Options{Experts: ExpertsBF16})
	return dir
}

// convertCase is report case i's conversion (shared: read only).
func convertCase(t *testing.T, i int) (src, dst string, res *Result) {
	c := reportCases[i]
	src = miniSrc
	if c.fromBF16 {
		src = miniBF16(t)
	}
	dst, res = sharedConversion(t, src, c.recipe, c.opts)
	return src, dst, res
}

func readReportFile(t *testing.T, dir string) (*Report, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ReportName))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseReport(b)
	if err != nil {
		t.Fatal(err)
	}
	return r, b
}

// The report is written beside the output, listed in the manifest with its
// sha256, carried by the result, and adds up: the total is the groups' sum,
// and every quantized weight is in it once.
func TestReportWrittenAndListed(t *testing.T) {
	r, b := readReportFile(t, miniRef)
	m, err := readManifest(miniRef)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := m.lookup(ReportName)
	if !ok {
		t.Fatalf("manifest does not list %s", ReportName)
	}
	if got, err := hashFile(filepath.Join(miniRef, ReportName), nil); err != nil || got.SHA256 != rec.SHA256 || got.Size != int64(len(b)) {
		t.Fatalf("manifest records %s %d, file is %+v (%v)", rec.SHA256, rec.Size, got, err)
	}
	if r.Total.Tensors != int64(quantizedOn(t, miniSrc)) {
		t.Errorf("report total: %d tensors, the recipe quantizes %d", r.Total.Tensors, quantizedOn(t, miniSrc))
	}
	var sum ReportEntry
	var names []string
	for _, g := range r.Groups {
		names = append(names, g.Group)
		sum.Tensors += g.Tensors
		sum.Blocks += g.Blocks
		sum.LossyBlocks += g.LossyBlocks
		sum.MaxAbsError = max(sum.MaxAbsError, g.MaxAbsError)
		if _, err := model.ParseGroup(g.Group); err != nil {
			t.Errorf("group %q: %v", g.Group, err)
		}
	}
	want := []string{"kda.q_proj", "kda.k_proj", "kda.v_proj", "kda.g_proj", "kda.o_proj",
		"mla.q_a_proj", "mla.q_b_proj", "mla.kv_a_proj_with_mqa", "mla.kv_b_proj", "mla.o_proj", "mla.g_proj",
		"dense_mlp.gate_proj", "dense_mlp.up_proj", "dense_mlp.down_proj",
		"latent.down_proj", "latent.up_proj", "shared_experts.gate_proj", "shared_experts.up_proj", "shared_experts.down_proj"}
	if !slices.Equal(names, want) {
		t.Errorf("groups %v, want %v", names, want)
	}
	if sum.Tensors != r.Total.Tensors || sum.Blocks != r.Total.Blocks || sum.LossyBlocks != r.Total.LossyBlocks || sum.MaxAbsError != r.Total.MaxAbsError {
		t.Errorf("groups add up to %+v, total %+v", sum, r.Total)
	}
	if r.Total.SQNR == nil || *r.Total.SQNR < 25 || *r.Total.SQNR > 40 || r.Total.Lossless {
		t.Errorf("FP8 total SQNR %v lossless %v: not what E4M3 gives", r.Total.SQNR, r.Total.Lossless)
	}
	// The record of each shard keeps its share; a shard without a
	// quantized tensor has none.
	for _, f := range m.Files {
		if strings.HasSuffix(f.Name, ".safetensors") != (f.Report != nil) && f.Report != nil {
			t.Errorf("%s: a report share on a file that is no shard", f.Name)
		}
	}
}

// The report agrees with verify's own dequantization of every FP8 tensor
// (verifyshard.go's fp8Stats, a row-by-row implementation of its own): the
// largest error of each group is the largest of its tensors'.
func TestReportAgreesWithVerifyStats(t *testing.T) {
	rep, err := Verify(context.Background(), openSrc(t, miniSrc), miniRef, VerifyOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("verify: %v", rep.Violations)
	}
	r, _ := readReportFile(t, miniRef)
	maxByGroup := map[string]float64{}
	for _, ts := range rep.Tensors {
		g := model.K3Classifier().ParseName(ts.Name).Group.String()
		maxByGroup[g] = max(maxByGroup[g], ts.MaxAbs)
	}
	for _, g := range r.Groups {
		if g.MaxAbsError != maxByGroup[g.Group] {
			t.Errorf("group %s: max abs error %g, verify's dequantization gives %g", g.Group, g.MaxAbsError, maxByGroup[g.Group])
		}
	}
}

// The same input gives byte-identical reports (and manifests) with 1 or 4
// jobs, after a run stopped midway and resumed, and from workers + merge
// (TestWorkersAndMerge compares those trees with miniRef, report included).
func TestReportDeterministic(t *testing.T) {
	_, want := readReportFile(t, miniRef)
	for _, jobs := range []int{1, 4} {
		dst := filepath.Join(t.TempDir(), "out")
		if _, err := convertDir(miniSrc, dst, Options{}, ExecOptions{Jobs: jobs}); err != nil {
			t.Fatal(err)
		}
		if _, got := readReportFile(t, dst); !bytes.Equal(got, want) {
			t.Errorf("--jobs %d: another report", jobs)
		}
		sameTree(t, dst, miniRef)
	}
	// Stopped after some files (as a kill would, between files), then resumed.
	dst := filepath.Join(t.TempDir(), "out")
	p, c, err := planFor(miniSrc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	stop := &stopAfter{limit: p.Totals.SourceBytes / 3, cancel: cancel}
	if _, err := Execute(ctx, p, dst, ExecOptions{Jobs: 2, Progress: stop}); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, ReportName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a report after a stopped run: %v", err)
	}
	res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 3, Resume: true})
	if err != nil || !res.Finalized || len(res.Skipped) == 0 {
		t.Fatalf("resume: %v (skipped %d)", err, len(res.Skipped))
	}
	if _, got := readReportFile(t, dst); !bytes.Equal(got, want) {
		t.Error("resumed run: another report")
	}
	sameTree(t, dst, miniRef)
}

// stopAfter cancels a run once limit bytes of work are done.
type stopAfter struct {
	done   atomic.Int64
	limit  int64
	cancel func()
}

func (s *stopAfter) Start(int64) {}
func (s *stopAfter) Add(n int64) {
	if s.done.Add(n) >= s.limit {
		s.cancel()
	}
}

// verify recomputes the report and requires equality: a report changed in
// one value (its manifest entry made to agree) fails, naming group and field.
func TestVerifyRejectsTamperedReport(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out")
	copyTree(t, miniRef, dst)
	path := filepath.Join(dst, ReportName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	r.Groups[2].LossyBlocks--
	b2, err := r.marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b2, 0o644); err != nil {
		t.Fatal(err)
	}
	// The manifest agrees, so only the recomputation can tell.
	m, err := readManifest(dst)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := hashFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Files {
		if m.Files[i].Name == ReportName {
			m.Files[i].Size, m.Files[i].SHA256 = sum.Size, sum.SHA256
		}
	}
	if err := localDest(dst).writeManifest(m); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(context.Background(), openSrc(t, miniSrc), dst, VerifyOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := "quantization_report.json differs from the report recomputed from the source and the output: group " + r.Groups[2].Group + ": lossy_blocks is"
	if rep.OK || len(rep.Violations) != 1 || !strings.HasPrefix(rep.Violations[0], want) {
		t.Fatalf("verify of a tampered report: ok %v, violations %q, want one starting %q", rep.OK, rep.Violations, want)
	}
	// A removed report is missing from DST.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	rep, err = Verify(context.Background(), openSrc(t, miniSrc), dst, VerifyOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK {
		t.Fatal("verify without the report: OK")
	}
}

// A conversion that quantizes nothing (to BF16) writes no report; a lossless
// one writes lossless entries with null SQNR.
func TestReportLosslessAndAbsent(t *testing.T) {
	if _, err := os.Stat(filepath.Join(miniBF16(t), ReportName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("decode to BF16 wrote a report: %v", err)
	}
	_, dst, res := convertCase(t, 3)
	r, _ := readReportFile(t, dst)
	if res.Report == nil || !reflect.DeepEqual(res.Report, r) {
		t.Errorf("result's report %+v, file's %+v", res.Report, r)
	}
	e := r.Total
	if !e.Lossless || e.SQNR != nil || e.RelFro == nil || *e.RelFro != 0 || e.SumSqError != 0 || e.LossyBlocks != 0 || e.SumSq <= 0 {
		t.Errorf("MXFP4 round trip: %+v, want lossless with null SQNR and zero relative error", e)
	}
	if b, _ := json.Marshal(e); !bytes.Contains(b, []byte(`"sqnr_db":null`)) || !bytes.Contains(b, []byte(`"lossless":true`)) {
		t.Errorf("lossless entry as JSON: %s", b)
	}
}

// refTensor is one tensor's error as convert/testdata/report_ref/gen_report_ref.py
// computes it with torch from the source and the converted files (the
// report's JSON keys); the test sums them itself.
type refTensor struct {
	Name string `json:"name"`
	quant.ErrStats
}

// The report equals an independent computation (torch and safetensors on
// the device machine, from the files alone): counts and max abs error
// exactly, the sums to 1e-12 relative.
func TestReportMatchesTorchReference(t *testing.T) {
	for i, c := range reportCases {
		t.Run(c.name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "report_ref", c.name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var ref struct {
				Tensors []refTensor `json:"tensors"`
			}
			if err := json.Unmarshal(b, &ref); err != nil {
				t.Fatal(err)
			}
			_, dst, _ := convertCase(t, i)
			r, _ := readReportFile(t, dst)
			groups := map[string]*refTensor{}
			total := &refTensor{}
			tensors := map[string]int64{}
			for _, rt := range ref.Tensors {
				g := model.K3Classifier().ParseName(rt.Name).Group.String()
				if groups[g] == nil {
					groups[g] = &refTensor{Name: g}
				}
				for _, s := range []*refTensor{groups[g], total} {
					s.Blocks += rt.Blocks
					s.LossyBlocks += rt.LossyBlocks
					s.ZeroTiles += rt.ZeroTiles
					s.Saturated += rt.Saturated
					s.NaN += rt.NaN
					s.MaxAbs = max(s.MaxAbs, rt.MaxAbs)
					s.SumSq += rt.SumSq
					s.SumSqErr += rt.SumSqErr
				}
				tensors[g]++
			}
			if len(r.Groups) != len(groups) {
				t.Errorf("%d groups, the reference has %d", len(r.Groups), len(groups))
			}
			worst := 0.0
			defer func() { t.Logf("largest relative difference of a sum: %.3g", worst) }()
			check := func(what string, e ReportEntry, w *refTensor, n int64) {
				if w == nil {
					t.Errorf("%s: not in the reference", what)
					return
				}
				got := [...]int64{e.Tensors, e.Blocks, e.LossyBlocks, e.ZeroTiles, e.Saturated, e.NaN}
				want := [...]int64{n, w.Blocks, w.LossyBlocks, w.ZeroTiles, w.Saturated, w.NaN}
				if got != want {
					t.Errorf("%s: tensors, blocks, lossy, zero tiles, saturated, NaN %v; reference %v", what, got, want)
				}
				if e.MaxAbsError != w.MaxAbs {
					t.Errorf("%s: max abs error %g, reference %g", what, e.MaxAbsError, w.MaxAbs)
				}
				for _, s := range [][3]any{{"sum_sq", e.SumSq, w.SumSq}, {"sum_sq_error", e.SumSqError, w.SumSqErr}} {
					g, w := s[1].(float64), s[2].(float64)
					if w != 0 {
						worst = max(worst, math.Abs(g-w)/math.Abs(w))
					}
					if math.Abs(g-w) > 1e-12*math.Abs(w) {
						t.Errorf("%s: %s %.17g, reference %.17g", what, s[0], g, w)
					}
				}
			}
			for _, e := range r.Groups {
				check("group "+e.Group, e, groups[e.Group], tensors[e.Group])
			}
			check("total", r.Total, total, int64(len(ref.Tensors)))
		})
	}
}

// TestWriteReportInputs writes the report cases' sources and outputs under
// $K3CKPT_REPORT_INPUTS for gen_report_ref.py (run on the device machine).
func TestWriteReportInputs(t *testing.T) {
	out := os.Getenv("K3CKPT_REPORT_INPUTS")
	if out == "" {
		t.Skip("K3CKPT_REPORT_INPUTS not set")
	}
	copyTree(t, miniSrc, filepath.Join(out, "mini-src"))
	copyTree(t, miniBF16(t), filepath.Join(out, "mini-bf16"))
	for i, c := range reportCases {
		_, dst, _ := convertCase(t, i)
		copyTree(t, dst, filepath.Join(out, c.name))
	}
}

// The collector files a tensor measured twice once, with its later sums,
// in name order, and starts over empty after take; its accumulators are
// never handed out twice, within a file or across files.
func TestErrCollectorReplaces(t *testing.T) {
	var c errCollector
	const b = "model.layers.0.mlp.experts.0.down_proj.weight"
	const a = "model.layers.0.mlp.experts.0.up_proj.weight"
	seen := map[*quant.ErrStats]bool{}
	file := func(sums ...float64) *fileReport {
		for i, name := range []string{b, a, b} {
			s := c.tensor(name)
			if seen[s] {
				t.Fatalf("accumulator of %s handed out twice", name)
			}
			seen[s] = true
			*s = quant.ErrStats{Blocks: 1, SumSq: sums[i]}
		}
		return c.take(model.K3Classifier())
	}
	for range 2 * errChunk {
		r := file(1, 2, 4)
		if r.Total.Tensors != 2 || r.Total.Blocks != 2 || r.Total.SumSq != 2+4 {
			t.Fatalf("total %+v, want 2 tensors, 2 blocks, sum_sq 6 (the later %s)", r.Total, b)
		}
	}
	if r := c.take(model.K3Classifier()); r != nil {
		t.Errorf("a take after take: %+v, want nil", r)
	}
}
