package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// FP8 error bound checked per element by Verify: round to nearest in E4M3
// (3 mantissa bits) is off by at most 2^-4 of the value in the normal range
// and by half the subnormal step 2^-9 below it, in units of the block scale.
// boundSlack covers fp32 rounding of x·(1/sf) and of the dequantized product.
const (
	relBound   = 1.0 / 16
	subBound   = 1.0 / 1024
	boundSlack = 1 + 1.0/1024
)

// TensorStats are the dequantization errors of one FP8 tensor against its source.
type TensorStats struct {
	Name string `json:"name"`
	File string `json:"file"`
	// MaxAbs is max |x − fp8·scale| over the tensor (float64 arithmetic on
	// the fp32 source value and the fp32 dequantized value).
	MaxAbs float64 `json:"max_abs"`
	// MaxRelBlock is the largest, over 128×128 blocks, of the block's max
	// abs error divided by the block's max |x| (0 for all-zero blocks).
	MaxRelBlock float64 `json:"max_rel_block"`
	// SNRdB is 10·log10(Σx²/Σerr²); null when the error is exactly zero.
	SNRdB *float64 `json:"snr_db"`
	// OverBound counts elements whose error exceeds the FP8 rounding bound.
	OverBound int64 `json:"over_bound"`
	// NaN counts dequantized values that are NaN.
	NaN int64 `json:"nan"`
}

// VerifyReport is what Verify found; OK is false on any violation.
type VerifyReport struct {
	OK         bool          `json:"ok"`
	Plan       string        `json:"plan"`
	Recipe     string        `json:"recipe"`
	Format     Format        `json:"format"`
	ScaleFmt   string        `json:"scale_fmt"`
	Files      int           `json:"files"`
	Hashed     int64         `json:"bytes_hashed"`
	Copied     int           `json:"tensors_identical"`
	Quantized  int           `json:"tensors_fp8"`
	Violations []string      `json:"violations"`
	Tensors    []TensorStats `json:"tensors"`
}

func (r *VerifyReport) fail(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// VerifyOptions control Verify.
type VerifyOptions struct {
	// Jobs is how many files are checked at once (default 1).
	Jobs int
	// Progress, if set, receives bytes read.
	Progress Progress
	// MaxViolations caps the violations listed (default 100); more are counted.
	MaxViolations int
}

// Verify re-reads a finished conversion dst against its source src: every
// file's size and sha256 against the manifest; the structure against a fresh
// plan of the recorded recipe and convention (tensor names, dtypes, shapes and
// offsets of every shard, index, configs, side files); every copied tensor
// (the MXFP4 experts among them) byte for byte; and every FP8 tensor
// dequantized against its source, with error statistics and the per-element
// FP8 rounding bound. The error is for failures to read; violations are in
// the report (OK false).
func Verify(ctx context.Context, src *safetensors.Checkpoint, dst string, vo VerifyOptions) (*VerifyReport, error) {
	rep := &VerifyReport{}
	m, err := ReadManifest(dst)
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
	p, err := NewPlan(src, nil, r, Options{Format: m.Format, ScaleFmt: sf})
	if err != nil {
		return nil, err
	}
	if p.ID != m.Plan {
		rep.fail("manifest plan %.12s differs from the plan of this source with recipe %s, format %s, scale %s (%.12s): converted from another source or by another version",
			m.Plan, m.Recipe, m.Format, m.ScaleFmt, p.ID)
	}
	prog := vo.Progress
	if prog == nil {
		prog = noProgress{}
	}
	maxV := vo.MaxViolations
	if maxV == 0 {
		maxV = 100
	}
	jobs := max(vo.Jobs, 1)
	var mu sync.Mutex
	report := func(f func(*VerifyReport)) { mu.Lock(); f(rep); mu.Unlock() }

	// Every planned file must be in the manifest and nothing else.
	want := map[string]bool{}
	for _, u := range p.Units() {
		want[u.Name] = true
	}
	meta := metaFiles(p.Config, p.HFQuantConfig)
	for name := range meta {
		want[name] = true
	}
	want[safetensors.IndexName] = true
	for _, f := range m.Files {
		if !want[f.Name] {
			rep.fail("manifest lists %s, which this conversion does not produce", f.Name)
		}
		delete(want, f.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		rep.fail("%s is missing from the manifest", name)
	}
	// Configs and index must be exactly what the plan writes.
	for name, b := range meta {
		got, err := fsx.ReadFile(filepath.Join(dst, name), safetensors.MaxAuxSize)
		if err != nil {
			rep.fail("%s: %v", name, err)
		} else if !bytes.Equal(got, b) {
			rep.fail("%s differs from the planned %s", name, name)
		}
	}
	// The index must be the canonical one of the shards, which the codec
	// checks against the shards' headers when it opens DST.
	if out, err := safetensors.Open(dst); err != nil {
		rep.fail("%v", err)
	} else {
		out.Close()
		shards := make([]string, len(p.Files))
		for i, f := range p.Files {
			shards[i] = f.Name
		}
		var want bytes.Buffer
		if err := streamIndex(&want, dst, shards); err != nil {
			rep.fail("index: %v", err)
		} else if got, err := fsx.ReadFile(filepath.Join(dst, safetensors.IndexName), safetensors.MaxIndexSize); err != nil || !bytes.Equal(got, want.Bytes()) {
			rep.fail("%s is not the canonical index of the shards", safetensors.IndexName)
		}
	}
	var total int64
	for _, f := range m.Files {
		total += f.Size
	}
	for _, fp := range p.Files {
		total += fp.ReadBytes + fp.Size
	}
	prog.Start(total)

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(jobs)
	for _, rec := range m.Files {
		g.Go(func() error {
			buf := make([]byte, hashBufSize)
			got, err := hashFile(filepath.Join(dst, filepath.FromSlash(rec.Name)), buf, prog.Add)
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
	for _, a := range p.Aux {
		g.Go(func() error {
			buf := make([]byte, hashBufSize)
			s, err := hashFile(filepath.Join(p.SrcRoot, filepath.FromSlash(a.Name)), buf, nil)
			if err != nil {
				return err
			}
			if rec, ok := m.Lookup(a.Name); ok && rec.SHA256 != s.SHA256 {
				report(func(r *VerifyReport) { r.fail("%s differs from the source's", a.Name) })
			}
			return gctx.Err()
		})
	}
	for _, fp := range p.Files {
		g.Go(func() error {
			return verifyShard(gctx, p, fp, dst, prog, report)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	slices.SortFunc(rep.Tensors, func(a, b TensorStats) int {
		if a.File != b.File {
			return cmpString(a.File, b.File)
		}
		return cmpString(a.Name, b.Name)
	})
	slices.Sort(rep.Violations)
	if n := len(rep.Violations); n > maxV {
		rep.Violations = append(rep.Violations[:maxV], fmt.Sprintf("… and %d more", n-maxV))
	}
	rep.OK = len(rep.Violations) == 0
	return rep, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// verifyShard checks one output shard's header against the plan and each
// tensor against the source.
func verifyShard(ctx context.Context, p *Plan, fp *FilePlan, dst string, prog Progress, report func(func(*VerifyReport))) error {
	path := filepath.Join(dst, filepath.FromSlash(fp.Name))
	out, err := safetensors.OpenFile(path)
	if err != nil {
		report(func(r *VerifyReport) { r.fail("%s: %v", fp.Name, err) })
		return nil
	}
	defer out.Close()
	l, outs, err := fp.Layout()
	if err != nil {
		return err
	}
	hdr := make([]byte, l.DataStart)
	if out.DataStart != l.DataStart || out.Size != l.Size {
		report(func(r *VerifyReport) {
			r.fail("%s: header %d bytes, file %d bytes; planned %d and %d", fp.Name, out.DataStart, out.Size, l.DataStart, l.Size)
		})
		return nil
	}
	if _, err := out.ReaderAt().ReadAt(hdr, 0); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !bytes.Equal(hdr, l.Header) {
		report(func(r *VerifyReport) {
			r.fail("%s: header (tensor names, dtypes, shapes, offsets) differs from the plan", fp.Name)
		})
		return nil
	}
	a, b := make([]byte, hashBufSize), make([]byte, hashBufSize)
	for i, o := range outs {
		if err := ctx.Err(); err != nil {
			return err
		}
		srcT, _ := fp.Source.Lookup(o.Source)
		dstT := out.Tensors[i]
		switch o.Role {
		case RoleCopy:
			same, err := sameBytes(fp.Source.Section(srcT), out.Section(dstT), a, b, prog)
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", path, o.Name, err)
			}
			report(func(r *VerifyReport) {
				r.Copied++
				if !same {
					r.fail("%s: tensor %s differs from the source", fp.Name, o.Name)
				}
			})
		case RoleWeight:
			scaleT, ok := out.Lookup(p.Options.Format.ScaleName(o.Name))
			if !ok {
				report(func(r *VerifyReport) { r.fail("%s: tensor %s has no scale tensor", fp.Name, o.Name) })
				continue
			}
			st, err := fp8Stats(fp.Source.Section(srcT), srcT, out.Section(dstT), out.Section(scaleT), prog)
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", path, o.Name, err)
			}
			st.Name, st.File = o.Name, fp.Name
			report(func(r *VerifyReport) {
				r.Quantized++
				r.Tensors = append(r.Tensors, st)
				if st.OverBound > 0 || st.NaN > 0 {
					r.fail("%s: tensor %s: %d values beyond the FP8 rounding bound, %d NaN (max abs error %g)", fp.Name, o.Name, st.OverBound, st.NaN, st.MaxAbs)
				}
			})
		}
	}
	return nil
}

// sameBytes compares two readers of equal length chunk by chunk.
func sameBytes(x, y io.Reader, a, b []byte, prog Progress) (bool, error) {
	for {
		n, errA := io.ReadFull(x, a)
		if n > 0 {
			if _, err := io.ReadFull(y, b[:n]); err != nil {
				return false, nil // y is shorter
			}
			prog.Add(int64(2 * n))
			if !bytes.Equal(a[:n], b[:n]) {
				return false, nil
			}
		}
		switch errA {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			m, _ := y.Read(b[:1])
			return m == 0, nil
		default:
			return false, errA
		}
	}
}

// fp8Stats dequantizes an FP8 weight band by band and compares it with the
// source, in float64.
func fp8Stats(src *io.SectionReader, t safetensors.TensorInfo, q, scales *io.SectionReader, prog Progress) (TensorStats, error) {
	var st TensorStats
	elem, ok := quantElems[t.DType]
	if !ok || len(t.Shape) != 2 {
		return st, fmt.Errorf("%w: %s %v", ErrNotQuantizable, t.DType, t.Shape)
	}
	n, k, esz := t.Shape[0], t.Shape[1], int64(elem.Size())
	nb, kb := Blocks(n), Blocks(k)
	if nb*kb > MaxScaleBlocks || k > quant.MaxK {
		return st, fmt.Errorf("%w: shape %v", ErrNotQuantizable, t.Shape)
	}
	if q.Size() != n*k || scales.Size() != 4*nb*kb {
		return st, fmt.Errorf("FP8 tensor of %d bytes and %d scale bytes for shape %v", q.Size(), scales.Size(), t.Shape)
	}
	sb := make([]byte, 4*nb*kb)
	if _, err := scales.ReadAt(sb, 0); err != nil {
		return st, err
	}
	// One row at a time keeps memory at O(K) whatever the tensor's size.
	row := make([]byte, k*esz)
	qrow := make([]byte, k)
	blockAbs := make([]float64, kb)
	blockMax := make([]float64, kb)
	var sumX2, sumE2 float64
	for r := range n {
		if _, err := src.ReadAt(row, r*k*esz); err != nil {
			return st, err
		}
		if _, err := q.ReadAt(qrow, r*k); err != nil {
			return st, err
		}
		prog.Add(int64(len(row) + len(qrow)))
		b := r / BlockSize
		for c := range k {
			x := float64(sourceValue(row, c, elem))
			if math.IsNaN(x) || math.IsInf(x, 0) {
				continue // zeroed under NonFiniteZero; nothing to compare with
			}
			s := math.Float32frombits(binary.LittleEndian.Uint32(sb[4*(b*kb+c/BlockSize):]))
			d := float64(float32(quant.E4M3ToF32(qrow[c]) * s)) // the fp32 product engines compute
			if math.IsNaN(d) {
				st.NaN++
				continue
			}
			e := math.Abs(x - d)
			st.MaxAbs = max(st.MaxAbs, e)
			j := c / BlockSize
			blockAbs[j] = max(blockAbs[j], e)
			blockMax[j] = max(blockMax[j], math.Abs(x))
			sumX2 += x * x
			sumE2 += e * e
			if e > (relBound*math.Abs(x)+subBound*float64(s))*boundSlack {
				st.OverBound++
			}
		}
		if (r+1)%BlockSize == 0 || r == n-1 {
			for j := range kb {
				if blockMax[j] > 0 {
					st.MaxRelBlock = max(st.MaxRelBlock, blockAbs[j]/blockMax[j])
				}
				blockAbs[j], blockMax[j] = 0, 0
			}
		}
	}
	if sumE2 > 0 {
		snr := 10 * math.Log10(sumX2/sumE2)
		st.SNRdB = &snr
	}
	return st, nil
}

func sourceValue(row []byte, c int64, e quant.Elem) float32 {
	switch e {
	case quant.BF16:
		return quant.BF16ToF32(binary.LittleEndian.Uint16(row[2*c:]))
	case quant.F16:
		return quant.F16ToF32(binary.LittleEndian.Uint16(row[2*c:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(row[4*c:]))
}

// WriteJSON writes the report as indented JSON.
func (r *VerifyReport) WriteJSON(w io.Writer) error {
	if r.Violations == nil {
		r.Violations = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
