package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/x448/float16"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// FP8 error bound checked per element by fp8Stats: round to nearest in E4M3
// is off by at most 2^-4 of the value in the normal range and by half the
// subnormal step 2^-9 below it, in units of the block scale; boundSlack covers
// fp32 rounding of x·(1/sf) and of the dequantized product. ModelOpt's cast
// rounds x/scale to BF16 first: (1 + 2^-8)·2^-4 + 2^-8, with room for slack.
const (
	relBoundModelOpt = 1.0/16 + 1.0/256 + 1.0/2048
	relBound         = 1.0 / 16
	subBound         = 1.0 / 1024
	boundSlack       = 1 + 1.0/1024
)

// verifyShard checks one output shard against its plan: the header byte for
// byte, then every step's output against what the step makes from the source
// under the plan's options: a copy run the source's bytes, every other step
// exactly what it writes.
func verifyShard(ctx context.Context, p *Plan, fp *filePlan, d *destination, prog meter, report func(func(*VerifyReport)), errs **fileReport) error {
	path := d.path(fp.Name)
	violation := func(format string, args ...any) error {
		report(func(r *VerifyReport) { r.fail(format, args...) })
		return nil
	}
	out, err := d.openShard(ctx, fp.Name)
	if err != nil {
		return violation("%s: %v", fp.Name, err)
	}
	defer out.Close()
	l := fp.Layout
	if out.DataStart != l.DataStart || out.Size != l.Size {
		return violation("%s: header %d bytes, file %d bytes; planned %d and %d", fp.Name, out.DataStart, out.Size, l.DataStart, l.Size)
	}
	hdr := make([]byte, l.DataStart)
	if _, err := out.ReaderAt().ReadAt(hdr, 0); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	planned, err := l.HeaderBytes()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !bytes.Equal(hdr, planned) {
		return violation("%s: header (tensor names, dtypes, shapes, offsets) differs from the plan", fp.Name)
	}
	if p.remote != nil {
		// Small sequential reads, a request each without read-ahead (see openShard).
		src, err := safetensors.ReadHeader(newReadAhead(fp.Source.ReaderAt(), fp.Source.Size), fp.Source.Size, fp.Source.Path)
		if err != nil {
			return fmt.Errorf("source %s: %w", fp.Source.Path, err)
		}
		remoteFP := *fp
		remoteFP.Source = src
		fp = &remoteFP
	}
	// Most shards of a small checkpoint are far below hashBufSize.
	buf := make([]byte, min(int64(hashBufSize), max(out.Size-out.DataStart, 1)))
	var s scratch
	defer func() { *errs = s.errs.take(p.Options.classifier()) }()
	for _, st := range fp.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		t := out.Tensors[st.First]
		switch st.Kind {
		case stepCopy:
			for i := st.First; i <= st.Last; i++ {
				t := l.Tensors[i]
				from := st.Src + t.Begin - l.Tensors[st.First].Begin
				c := &diffStream{out: out.Section(out.Tensors[i]), diff: -1, prog: prog}
				if _, err := io.CopyBuffer(c, io.NewSectionReader(fp.Source.ReaderAt(), from, t.Size()), buf); err != nil {
					return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
				}
				prog.add(t.Size())
				report(func(r *VerifyReport) {
					r.Copied++
					if c.diff >= 0 || c.off != c.out.Size() {
						r.fail("%s: tensor %s differs from the source", fp.Name, t.Name)
					}
				})
			}
		case stepNVFP4:
			v, cs, err := s.verifyNVFP4(ctx, fp.Source, st, out.Section(t))
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
			}
			prog.add(st.Len + t.Size())
			report(func(r *VerifyReport) {
				if st.Part == partCodes {
					r.NVFP4++
					r.Cast = r.Cast.Add(cs)
				}
				if v != "" {
					r.fail("%s: tensor %s: %s", fp.Name, t.Name, v)
				}
			})
		case stepDecode, stepPack:
			s.xs.stats = xfStats{} // this step's counts alone
			c := &diffStream{out: out.Section(t), diff: -1, prog: prog}
			if err := s.runTransform(ctx, fp.Source.ReaderAt(), fp.Source, st, c.emit, prog); err != nil {
				return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
			}
			if c.diff < 0 && c.off != c.out.Size() {
				c.diff = min(c.off, c.out.Size())
			}
			got := s.xs.stats
			report(func(r *VerifyReport) {
				r.Decoded += got.decoded
				r.Packed += got.packed
				r.Pack = r.Pack.Add(got.pack)
				if c.diff >= 0 {
					r.fail("%s: tensor %s differs from a fresh %s of %s at byte %d", fp.Name, t.Name, st.Kind, st.xf.codes.Name, c.diff)
				}
			})
		case stepCodes:
			scales := out.Section(out.Tensors[st.Last])
			s.measure = s.errs.tensor(st.Source.Name)
			v, err := s.requantized(ctx, fp.Source, st.Source, p.Options, out.Section(t), scales)
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
			}
			var stats tensorStats
			sec, view, _, err := s.weightSource(fp.Source.ReaderAt(), fp.Source, st.Source, meter{})
			if err == nil {
				stats, err = fp8Stats(sec, view, out.Section(t), scales, p.Options.Numerics, prog)
			}
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
			}
			stats.Name, stats.File = t.Name, fp.Name
			report(func(r *VerifyReport) {
				r.Quantized++
				r.ZeroScaleBlocks += stats.ZeroScaleBlocks
				r.Tensors = append(r.Tensors, stats)
				if v != "" {
					r.fail("%s: tensor %s: %s", fp.Name, t.Name, v)
				}
				if stats.OverBound > 0 || stats.NaN > 0 {
					r.fail("%s: tensor %s: %d values beyond the FP8 rounding bound, %d NaN (max abs error %g)", fp.Name, t.Name, stats.OverBound, stats.NaN, stats.MaxAbs)
				}
			})
		}
	}
	return nil
}

// diffStream compares the bytes a step makes, in order, with output tensor
// out: diff is the offset of the first differing byte (-1: none), got and want
// the bytes there; off is how many were made.
type diffStream struct {
	out       *io.SectionReader
	buf       []byte
	off, diff int64
	got, want byte
	prog      meter // counts the output bytes compared
}

func (c *diffStream) emit(b []byte) error {
	if c.diff < 0 {
		c.buf = bufs.Grow(c.buf, len(b))
		n, err := c.out.ReadAt(c.buf, c.off)
		if err != nil && err != io.EOF {
			return fmt.Errorf("read at %d: %w", c.off, err)
		}
		if i := firstDiff(c.buf[:n], b[:n]); i >= 0 {
			c.diff, c.got, c.want = c.off+int64(i), c.buf[i], b[i]
		}
		c.prog.add(int64(len(b)))
	}
	c.off += int64(len(b))
	return nil
}

func (c *diffStream) Write(b []byte) (int, error) { return len(b), c.emit(b) }

// requantized quantizes the source weight again and compares its FP8 codes,
// then its block scales, with the output's: a violation ("" when
// bit-identical), or an error for failures to read.
func (s *scratch) requantized(ctx context.Context, sf *safetensors.File, t safetensors.TensorInfo, opts Options, codes, scales *io.SectionReader) (string, error) {
	c := &diffStream{out: codes, diff: -1}
	_, err := s.quantize(ctx, sf.ReaderAt(), sf, t, opts, c.emit, nil, meter{})
	var nf *quant.BlockError
	switch {
	case errors.Is(err, errNonFinite) || errors.As(err, &nf) && nf.Err == quant.ErrNonFinite:
		return fmt.Sprintf("the source holds a non-finite value, which convert refuses (%v); verify with --nonfinite zero if it was converted so", err), nil
	case err != nil:
		return "", err
	case c.off != codes.Size():
		return fmt.Sprintf("FP8 tensor of %d bytes, a fresh quantization gives %d", codes.Size(), c.off), nil
	case c.diff >= 0:
		return fmt.Sprintf("FP8 codes differ from a fresh quantization of the source (first at element %d)", c.diff), nil
	}
	if scales.Size() != int64(len(s.sbytes)) {
		return fmt.Sprintf("scale tensor of %d bytes, a fresh quantization gives %d", scales.Size(), len(s.sbytes)), nil
	}
	got := bufs.Grow(c.buf, len(s.sbytes))
	if _, err := scales.ReadAt(got, 0); err != nil {
		return "", fmt.Errorf("read scales: %w", err)
	}
	if i := firstDiff(got, s.sbytes); i >= 0 {
		j := i / 4 * 4
		return fmt.Sprintf("block scale %d is %g, a fresh quantization gives %g", i/4,
			math.Float32frombits(binary.LittleEndian.Uint32(got[j:])), math.Float32frombits(binary.LittleEndian.Uint32(s.sbytes[j:]))), nil
	}
	return "", nil
}

// firstDiff is the index of the first byte where a and b (of equal length) differ, or -1.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// fp8Stats dequantizes an FP8 weight band by band and compares it with the
// source, in float64.
func fp8Stats(src *io.SectionReader, t safetensors.TensorInfo, q, scales *io.SectionReader, num quant.Numerics, prog meter) (tensorStats, error) {
	var st tensorStats
	elem, ok := quantElems[t.DType]
	if !ok || len(t.Shape) != 2 {
		return st, fmt.Errorf("%w: %s %v", errNotQuantizable, t.DType, t.Shape)
	}
	n, k, esz := t.Shape[0], t.Shape[1], int64(elem.Size())
	nb, kb := blocks(n), blocks(k)
	if nb*kb > maxScaleBlocks || k > quant.MaxK {
		return st, fmt.Errorf("%w: shape %v", errNotQuantizable, t.Shape)
	}
	if q.Size() != n*k || scales.Size() != 4*nb*kb {
		return st, fmt.Errorf("FP8 tensor of %d bytes and %d scale bytes for shape %v", q.Size(), scales.Size(), t.Shape)
	}
	sb := make([]byte, 4*nb*kb)
	if _, err := scales.ReadAt(sb, 0); err != nil {
		return st, err
	}
	rel := relBound
	if num == quant.ModelOpt {
		rel = relBoundModelOpt
		for i := 0; i < len(sb); i += 4 {
			if binary.LittleEndian.Uint32(sb[i:])&0x7FFFFFFF == 0 {
				st.ZeroScaleBlocks++
			}
		}
	}
	// Bands of at most 1 MiB (or one row) keep memory at O(K) whatever the
	// tensor's size, in few reads.
	band := int64(1)
	if k > 0 {
		band = max(1, min(n, (1<<20)/(k*esz)))
	}
	rows := make([]byte, band*k*esz)
	qrows := make([]byte, band*k)
	blockAbs := make([]float64, kb)
	blockMax := make([]float64, kb)
	var sumX2, sumE2 float64
	for r := range n {
		if r%band == 0 {
			m := min(band, n-r)
			if _, err := src.ReadAt(rows[:m*k*esz], r*k*esz); err != nil {
				return st, err
			}
			if _, err := q.ReadAt(qrows[:m*k], r*k); err != nil {
				return st, err
			}
			prog.add(m * (k*esz + k))
		}
		row := rows[r%band*k*esz:][:k*esz]
		qrow := qrows[r%band*k:][:k]
		b := r / blockSize
		for c := range k {
			x := float64(sourceValue(row, c, elem))
			if math.IsNaN(x) || math.IsInf(x, 0) {
				continue // zeroed under NonFiniteZero; nothing to compare with
			}
			s := math.Float32frombits(binary.LittleEndian.Uint32(sb[4*(b*kb+c/blockSize):]))
			if s == 0 && num == quant.ModelOpt {
				continue // a zero-scale block: NaN codes, counted above
			}
			d := float64(float32(quant.E4M3ToF32(qrow[c]) * s)) // the fp32 product engines compute
			if math.IsNaN(d) {
				st.NaN++
				continue
			}
			e := math.Abs(x - d)
			st.MaxAbs = max(st.MaxAbs, e)
			j := c / blockSize
			blockAbs[j] = max(blockAbs[j], e)
			blockMax[j] = max(blockMax[j], math.Abs(x))
			sumX2 += x * x
			sumE2 += e * e
			if e > (rel*math.Abs(x)+subBound*float64(s))*boundSlack {
				st.OverBound++
			}
		}
		if (r+1)%blockSize == 0 || r == n-1 {
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
		return float16.Frombits(binary.LittleEndian.Uint16(row[2*c:])).Float32()
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(row[4*c:]))
}

// verifyNVFP4 casts the source of a StepNVFP4 again, band by band, and
// compares the tensor it writes with the output's bytes. It returns a
// violation ("" when bit-identical) naming the first differing block, and
// for the code step the cast's block counts; the error is for failures to
// read.
func (s *scratch) verifyNVFP4(ctx context.Context, sf *safetensors.File, st step, out *io.SectionReader) (string, quant.CastStats, error) {
	var cs quant.CastStats
	if st.Part == partInputScale {
		v, err := sameScalar(out, inputScaleOne, "input_scale bytes %x, NVIDIA's converter writes F32 1.0 (%x)")
		return v, cs, err
	}
	kmax, err := s.kmaxOf(ctx, sf.ReaderAt(), sf, st.Cast, meter{})
	if err != nil {
		return "", cs, err
	}
	if st.Part == partScale2 {
		want, err := scale2Bytes(kmax)
		if err != nil {
			return "", cs, err
		}
		v, err := sameScalar(out, want, "weight_scale_2 bytes %x, the cast gives %x = 2^(K_max − 8) with K_max %d", kmax)
		return v, cs, err
	}
	c := &diffStream{out: out, diff: -1}
	if st.Part == partCodes {
		s.measure = s.errs.tensor(st.Cast.Packed.Name)
		cs, err = s.castNVFP4(ctx, sf.ReaderAt(), sf, st.Cast, kmax, c.emit, nil, meter{})
	} else {
		_, err = s.castNVFP4(ctx, sf.ReaderAt(), sf, st.Cast, kmax, nil, c.emit, meter{})
	}
	if err != nil {
		return "", cs, err
	}
	k := int64(st.Cast.k())
	// A row of k/2 code bytes, 8 per 16-element block, or of k/16 scales.
	row, block, what := c.diff/(k/2), c.diff%(k/2)/(quant.NVFP4GroupSize/2), "NVFP4 codes"
	if st.Part == partScales {
		row, block, what = c.diff/(k/quant.NVFP4GroupSize), c.diff%(k/quant.NVFP4GroupSize), "E4M3 scales"
	}
	switch {
	case c.diff >= 0:
		return fmt.Sprintf("%s differ from a fresh cast of %s (K_max %d): first at row %d, 16-element block %d (byte 0x%02x, the cast gives 0x%02x)",
			what, st.Cast.Packed.Name, kmax, row, block, c.got, c.want), cs, nil
	case c.off != out.Size():
		return fmt.Sprintf("%s of %d bytes, a fresh cast gives %d", what, out.Size(), c.off), cs, nil
	}
	return "", cs, nil
}

// sameScalar compares a scalar tensor's bytes with want; a difference is
// worded by format, given the bytes found, want and args.
func sameScalar(out *io.SectionReader, want []byte, format string, args ...any) (string, error) {
	got := make([]byte, len(want))
	if _, err := out.ReadAt(got, 0); err != nil {
		return "", fmt.Errorf("read at 0: %w", err)
	}
	if bytes.Equal(got, want) {
		return "", nil
	}
	return fmt.Sprintf(format, append([]any{got, want}, args...)...), nil
}
