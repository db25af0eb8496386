package convert

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// fp8ExpertStats counts the 128×128 blocks of routed experts --experts fp8
// cast, and the lossy ones: one E4M3 block scale cannot always hold every
// E8M0 scale of the block's 32-wide MXFP4 groups.
type fp8ExpertStats struct {
	Tensors int64 `json:"tensors"`
	Blocks  int64 `json:"blocks"`
	Lossy   int64 `json:"lossy"`
}

func (s fp8ExpertStats) add(o fp8ExpertStats) fp8ExpertStats {
	return fp8ExpertStats{Tensors: s.Tensors + o.Tensors, Blocks: s.Blocks + o.Blocks, Lossy: s.Lossy + o.Lossy}
}

// fp8ExpertOutputs plans a routed expert tensor s under --experts fp8:
// MXFP4 codes X.weight_packed become X.weight F8_E4M3 [N, K] and its scale,
// consuming their E8M0 scales; an unquantized X.weight is quantized.
// handled is false for tensors that are no routed expert's.
func fp8ExpertOutputs(s safetensors.TensorSpec, src int32, names map[string]safetensors.TensorSpec, opts Options) (out []outputTensor, handled bool, err error) {
	if opts.classifier().Classify(s.Name) != model.RoutedExperts {
		return nil, false, nil
	}
	weight := func(name string, n, k int64) []outputTensor { return fp8Outputs(s.Name, src, name, n, k, opts.Format) }
	if base, packed, ok := opts.classifier().MXFP4Part(s.Name); ok {
		if !packed {
			if _, ok := names[base+".weight_packed"]; !ok {
				return nil, true, fmt.Errorf("tensor %s: %w: MXFP4 scales without their codes %s.weight_packed in the same file", s.Name, errNotQuantizable, base)
			}
			return nil, true, nil // consumed by the cast of the codes
		}
		sc, ok := names[mxfp4Scales(base)]
		if !ok {
			return nil, true, fmt.Errorf("tensor %s: %w: its E8M0 scales %s are not in the same file", s.Name, errNotQuantizable, mxfp4Scales(base))
		}
		if s.DType != safetensors.U8 || len(s.Shape) != 2 {
			return nil, true, fmt.Errorf("tensor %s: %w: %s %v are not MXFP4 packed codes (want U8 [N, K/2])", s.Name, errNotQuantizable, s.DType, s.Shape)
		}
		n, k := s.Shape[0], 2*s.Shape[1]
		if n < 1 || k < 1 || k > quant.MaxK || sc.DType != safetensors.U8 || len(sc.Shape) != 2 || sc.Shape[0] != n || sc.Shape[1]*quant.MXGroupSize != k {
			return nil, true, fmt.Errorf("tensor %s: %w: %s %v are not the E8M0 scales of MXFP4 codes %v (want U8 [%d, %d])",
				sc.Name, errNotQuantizable, sc.DType, sc.Shape, s.Shape, n, k/quant.MXGroupSize)
		}
		return weight(base+".weight", n, k), true, nil
	}
	if module, ok := strings.CutSuffix(s.Name, ".scale"); ok {
		if w, ok := names[module+".weight"]; ok && w.DType.String() == "I8" {
			return nil, true, nil // DeepSeek-V4 FP4 scales: consumed by the cast of the codes
		}
	}
	if roleOfName(s.Name) != model.RoleWeight {
		return nil, false, nil // a companion: its weight decides (and refuses an FP8 or NVFP4 one)
	}
	switch {
	case s.DType.String() == "I8": // DeepSeek-V4's FP4 codes, decoded exactly as MXFP4's
		_, n, k, err := v4FP4Scales(s, names)
		if err != nil {
			return nil, true, err
		}
		return weight(s.Name, n, k), true, nil
	case s.DType == safetensors.F8_E4M3:
		return nil, true, fmt.Errorf("tensor %s: %w: --experts fp8 casts MXFP4 or BF16 experts, and this one is block FP8 already: keep it (--experts keep)", s.Name, errNotQuantizable)
	case s.DType == safetensors.U8:
		return nil, true, fmt.Errorf("tensor %s: %w: --experts fp8 casts MXFP4 or BF16 experts, and this one is packed %s %v (NVFP4?): decode it first (--experts bf16)", s.Name, errNotQuantizable, s.DType, s.Shape)
	}
	if err := checkQuantizable(s); err != nil {
		return nil, true, err
	}
	return weight(s.Name, s.Shape[0], s.Shape[1]), true, nil
}

// isMXFP4Codes reports whether t, a tensor the plan quantizes, is FP4 codes,
// which quantize reads through their exact BF16 decode.
func isMXFP4Codes(t safetensors.TensorInfo) bool {
	_, ok := fp4ScaleName(t)
	return ok
}

// fp4ScaleName is the name of the E8M0 scales of FP4 codes t: MXFP4's
// X.weight_scale (U8 X.weight_packed), DeepSeek-V4's X.scale (I8 X.weight).
func fp4ScaleName(t safetensors.TensorInfo) (string, bool) {
	if len(t.Shape) != 2 {
		return "", false
	}
	if base, ok := strings.CutSuffix(t.Name, ".weight_packed"); ok && t.DType == safetensors.U8 {
		return mxfp4Scales(base), true
	}
	if module, role := model.SplitRole(t.Name); role == model.RoleWeight && t.DType.String() == "I8" {
		return v4ScaleName(module), true
	}
	return "", false
}

// weightSource is what quantize reads of weight t of f: t's own bytes, or
// for MXFP4 codes the BF16 view of their decode (exact: an E2M1 value times
// a power of two has at most two significant bits).
func (s *scratch) weightSource(ra io.ReaderAt, f *safetensors.File, t safetensors.TensorInfo, prog meter) (*io.SectionReader, safetensors.TensorInfo, bool, error) {
	name, ok := fp4ScaleName(t)
	if !ok {
		return tensorSection(ra, f, t), t, false, nil
	}
	sc, ok := f.Lookup(name)
	n, k := t.Shape[0], 2*t.Shape[1]
	if !ok || (sc.DType != safetensors.U8 && !isE8M0(sc.DType)) || len(sc.Shape) != 2 || sc.Shape[0] != n || sc.Shape[1]*quant.MXGroupSize != k {
		return nil, t, false, fmt.Errorf("%w: the E8M0 scales %s of FP4 codes %v are missing or not U8 (F8_E8M0) [%d, %d]", errNotQuantizable, name, t.Shape, n, k/quant.MXGroupSize)
	}
	v := &mxfp4View{codes: tensorSection(ra, f, t), scales: tensorSection(ra, f, sc), scalesName: sc.Name, k: k, buf: &s.fx.buf, prog: prog}
	view := safetensors.TensorInfo{Name: t.Name, DType: safetensors.BF16, Shape: []int64{n, k}, Begin: 0, End: 2 * n * k}
	return io.NewSectionReader(v, 0, 2*n*k), view, true, nil
}

// mxfp4View reads MXFP4 codes and scales as the BF16 bytes of their decode,
// in whole 32-element groups (as every read of quantize is).
type mxfp4View struct {
	codes, scales *io.SectionReader
	scalesName    string
	k             int64
	buf           *[]byte
	prog          meter
}

const groupBytes = 2 * quant.MXGroupSize

func (v *mxfp4View) ReadAt(p []byte, off int64) (int, error) {
	if off%groupBytes != 0 || len(p)%groupBytes != 0 {
		return 0, fmt.Errorf("MXFP4 view: read of %d bytes at %d is not whole groups of 32", len(p), off)
	}
	g0, ng := off/groupBytes, int64(len(p)/groupBytes)
	need := int(ng * (1 + quant.MXGroupSize/2))
	*v.buf = bufs.Grow(*v.buf, need)
	b := *v.buf
	sc, codes := b[:ng], b[ng:]
	// Scales first: the order fileRanges plans for a remote source.
	if _, err := v.scales.ReadAt(sc, g0); err != nil {
		return 0, fmt.Errorf("read %s at %d: %w", v.scalesName, g0, err)
	}
	if _, err := v.codes.ReadAt(codes, g0*quant.MXGroupSize/2); err != nil {
		return 0, fmt.Errorf("read MXFP4 codes at %d: %w", g0*quant.MXGroupSize/2, err)
	}
	v.prog.add(int64(need))
	nan, err := quant.MXFP4ToBF16(p, codes, sc)
	if err != nil {
		return 0, err
	}
	if nan > 0 {
		g := g0 + int64(bytes.IndexByte(sc, 0xFF))
		row, col := g*quant.MXGroupSize/v.k, g*quant.MXGroupSize%v.k
		return 0, fmt.Errorf("%w: scale byte 0xff (E8M0 NaN) in %s at row %d, group %d (elements %d..%d), 128×128 block %d,%d: the release never holds one; the file is damaged",
			quant.ErrNonFinite, v.scalesName, row, col/quant.MXGroupSize, col, col+quant.MXGroupSize-1, row/blockSize, col/blockSize)
	}
	return len(p), nil
}

// mxfp4Reads calls read with each (tensor, offset, length) mxfp4View reads of t.
func mxfp4Reads(f *safetensors.File, t safetensors.TensorInfo, read func(t safetensors.TensorInfo, off, n int64)) {
	name, _ := fp4ScaleName(t)
	sc, ok := f.Lookup(name)
	if !ok {
		return // quantize fails before reading
	}
	n, k := t.Shape[0], 2*t.Shape[1]
	quantReads(safetensors.TensorInfo{Name: t.Name, DType: safetensors.BF16, Shape: []int64{n, k}, End: 2 * n * k}, func(off, l int64) {
		g0, ng := off/groupBytes, l/groupBytes
		read(sc, g0, ng)
		read(t, g0*quant.MXGroupSize/2, ng*quant.MXGroupSize/2)
	})
}

// fp8xScratch is a job's state for FP8 experts.
type fp8xScratch struct {
	buf   []byte
	stats fp8ExpertStats
}

// counted adds one expert tensor's blocks to the counts from the error the
// report measured for it (m is nil only when measuring is off).
func (x *fp8xScratch) counted(m *quant.ErrStats) {
	x.stats.Tensors++
	if m != nil {
		x.stats.Blocks += m.Blocks
		x.stats.Lossy += m.LossyBlocks
	}
}

// specsByName indexes a file's specs by name.
func specsByName(in []safetensors.TensorSpec) map[string]safetensors.TensorSpec {
	m := make(map[string]safetensors.TensorSpec, len(in))
	for _, s := range in {
		m[s.Name] = s
	}
	return m
}

// expertsTarget is the compressed-tensors target of FP8 routed experts: a
// MoE layer's bank (fused by engines) and each expert's projections.
const expertsTarget = `re:(?:.*\.)?layers\.\d+\.(?:block_sparse_moe|mlp)\.experts(?:\.\d+\.\w+)?$`
