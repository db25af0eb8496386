package quant

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// Numerics selects whose block-FP8 quantizer a Quantizer reproduces.
type Numerics uint8

const (
	// DeepGEMM is per_block_cast_to_fp8: float32 scale amax/448 with amax
	// clamped to ≥ 1e-4, elements multiplied by 1/scale (the default).
	DeepGEMM Numerics = iota
	// ModelOpt is Model-Optimizer's FP8_PB_WO cast (FP8QTensor.quantize with
	// 128×128 blocks, as its Kimi-K3 converter runs it; BF16 sources and FP32
	// scales only): scale = bf16(amax/448) with no floor, widened to float32;
	// each element is bf16(x/scale) cast to E4M3FN. A zero-scale block gets NaN
	// codes: 0xFF for zero elements (x86's 0/0 is the negative NaN, kept by
	// torch's CPU BF16 conversion, where NVIDIA's converter runs) and sign|0x7F
	// for the others; ZeroScaleBlocks counts them.
	ModelOpt
)

var numericsNames = [...]string{DeepGEMM: "deepgemm", ModelOpt: "modelopt"}

// String returns "deepgemm" or "modelopt".
func (n Numerics) String() string {
	if int(n) >= len(numericsNames) {
		return fmt.Sprintf("Numerics(%d)", uint8(n))
	}
	return numericsNames[n]
}

// numericsErr checks q.Numerics against the quantizer's formats.
func (q *Quantizer) numericsErr() error {
	switch n := q.Numerics; {
	case int(n) >= len(numericsNames):
		return errorf(errShape, "unsupported numerics %v", n)
	case n == ModelOpt && q.in != BF16:
		return errorf(errShape, "ModelOpt numerics take BF16 sources, not %s", q.in.name())
	case n == ModelOpt && q.fmt != ScaleFP32:
		return errorf(errShape, "ModelOpt numerics have BF16 scales stored as float32, not %v", q.fmt)
	}
	return nil
}

// modelOptScale is bf16(amax / 448) of a BF16 magnitude, widened (torch's CPU
// and CUDA divisions agree on it for every BF16 amax).
func modelOptScale(m uint16) float32 {
	return BF16ToF32(F32ToBF16(BF16ToF32(m) / maxE4M3))
}

// bf16ToE4M3 holds e4m3Select of every BF16 pattern.
var bf16ToE4M3 = sync.OnceValue(func() *[1 << 16]uint8 {
	var t [1 << 16]uint8
	for b := range t {
		t[b] = e4m3Select(BF16ToF32(uint16(b)))
	}
	return &t
})

const minNormalF32 = 0x1p-126

// encodeModelOpt writes e4m3(bf16(x / sf)) for a window of BF16 elements.
// For a normal sf it multiplies by float32(1/sf): x and sf have 8 significant
// bits, so an inexact x/sf is at least 2^-17 (relative) from every BF16
// midpoint, and the product's error (< 2^-23) never changes the rounding.
func encodeModelOpt(dst []byte, dstStride int, src []byte, srcStride, rows, cols int, sf float32) {
	t := bf16ToE4M3()
	for r := range rows {
		d := dst[r*dstStride : r*dstStride+cols]
		s := src[r*srcStride : r*srcStride+2*cols]
		switch {
		case sf == 0:
			for i := range d {
				b := binary.LittleEndian.Uint16(s[2*i:])
				if b&0x7FFF == 0 {
					d[i] = 0x80 | e4M3NaN
				} else {
					d[i] = uint8(b>>8)&0x80 | e4M3NaN
				}
			}
		case sf < minNormalF32:
			for i := range d {
				x := BF16ToF32(binary.LittleEndian.Uint16(s[2*i:]))
				d[i] = t[F32ToBF16(float32(x/sf))]
			}
		default:
			inv := 1 / sf
			for i := range d {
				x := BF16ToF32(binary.LittleEndian.Uint16(s[2*i:]))
				d[i] = t[F32ToBF16(float32(x*inv))]
			}
		}
	}
}
