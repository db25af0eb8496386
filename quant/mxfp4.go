package quant

import "math"

// MXGroupSize is the number of consecutive elements along K that share an
// MXFP4 E8M0 scale.
const MXGroupSize = 32

const e8m0NaN = 0xFF

// e2m1Values are the magnitudes of the E2M1 codes 0..7; bit 3 is the sign.
var e2m1Values = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// e2m1Table holds the value of all 16 E2M1 codes (code 8 is -0).
var e2m1Table = func() (t [16]float32) {
	for c := range t {
		t[c] = e2m1Values[c&7]
		if c&8 != 0 {
			t[c] = -t[c]
		}
	}
	return t
}()

// e8M0ToF32 returns an E8M0 byte's scale 2^(b-127) (code 0 a float32
// subnormal), NaN for 0xFF.
func e8M0ToF32(b uint8) float32 {
	switch b {
	case 0:
		return math.Float32frombits(1 << 22)
	case e8m0NaN:
		return math.Float32frombits(0x7F800001) // the NaN pattern torch widens 0xFF to
	}
	return math.Float32frombits(uint32(b) << 23)
}

// EncodeMXFP4 quantizes a row of len(src) elements (a multiple of 32) to
// MXFP4 with DeepGEMM's RCEIL scale (exponent ceil(log2(amax/6)) clamped to
// [-127, 127]); elements round to nearest even on the E2M1 grid, to code 0
// (never -0) when they round to zero. A non-finite element wraps ErrNonFinite.
func EncodeMXFP4(packed, scales []byte, src []float32) error {
	k := len(src)
	switch {
	case k%MXGroupSize != 0:
		return errorf(errShape, "MXFP4 row of %d elements, not a multiple of %d", k, MXGroupSize)
	case len(packed) < k/2:
		return errorf(errShape, "MXFP4 row of %d elements needs %d packed bytes, have %d", k, k/2, len(packed))
	case len(scales) < k/MXGroupSize:
		return errorf(errShape, "MXFP4 row of %d elements needs %d scales, have %d", k, k/MXGroupSize, len(scales))
	}
	for g := range k / MXGroupSize {
		x := src[g*MXGroupSize : (g+1)*MXGroupSize]
		var amax float64
		for i, v := range x {
			a := math.Abs(float64(v))
			if a > math.MaxFloat32 || a != a {
				return errorf(ErrNonFinite, "element %d (group %d) is %g", g*MXGroupSize+i, g, v)
			}
			amax = max(amax, a)
		}
		e := mxScaleExp(amax)
		scales[g] = uint8(e + 127)
		inv := math.Ldexp(1, -e) // exact: x·2^-e is a float64 without rounding
		for i := 0; i < MXGroupSize; i += 2 {
			lo := e2m1Code(float64(x[i]) * inv)
			hi := e2m1Code(float64(x[i+1]) * inv)
			packed[(g*MXGroupSize+i)/2] = lo | hi<<4
		}
	}
	return nil
}

// mxScaleExp is the smallest e in [-127, 127] with amax ≤ 6·2^e (or -127).
func mxScaleExp(amax float64) int {
	if amax == 0 {
		return -127
	}
	// amax/6 = m·2^p, m in [0.5, 1): ceil(log2) is p, or p-1 when m = 0.5.
	m, p := math.Frexp(amax / 6)
	if m == 0.5 {
		p--
	}
	return min(max(p, -127), 127)
}

// e2m1Bounds are the upper ends of the rounding intervals of codes 0..6,
// inclusive for the even codes so that ties go to them.
var e2m1Bounds = [7]float64{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}

// e2m1Code rounds v to an E2M1 code (above 6 saturates).
func e2m1Code(v float64) uint8 {
	a := math.Abs(v)
	c := uint8(7)
	for i, b := range e2m1Bounds {
		if a < b || (i%2 == 0 && a == b) {
			c = uint8(i)
			break
		}
	}
	if v < 0 && c != 0 {
		c |= 8
	}
	return c
}
