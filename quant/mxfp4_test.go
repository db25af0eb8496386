package quant

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestDecodeMXFP4Golden decodes random packed bytes with every E8M0 scale
// 0..254 and compares each float32 with torch (E2M1 table × float8_e8m0fnu).
func TestDecodeMXFP4Golden(t *testing.T) {
	g := golden(t)
	rows, k := g.MXDecode.Rows, g.MXDecode.K
	packed, scales := g.mustSection(t, "mxfp4/decode_packed"), g.mustSection(t, "mxfp4/decode_scales")
	want := g.mustSection(t, "mxfp4/decode_f32")
	dst := make([]float32, k)
	for r := range rows {
		if err := decodeMXFP4(dst, packed[r*k/2:(r+1)*k/2], scales[r*k/MXGroupSize:(r+1)*k/MXGroupSize]); err != nil {
			t.Fatal(err)
		}
		for i, v := range dst {
			if w := u32At(want, r*k+i); math.Float32bits(v) != w {
				t.Errorf("row %d element %d = %g, torch %g", r, i, v, math.Float32frombits(w))
			}
		}
	}
}

// TestEncodeMXFP4Golden: packed codes and scales of groups chosen for the
// scale rule's edges (amax = 6·2^e exactly and one ulp either side, zero,
// float32 max and min subnormal) and every E2M1 rounding tie.
func TestEncodeMXFP4Golden(t *testing.T) {
	g := golden(t)
	k := g.MXEncode.K
	src := f32FromBytes(g.mustSection(t, "mxfp4/encode_input"))
	wantP, wantS := g.mustSection(t, "mxfp4/encode_packed"), g.mustSection(t, "mxfp4/encode_scales")
	packed, scales := make([]byte, k/2), make([]byte, k/MXGroupSize)
	if err := EncodeMXFP4(packed, scales, src); err != nil {
		t.Fatal(err)
	}
	for i := range scales {
		if scales[i] != wantS[i] {
			t.Errorf("group %d scale byte %d, reference %d", i, scales[i], wantS[i])
		}
	}
	for i := range packed {
		if packed[i] != wantP[i] {
			t.Errorf("byte %d (elements %d, %d of %g, %g) = 0x%02x, reference 0x%02x", i, 2*i, 2*i+1, src[2*i], src[2*i+1], packed[i], wantP[i])
		}
	}
}

func TestMXFP4Figures(t *testing.T) {
	// E2M1 code values {0, .5, 1, 1.5, 2, 3, 4, 6}, bit 3 the sign,
	// element 2i in the low nibble, scale 2^(byte-127).
	packed := []byte{0x71, 0xF9, 0x2A, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	dst := make([]float32, 32)
	if err := decodeMXFP4(dst, packed, []byte{128}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []float32{1, 12, -1, -12, -2, 2, 0, 0} {
		if dst[i] != want {
			t.Errorf("element %d = %g, want %g", i, dst[i], want)
		}
	}
	if e8M0ToF32(127) != 1 || e8M0ToF32(0) != 0x1p-127 || e8M0ToF32(254) != 0x1p127 || !math.IsNaN(float64(e8M0ToF32(255))) {
		t.Error("E8M0ToF32 figures wrong")
	}
	for _, c := range []struct {
		amax float64
		want int
	}{{6, 0}, {6.000001, 1}, {5.99, 0}, {3, -1}, {0, -127}, {1e-45, -127}, {3.4e38, 126}, {0.75, -3}} {
		if got := mxScaleExp(c.amax); got != c.want {
			t.Errorf("mxScaleExp(%g) = %d, want %d", c.amax, got, c.want)
		}
	}
}

// TestMXFP4RoundTrip: decode(encode(x)) is within half the E2M1 grid step of
// x (at most 1·2^e, between 4 and 6).
func TestMXFP4RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const k = 512
	src, dst := make([]float32, k), make([]float32, k)
	packed, scales := make([]byte, k/2), make([]byte, k/MXGroupSize)
	for range 50 {
		mag := math.Pow(10, rng.Float64()*20-10)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * mag)
		}
		if err := EncodeMXFP4(packed, scales, src); err != nil {
			t.Fatal(err)
		}
		if err := decodeMXFP4(dst, packed, scales); err != nil {
			t.Fatal(err)
		}
		for i := range src {
			step := math.Ldexp(1, int(scales[i/MXGroupSize])-127)
			if d := math.Abs(float64(src[i]) - float64(dst[i])); d > step {
				t.Fatalf("element %d: %g → %g (scale 2^%d)", i, src[i], dst[i], int(scales[i/MXGroupSize])-127)
			}
		}
	}
}

func TestMXFP4Errors(t *testing.T) {
	dst := make([]float32, 64)
	if err := decodeMXFP4(dst, make([]byte, 32), []byte{127, 0xFF}); !errors.Is(err, ErrNonFinite) {
		t.Errorf("NaN scale: %v, want ErrNonFinite", err)
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"decode k%32", decodeMXFP4(make([]float32, 40), make([]byte, 20), make([]byte, 2))},
		{"decode short packed", decodeMXFP4(dst, make([]byte, 31), make([]byte, 2))},
		{"decode short scales", decodeMXFP4(dst, make([]byte, 32), make([]byte, 1))},
		{"encode k%32", EncodeMXFP4(make([]byte, 20), make([]byte, 2), make([]float32, 40))},
		{"encode short packed", EncodeMXFP4(make([]byte, 31), make([]byte, 2), dst)},
		{"encode short scales", EncodeMXFP4(make([]byte, 32), make([]byte, 1), dst)},
	} {
		if !errors.Is(c.err, errShape) {
			t.Errorf("%s: %v, want ErrShape", c.name, c.err)
		}
	}
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		src := make([]float32, 32)
		src[5] = v
		if err := EncodeMXFP4(make([]byte, 16), make([]byte, 1), src); !errors.Is(err, ErrNonFinite) {
			t.Errorf("encode %g: %v, want ErrNonFinite", v, err)
		}
	}
}

// decodeFP4 widens one row of an FP4 format: len(dst) elements (a multiple
// of group), packed two codes per byte (element 2i in the low nibble), one
// scale per group elements that scale decodes; an element is table[code]
// times its scale, in float32.
func decodeFP4(dst []float32, packed, scales []byte, group int, table *[16]float32, scale func(g int) (float32, error)) error {
	k := len(dst)
	switch {
	case k%group != 0:
		return errorf(errShape, "FP4 row of %d elements, not a multiple of %d", k, group)
	case len(packed) < k/2:
		return errorf(errShape, "FP4 row of %d elements has %d packed bytes, want %d", k, len(packed), k/2)
	case len(scales) < k/group:
		return errorf(errShape, "FP4 row of %d elements has %d scales, want %d", k, len(scales), k/group)
	}
	for g := range k / group {
		s, err := scale(g)
		if err != nil {
			return err
		}
		d := dst[g*group : (g+1)*group]
		for i, b := range packed[g*group/2 : (g+1)*group/2] {
			d[2*i] = table[b&0xF] * s
			d[2*i+1] = table[b>>4] * s
		}
	}
	return nil
}

// decodeMXFP4 widens one row of MXFP4: one E8M0 scale per 32 elements, so
// the products are exact. A NaN scale (0xFF) is an error wrapping
// ErrNonFinite naming the group.
func decodeMXFP4(dst []float32, packed, scales []byte) error {
	return decodeFP4(dst, packed, scales, MXGroupSize, &e2m1Table, func(g int) (float32, error) {
		if scales[g] == e8m0NaN {
			return 0, errorf(ErrNonFinite, "MXFP4 scale of group %d (elements %d..%d) is NaN (0xff)", g, g*MXGroupSize, g*MXGroupSize+MXGroupSize-1)
		}
		return e8M0ToF32(scales[g]), nil
	})
}
