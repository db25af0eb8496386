package convert

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// tensorStats are the dequantization errors of one FP8 tensor against its
// source: a report of the format's accuracy, not the check.
type tensorStats struct {
	Name string `json:"name"`
	File string `json:"file"`
	// MaxAbs is max |x − fp8·scale| (float64 on the fp32 source and dequantized values).
	MaxAbs float64 `json:"max_abs"`
	// MaxRelBlock is the largest block max abs error over the block's max |x|.
	MaxRelBlock float64 `json:"max_rel_block"`
	// SNRdB is 10·log10(Σx²/Σerr²); null when the error is exactly zero.
	SNRdB *float64 `json:"snr_db"`
	// OverBound counts elements whose error exceeds the FP8 rounding bound.
	OverBound int64 `json:"over_bound"`
	// NaN counts dequantized values that are NaN (outside zero-scale blocks).
	NaN int64 `json:"nan"`
	// ZeroScaleBlocks counts blocks with scale 0 (ModelOpt's NaN-coded
	// all-zero tiles, as NVIDIA writes them; not compared).
	ZeroScaleBlocks int64 `json:"zero_scale_blocks"`
}

// VerifyReport is what Verify found; OK is false on any violation.
type VerifyReport struct {
	OK        bool         `json:"ok"`
	Plan      string       `json:"plan"`
	Recipe    string       `json:"recipe"`
	Format    model.Format `json:"format"`
	ScaleFmt  string       `json:"scale_fmt"`
	Files     int          `json:"files"`
	Hashed    int64        `json:"bytes_hashed"`
	Copied    int          `json:"tensors_identical"`
	Quantized int          `json:"tensors_fp8"`
	Experts   ExpertsMode  `json:"experts"`
	Numerics  string       `json:"numerics"`
	// NVFP4 counts the expert projections re-cast from the source and
	// compared bit for bit; Cast is that re-cast's block counts.
	NVFP4 int             `json:"projections_nvfp4"`
	Cast  quant.CastStats `json:"nvfp4_cast"`
	// ZeroScaleBlocks counts FP8 blocks with scale 0 and NaN codes (ModelOpt's
	// all-zero tiles): reported, not violations.
	ZeroScaleBlocks int64 `json:"fp8_zero_scale_blocks"`
	// Decoded and Packed count the tensors decoded or packed again from the
	// source and compared bit for bit; Pack is that packing's counts.
	Decoded    int             `json:"tensors_decoded_bf16"`
	Packed     int             `json:"tensors_packed_mxfp4"`
	Pack       quant.PackStats `json:"mxfp4_pack"`
	Violations []string        `json:"violations"`
	Tensors    []tensorStats   `json:"tensors"`
	// Report is quantization_report.json as recomputed from SRC and DST
	// (nil when the conversion quantized nothing); DST's must equal it.
	Report *Report `json:"quantization_report,omitempty"`
}

func (r *VerifyReport) fail(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// VerifyOptions control Verify.
type VerifyOptions struct {
	// Jobs is how many files are checked at once (default 1).
	Jobs int
	// NonFinite is the conversion's policy when the manifest does not record
	// it (by default a NaN or Inf in a weight to quantize is a violation).
	NonFinite nonFinitePolicy
	// Progress, if set, receives bytes read.
	Progress progress
}

// maxViolations caps the violations listed; more are counted.
const maxViolations = 100

// Verify re-reads a finished conversion dst against its source src: DST holds
// exactly the manifest's files (no links), each of the recorded size and
// sha256; every shard's header, the index, configs and side files match a
// fresh plan of the recorded options; copied tensors are the source's bytes,
// every other one bit for bit a fresh conversion, with FP8 error statistics.
// The error is for failures to read; violations are in the report.
func Verify(ctx context.Context, src *safetensors.Checkpoint, dst string, vo VerifyOptions) (*VerifyReport, error) {
	rep := &VerifyReport{}
	d, err := openDestination(ctx, dst, "", 0)
	if err != nil {
		return nil, err
	}
	m, err := d.readManifest()
	if err != nil {
		return nil, fmt.Errorf("verify %s: not a finished conversion: %w", dst, err)
	}
	rep.Plan, rep.Recipe, rep.Format, rep.ScaleFmt = m.Plan, m.Recipe, m.Format, m.ScaleFmt
	r, err := Lookup(m.Recipe)
	if err != nil {
		return nil, err
	}
	sf, err := ParseScaleFmt(m.ScaleFmt)
	if err != nil {
		return nil, err
	}
	opts := Options{Format: m.Format, ScaleFmt: sf, NonFinite: vo.NonFinite}
	if m.NonFinite != "" {
		opts.NonFinite, err = parseNonFinitePolicy(m.NonFinite)
	}
	if m.Experts != "" && err == nil {
		opts.Experts, err = parseEnum[expertsModeSet](m.Experts)
	}
	if m.Numerics != "" && err == nil {
		opts.Numerics, err = ParseNumerics(m.Numerics)
	}
	if err != nil {
		return nil, fmt.Errorf("verify %s: manifest: %w", dst, err)
	}
	rep.Experts, rep.Numerics = opts.Experts, opts.Numerics.String()
	p, err := NewPlan(src, nil, r, opts)
	if err != nil {
		return nil, err
	}
	if p.ID != m.Plan {
		rep.fail("manifest plan %.12s differs from the plan of this source with recipe %s, format %s, scale %s (%.12s): converted from another source or by another version",
			m.Plan, m.Recipe, m.Format, m.ScaleFmt, p.ID)
	}
	prog := meter{vo.Progress}
	var mu sync.Mutex
	report := func(f func(*VerifyReport)) { mu.Lock(); f(rep); mu.Unlock() }

	checkFileSet(rep, p, m)
	regular, err := checkTree(rep, d, m)
	if err != nil {
		return nil, err
	}
	checkMeta(ctx, rep, p, d)

	var total int64
	for _, f := range m.Files {
		total += f.Size
	}
	for _, fp := range p.Files {
		total += fp.ReadBytes + fp.Layout.Size
	}
	prog.start(total)

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(vo.Jobs, 1))
	for _, rec := range m.Files {
		if !regular[rec.Name] {
			continue // reported by checkTree
		}
		g.Go(func() error {
			got, err := d.hash(rec, prog.add)
			if err != nil {
				report(func(r *VerifyReport) { r.fail("%s: %v", rec.Name, err) })
				return gctx.Err()
			}
			report(func(r *VerifyReport) {
				r.Files++
				r.Hashed += got.Size
				if got.Size != rec.Size || got.SHA256 != rec.SHA256 {
					r.fail("%s: size %d sha256 %s, manifest says %d %s", rec.Name, got.Size, got.SHA256, rec.Size, rec.SHA256)
				}
			})
			return gctx.Err()
		})
	}
	var root *fsx.Root
	if p.remote == nil {
		if root, err = fsx.NewRoot(p.SrcRoot); err != nil {
			return nil, err
		}
	}
	for _, a := range p.Aux {
		g.Go(func() error {
			s, err := hashSourceAux(gctx, p, root, a)
			if err != nil {
				return err
			}
			if rec, ok := m.lookup(a.Name); ok && rec.SHA256 != s.SHA256 {
				report(func(r *VerifyReport) { r.fail("%s differs from the source's", a.Name) })
			}
			return gctx.Err()
		})
	}
	fileReps := make([]*fileReport, len(p.Files))
	for i, fp := range p.Files {
		if !regular[fp.Name] {
			continue
		}
		g.Go(func() error {
			return verifyShard(gctx, p, fp, d, prog, report, &fileReps[i])
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if p.reports() {
		rep.Report = buildReport(fileReps)
		if len(rep.Violations) == 0 { // else the recomputation may be partial, and the violations say why
			checkReport(rep, d)
		}
	}
	slices.SortFunc(rep.Tensors, func(a, b tensorStats) int {
		return cmp.Or(strings.Compare(a.File, b.File), strings.Compare(a.Name, b.Name))
	})
	slices.Sort(rep.Violations)
	if n := len(rep.Violations); n > maxViolations {
		rep.Violations = append(rep.Violations[:maxViolations], fmt.Sprintf("… and %d more", n-maxViolations))
	}
	rep.OK = len(rep.Violations) == 0
	if rep.Violations == nil {
		rep.Violations = []string{} // JSON [], not null
	}
	return rep, nil
}

// checkFileSet requires the manifest to list every planned file and nothing else.
func checkFileSet(rep *VerifyReport, p *Plan, m *dstManifest) {
	want := map[string]bool{safetensors.IndexName: true}
	for _, u := range p.units() {
		want[u.Name] = true
	}
	for name := range metaFiles(p.Config, p.HFQuantConfig) {
		want[name] = true
	}
	if p.reports() {
		want[ReportName] = true
	}
	for _, f := range m.Files {
		if !want[f.Name] {
			rep.fail("manifest lists %s, which this conversion does not produce", f.Name)
		}
		delete(want, f.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		rep.fail("%s is missing from the manifest", name)
	}
}

// checkTree lists DST: every entry must be a regular file the manifest lists
// (or the manifest) or a directory on the way to one. An engine or user would
// pick a stray file up with the checkpoint (custom code, a second quantization
// config, another shard), and a link could make verify hash something outside
// DST. It returns the listed names found as regular files.
func checkTree(rep *VerifyReport, d *destination, m *dstManifest) (map[string]bool, error) {
	regular := map[string]bool{}
	found := func(name, what string, typ fs.FileMode) {
		_, listed := m.lookup(name)
		switch {
		case name == ManifestName, name == dirlock.LockName && !d.remote(): // the lock of a run in progress is no file of the output
		case !listed:
			rep.fail("%s: stray %s in the destination: not part of the conversion", name, what)
		case !typ.IsRegular():
			rep.fail("%s: not a regular file (%s) in the destination", name, typ)
		default:
			regular[name] = true
		}
	}
	if d.remote() {
		files, err := d.bucket.List(d.ctx)
		if err != nil {
			return nil, fmt.Errorf("verify %s: %w", d.name, err)
		}
		for _, f := range files {
			found(f.Name, "object", 0)
		}
		return regular, nil
	}
	err := filepath.WalkDir(d.dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(d.dir, path)
		if err != nil || rel == "." || e.IsDir() {
			return err
		}
		found(filepath.ToSlash(rel), "file", e.Type())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", d.dir, err)
	}
	return regular, nil
}

// checkMeta requires the configs to be what the plan writes, the output to
// open as a checkpoint (the codec checks its index against the shards'
// headers) and the index to be the canonical one: of the written shards'
// headers for a local DST, of the planned layouts for a bucket.
func checkMeta(ctx context.Context, rep *VerifyReport, p *Plan, d *destination) {
	for name, b := range metaFiles(p.Config, p.HFQuantConfig) {
		got, err := d.readFile(name)
		if err != nil {
			rep.fail("%s: %v", name, err)
		} else if !bytes.Equal(got, b) {
			rep.fail("%s differs from the planned %s", name, name)
		}
	}
	out, err := safetensors.OpenWith(ctx, d.name, safetensors.OpenOptions{})
	if err != nil {
		rep.fail("%v", err)
		return
	}
	out.Close()
	var want bytes.Buffer
	if d.remote() {
		err = plannedIndex(p)(&want)
	} else {
		err = streamIndex(&want, d.dir, p.state().Shards)
	}
	if err != nil {
		rep.fail("index: %v", err)
	} else if got, err := d.readFile(safetensors.IndexName); err != nil || !bytes.Equal(got, want.Bytes()) {
		rep.fail("%s is not the canonical index of the shards", safetensors.IndexName)
	}
}
