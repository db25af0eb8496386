package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// xfStats counts what a job's transform steps met.
type xfStats struct {
	decoded int   // tensors decoded to BF16
	nan     int64 // NaN BF16 values written (NaN codes, or NaN × 0 of ModelOpt's zero tiles, as torch computes them)
	packed  int   // BF16 tensors packed to MXFP4
	pack    quant.PackStats
	repack  quant.RepackStats // MXFP4 groups decoded, and those packing would not give back byte for byte
}

// transformStep plans the step writing output i by the transform o.xf.
func transformStep(sf *safetensors.File, o outputTensor, i int) (step, error) {
	spec := o.xf
	x := &transform{kind: spec.kind, part: o.part}
	sources := []*safetensors.TensorInfo{&x.codes, &x.scales, &x.scale2}
	for j, name := range spec.sources {
		if j == 1 && spec.foreign != nil {
			// Read with the plan from the file that holds it.
			x.scales, x.xscale = spec.foreign.info, spec.foreign.data
			continue
		}
		t, ok := sf.Lookup(name)
		if !ok {
			return step{}, fmt.Errorf("file %s: tensor %s: %w in the source", sf.Path, name, safetensors.ErrNotFound)
		}
		*sources[j] = t
	}
	x.n, x.k = x.codes.Shape[0], x.codes.Shape[1]
	if x.kind == xfMXFP4 || x.kind == xfNVFP4 {
		x.k *= 2 // two E2M1 codes a byte
	}
	kind := stepDecode
	if x.kind == xfPack {
		kind = stepPack
	}
	return step{Kind: kind, First: i, Last: i, Src: sf.DataStart + x.codes.Begin, Len: x.codes.Size(), xf: x}, nil
}

// markHeld pairs each BF16 weight's two pack steps: the first keeps the part
// the second writes (one read of the weight) while the parts held fit.
func markHeld(steps []step) {
	first := map[string]*transform{}
	var held int64 // the parts reserved by first steps whose second is still to come
	for i := range steps {
		x := steps[i].xf
		if steps[i].Kind != stepPack {
			continue
		}
		f, ok := first[x.codes.Name]
		if !ok {
			first[x.codes.Name] = x
			if held+packPartSize(x, 1-x.part) <= heldCodesBudget {
				held += packPartSize(x, 1-x.part)
				x.held = true // reserved: moved to the second step below
			}
			continue
		}
		f.pair, x.pair = x, f
		if f.held {
			f.held, x.held = false, true
			held -= packPartSize(x, x.part)
		}
	}
}

// packPartSize is the byte size of part p of x's MXFP4 output.
func packPartSize(x *transform, p int) int64 {
	if p == 0 {
		return x.n * x.k / 2
	}
	return x.n * x.k / quant.MXGroupSize
}

// xfRows is how many rows one chunk of a transform holds: a BF16 chunk of
// about TileBytes, never across a 128-row scale block of an FP8 source.
func xfRows(x *transform, r0 int64) int64 {
	m := max(1, int64(tileBytes)/(2*x.k))
	if x.kind == xfFP8 {
		m = min(m, blockSize-r0%blockSize)
	}
	return min(m, x.n-r0)
}

// xfReads calls read with each (tensor, offset, length) the step reads, in
// its order; a pack step whose part is held reads nothing.
func xfReads(x *transform, read func(t safetensors.TensorInfo, off, n int64)) {
	if x.kind == xfPack && x.held {
		return
	}
	if x.xscale != nil { // the scales come with the plan, not from the file
		inner := read
		read = func(t safetensors.TensorInfo, off, n int64) {
			if t.Name != x.scales.Name {
				inner(t, off, n)
			}
		}
	}
	switch {
	case x.kind == xfNVFP4:
		read(x.scale2, 0, 4)
	case x.packedScales():
		read(x.scales, 0, x.scales.Size())
	}
	for r0 := int64(0); r0 < x.n; {
		m := xfRows(x, r0)
		switch x.kind {
		case xfFP8:
			if !x.packedScales() {
				kb := blocks(x.k) * x.scales.DType.Bits() / 8
				read(x.scales, r0/blockSize*kb, kb)
			}
			read(x.codes, r0*x.k, m*x.k)
		case xfMXFP4, xfNVFP4:
			g := x.group()
			read(x.scales, r0*x.k/g, m*x.k/g)
			read(x.codes, r0*x.k/2, m*x.k/2)
		case xfPack:
			read(x.codes, r0*2*x.k, m*2*x.k)
		}
		r0 += m
	}
}

// packedScales reports whether x's FP8 block scales are DeepGEMM's packed
// UE8M0 buffer.
func (x *transform) packedScales() bool { return x.kind == xfFP8 && x.scales.DType == safetensors.I32 }

// group is the elements per scale of FP4 codes.
func (x *transform) group() int64 {
	if x.kind == xfNVFP4 {
		return quant.NVFP4GroupSize
	}
	return quant.MXGroupSize
}

// xfScratch is a job's buffers for transform steps.
type xfScratch struct {
	codes, scales, out, out2 []byte
	grid                     []float32
	held                     map[string][]byte // pack parts kept for the pair's second step
	stats                    xfStats
}

// runTransform carries out a StepDecode or StepPack, handing its output to
// w chunk by chunk; ra holds sf's bytes (the file or a stream of them).
func (s *scratch) runTransform(ctx context.Context, ra io.ReaderAt, sf *safetensors.File, st step, w func([]byte) error, prog meter) error {
	x := st.xf
	xs := &s.xs
	if x.kind == xfPack && x.held {
		b, ok := xs.held[x.codes.Name]
		if !ok {
			return fmt.Errorf("no %s part held for it", []string{"weight_packed", "weight_scale"}[x.part])
		}
		delete(xs.held, x.codes.Name)
		return w(b)
	}
	var keep []byte // the part the pair's other step writes, when held
	keepPart := -1
	var measure *quant.ErrStats
	if x.kind == xfPack && x.pair != nil && x.pair.held { // markHeld planned this step to keep the pair's part
		keepPart = x.pair.part
		keep = make([]byte, 0, packPartSize(x, keepPart))
	}
	counts := x.kind == xfPack && (x.part == 0 || keepPart == 0) // the pack pass whose counts count
	if counts {
		measure = s.errs.tensor(x.codes.Name)
	}
	var s2 float32
	readInto := func(buf *[]byte, t safetensors.TensorInfo, off, n int64) ([]byte, error) {
		*buf = bufs.Grow(*buf, int(n))
		b := (*buf)[:n]
		if x.xscale != nil && t.Name == x.scales.Name {
			if off < 0 || off+n > int64(len(x.xscale)) {
				return nil, fmt.Errorf("read %s at %d: %d bytes past its %d", t.Name, off, n, len(x.xscale))
			}
			copy(b, x.xscale[off:off+n])
		} else if _, err := tensorSection(ra, sf, t).ReadAt(b, off); err != nil {
			return nil, fmt.Errorf("read %s at %d: %w", t.Name, off, err)
		}
		prog.add(n)
		return b, nil
	}
	switch {
	case x.kind == xfNVFP4:
		b, err := readInto(&xs.scales, x.scale2, 0, 4)
		if err != nil {
			return err
		}
		s2 = math.Float32frombits(binary.LittleEndian.Uint32(b))
	case x.packedScales():
		b, err := readInto(&xs.scales, x.scales, 0, x.scales.Size())
		if err != nil {
			return err
		}
		words := make([]int32, len(b)/4)
		for i := range words {
			words[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
		grid, err := quant.UnpackUE8M0(words, int(x.n), int(x.k))
		if err != nil {
			return fmt.Errorf("tensor %s: %w", x.scales.Name, err)
		}
		xs.grid = grid
	}
	k := int(x.k)
	for r0 := int64(0); r0 < x.n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		m := xfRows(x, r0)
		rows := int(m)
		switch x.kind {
		case xfFP8:
			kb := int(blocks(x.k))
			var scales []float32
			if x.packedScales() { // the whole grid is unpacked
				scales = xs.grid[int(r0/blockSize)*kb:][:kb]
			} else {
				e8m0 := isE8M0(x.scales.DType)
				esz := int(x.scales.DType.Bits() / 8)
				b, err := readInto(&xs.scales, x.scales, r0/blockSize*int64(kb*esz), int64(kb*esz))
				if err != nil {
					return err
				}
				xs.grid = bufs.Grow(xs.grid, kb)
				for j := range kb {
					switch {
					case !e8m0:
						xs.grid[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
					case b[j] == 0xFF:
						return fmt.Errorf("%w: scale byte 0xff (E8M0 NaN) of 128×128 block %d,%d in %s: the release never holds one; the file is damaged",
							quant.ErrNonFinite, r0/blockSize, j, x.scales.Name)
					default:
						xs.grid[j] = e8m0Float(b[j])
					}
				}
				scales = xs.grid[:kb]
			}
			codes, err := readInto(&xs.codes, x.codes, r0*x.k, m*x.k)
			if err != nil {
				return err
			}
			xs.out = bufs.Grow(xs.out, 2*rows*k)
			out := xs.out[:2*rows*k]
			if err := quant.DequantizeBandBF16(out, codes, scales, rows, k); err != nil {
				return fmt.Errorf("rows %d..%d: %w", r0, r0+m, err)
			}
			xs.stats.nan += countBF16NaN(out)
			if err := w(out); err != nil {
				return err
			}
		case xfMXFP4, xfNVFP4:
			g := int(x.group())
			sc, err := readInto(&xs.scales, x.scales, r0*x.k/int64(g), m*x.k/int64(g))
			if err != nil {
				return err
			}
			codes, err := readInto(&xs.codes, x.codes, r0*x.k/2, m*x.k/2)
			if err != nil {
				return err
			}
			xs.out = bufs.Grow(xs.out, 2*rows*k)
			out := xs.out[:2*rows*k]
			for r := range rows {
				o, p, q := out[2*r*k:2*(r+1)*k], codes[r*k/2:(r+1)*k/2], sc[r*k/g:(r+1)*k/g]
				if x.kind == xfNVFP4 {
					if err := quant.NVFP4ToBF16(o, p, q, s2); err != nil {
						return fmt.Errorf("row %d: %w", r0+int64(r), err)
					}
					continue
				}
				if nan, err := quant.MXFP4ToBF16(o, p, q); err != nil || nan > 0 {
					if err == nil {
						grp := bytes.IndexByte(q, 0xFF)
						err = fmt.Errorf("%w: scale byte 0xff (E8M0 NaN) of row %d, group %d (elements %d..%d) in %s: the release never holds one; the file is damaged",
							quant.ErrNonFinite, r0+int64(r), grp, grp*g, grp*g+g-1, x.scales.Name)
					}
					return err
				}
				xs.stats.repack = xs.stats.repack.Add(quant.MXFP4Repack(o, p, q))
			}
			xs.stats.nan += countBF16NaN(out)
			if err := w(out); err != nil {
				return err
			}
		case xfPack:
			src, err := readInto(&xs.codes, x.codes, r0*2*x.k, m*2*x.k)
			if err != nil {
				return err
			}
			xs.out = bufs.Grow(xs.out, rows*k/2)
			xs.out2 = bufs.Grow(xs.out2, rows*k/quant.MXGroupSize)
			p, sc := xs.out[:rows*k/2], xs.out2[:rows*k/quant.MXGroupSize]
			ps, err := quant.PackMXFP4Measured(p, sc, src, rows, k, measure)
			if err != nil {
				return fmt.Errorf("rows %d..%d: %w", r0, r0+m, err)
			}
			if counts {
				xs.stats.pack = xs.stats.pack.Add(ps)
			}
			parts := [2][]byte{p, sc}
			if err := w(parts[x.part]); err != nil {
				return err
			}
			if keepPart >= 0 {
				keep = append(keep, parts[keepPart]...)
			}
		}
		r0 += m
	}
	if keepPart >= 0 {
		if xs.held == nil {
			xs.held = map[string][]byte{}
		}
		xs.held[x.codes.Name] = keep
	}
	switch {
	case counts:
		xs.stats.packed++
	case x.kind != xfPack:
		xs.stats.decoded++
	}
	return nil
}

// e8m0Float is the value of an E8M0 scale byte b other than 0xFF (NaN) as
// torch's float8_e8m0fnu converts it: 2^(b-127), 2^-127 for 0.
func e8m0Float(b byte) float32 {
	if b == 0 {
		return math.Float32frombits(1 << 22)
	}
	return math.Float32frombits(uint32(b) << 23)
}

// countBF16NaN counts the NaN values of little-endian BF16 bytes.
func countBF16NaN(b []byte) int64 {
	var n int64
	for i := 0; i+1 < len(b); i += 2 {
		if binary.LittleEndian.Uint16(b[i:])&0x7FFF > 0x7F80 {
			n++
		}
	}
	return n
}
