package quant

import "math"

// FP8 E4M3FN facts, and bit patterns of the float32 thresholds of its cast.
const (
	maxE4M3 = 448  // the largest finite value (code 0x7E)
	e4M3NaN = 0x7F // the NaN code (E4M3FN has no infinities)

	f32Bits480     = 0x43F00000 // 480: the first magnitude that is NaN without rounding
	f32BitsMinNorm = 0x3C800000 // 2^-6: the smallest E4M3FN normal
	f32Bits2p14    = 0x46800000 // 2^14: adding it leaves |x|·2^9 rounded in the low mantissa bits
	f32BiasShift   = 0x3C000000 // (127-7)<<23: the exponent bias difference, in place
)

// e4m3Select converts to FP8 E4M3FN as torch does
// (c10::detail::fp8e4m3fn_from_fp32_value): round to nearest even, subnormals
// included, no saturation: magnitudes above 464 (464 ties to 448), Inf and NaN
// become the NaN code 0x7F, keeping the sign. It computes the normal and
// subnormal cases and selects one (conditional moves): over many binades the
// subnormal case comes at random, and a mispredicted branch costs more than
// the conversion.
func e4m3Select(f float32) uint8 {
	b := math.Float32bits(f)
	a := b & 0x7FFFFFFF
	// Keep 3 mantissa bits, rounding to nearest even, and rebias; the
	// subnormal step is 2^-9: adding 2^14 in float32 leaves
	// round-to-nearest-even(|x|·2^9) in the low mantissa bits.
	r := (a - f32BiasShift + 0x7FFFF + (a>>20)&1) >> 20
	s := math.Float32bits(math.Float32frombits(a)+float32(1<<14)) - f32Bits2p14
	if a < f32BitsMinNorm {
		r = s
	}
	if a >= f32Bits480 {
		r = e4M3NaN
	}
	return uint8(r) | uint8(b>>24)&0x80
}

// e4m3Table holds the float32 value of every FP8 E4M3FN code.
var e4m3Table = func() (t [256]float32) {
	for c := range t {
		exp, man := c>>3&0xF, float64(c&7)
		v := (1 + man/8) * math.Ldexp(1, exp-7)
		if exp == 0 {
			v = man * 0x1p-9
		}
		if c&0x80 != 0 {
			v = -v
		}
		t[c] = float32(v)
		if c&0x7F == e4M3NaN {
			// torch widens it to 0x7FF00000 with the sign (c10 keeps the mantissa bits).
			t[c] = math.Float32frombits(uint32(c&0x80)<<24 | 0x7FF00000)
		}
	}
	return t
}()

// E4M3ToF32 widens an FP8 E4M3FN code exactly; 0x7F and 0xFF are NaN.
func E4M3ToF32(b uint8) float32 { return e4m3Table[b] }

// ceilUE8M0 rounds |x| up to a power of two (DeepGEMM's ceil_to_ue8m0),
// clamped to the biased exponents [1, 254]: a normal float32 and UE8M0 code.
func ceilUE8M0(x float32) float32 {
	b := math.Float32bits(x) & 0x7FFFFFFF
	exp := b >> 23
	if b&0x7FFFFF != 0 {
		exp++
	}
	exp = min(max(exp, 1), 254)
	return math.Float32frombits(exp << 23)
}
