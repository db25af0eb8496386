package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestE4M3FromF32Figures checks torch's fp32 → E4M3FN cast (c10's
// fp8e4m3fn_from_fp32_value): round to nearest even, subnormals in steps of
// 2^-9, no saturation (|x| > 464 is NaN 0x7F, 464 ties to 448), inf and NaN
// to 0x7F with the sign.
func TestE4M3FromF32Figures(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, c := range []struct {
		f    float32
		want uint8
	}{
		{448, 0x7E}, {464, 0x7E}, // 464 ties to even (448)
		{math.Nextafter32(464, 500), 0x7F}, {479, 0x7F}, {480, 0x7F}, {1e30, 0x7F}, // no saturation
		{-448, 0xFE}, {-470, 0xFF}, {inf, 0x7F}, {-inf, 0xFF}, {nan, 0x7F}, {-nan, 0xFF},
		{0, 0x00}, {float32(math.Copysign(0, -1)), 0x80},
		{0x1p-9, 0x01}, {0x1p-10, 0x00}, {3 * 0x1p-10, 0x02}, {5 * 0x1p-10, 0x02}, // subnormal ties to even
		{7.5 * 0x1p-9, 0x08}, {0x1p-6, 0x08}, {1, 0x38}, {1.0625, 0x38}, {1.0625 + 0x1p-20, 0x39},
		{240, 0x77}, {-0x1p-11, 0x80},
	} {
		if got := e4M3FromF32(c.f); got != c.want {
			t.Errorf("E4M3FromF32(%g) = 0x%02x, want 0x%02x", c.f, got, c.want)
		}
	}
	if E4M3ToF32(0x7E) != maxE4M3 || E4M3ToF32(0x01) != 0x1p-9 || E4M3ToF32(0xB8) != -1 {
		t.Errorf("E4M3ToF32 figures wrong: %g %g %g", E4M3ToF32(0x7E), E4M3ToF32(0x01), E4M3ToF32(0xB8))
	}
	for c := range 256 {
		if c&0x7F == e4M3NaN {
			continue
		}
		if back := e4M3FromF32(E4M3ToF32(uint8(c))); back != uint8(c) {
			t.Errorf("code 0x%02x round-trips to 0x%02x", c, back)
		}
	}
}

func TestCeilUE8M0(t *testing.T) {
	for _, c := range []struct{ x, want float32 }{
		{1, 1}, {math.Nextafter32(1, 2), 2}, {0.75, 1}, {448.0 / 448, 1},
		{0, 0x1p-126}, {0x1p-149, 0x1p-126}, // exponent clamped to ≥ 1
		{3e38, 0x1p127}, {float32(math.Inf(1)), 0x1p127}, // and to ≤ 254
		{-3, 4}, // sign ignored (DeepGEMM takes abs)
	} {
		if got := ceilUE8M0(c.x); got != c.want {
			t.Errorf("CeilUE8M0(%g) = %g, want %g", c.x, got, c.want)
		}
	}
}

func TestF32ToBF16Figures(t *testing.T) {
	for _, c := range []struct {
		bits uint32
		want uint16
	}{
		{0x3F808000, 0x3F80}, {0x3F818000, 0x3F82}, {0x3F808001, 0x3F81}, {0x3F807FFF, 0x3F80},
		{0x7F7FFFFF, 0x7F80}, {0x7F800000, 0x7F80}, {0xFF800000, 0xFF80}, {0x7FC00001, 0x7FC0}, {0xFFFFFFFF, 0x7FC0},
		{0x00008000, 0x0000}, {0x00018000, 0x0002},
	} {
		if got := F32ToBF16(math.Float32frombits(c.bits)); got != c.want {
			t.Errorf("F32ToBF16(0x%08x) = 0x%04x, want 0x%04x", c.bits, got, c.want)
		}
	}
}

// randomBand makes rows×k elements of e: magnitudes log-uniform over 2^-20..2^6
// with a few exact zeros, so every E4M3FN range is exercised.
func randomBand(rng *rand.Rand, e Elem, rows, k int) []byte {
	b := make([]byte, rows*k*e.Size())
	for i := range rows * k {
		v := float32(math.Ldexp(1+rng.Float64(), -20+rng.IntN(27)))
		if rng.IntN(2) == 0 {
			v = -v
		}
		if rng.IntN(50) == 0 {
			v = 0
		}
		var bits uint32
		switch e {
		case BF16:
			bits = uint32(F32ToBF16(v))
		case F16:
			bits = uint32(f16FromF32(v))
		default:
			bits = math.Float32bits(v)
		}
		putElem(b, e, i, bits)
	}
	return b
}

// f16FromF32 truncates to a half (test inputs only need to be some half).
func f16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	sign, exp, man := uint16(b>>16)&0x8000, int(b>>23&0xFF)-127+15, uint16(b>>13)&0x3FF
	switch {
	case exp <= 0:
		return sign
	case exp >= 31:
		return sign | 0x7BFF
	}
	return sign | uint16(exp)<<10 | man
}

func elemValue(src []byte, e Elem, i int) float32 {
	switch e {
	case BF16:
		return BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	case F16:
		return F16.widen(F16.bits(src, i))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
}

// TestQuantizeErrorBound: dequant(quant(x)) is within E4M3FN's rounding
// error of x: half a unit in the last place of a 3-bit mantissa (2^-4
// relative) in the normal range, half the subnormal step (2^-10·sf) below,
// plus float32 slack for the products.
func TestQuantizeErrorBound(t *testing.T) { eachKernel(t, testQuantizeErrorBound) }

func testQuantizeErrorBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, e := range []Elem{BF16, F16, F32} {
		for _, f := range []ScaleFmt{ScaleFP32, ScaleUE8M0} {
			for range 20 {
				rows, k := 1+rng.IntN(BlockSize), 1+rng.IntN(700)
				src := randomBand(rng, e, rows, k)
				q := NewQuantizer(k, e, f)
				dst, scales := make([]byte, rows*k), make([]float32, numBlocks(k))
				if err := q.quantizeNext(dst, scales, src, rows); err != nil {
					t.Fatal(err)
				}
				deq := make([]float32, rows*k)
				if err := dequantizeBand(deq, dst, scales, rows, k); err != nil {
					t.Fatal(err)
				}
				for i := range deq {
					x, sf := float64(elemValue(src, e, i)), float64(scales[(i%k)/BlockSize])
					bound := math.Abs(x)*(0x1p-4+0x1p-20) + sf*0x1p-10
					if d := math.Abs(x - float64(deq[i])); d > bound {
						t.Fatalf("%v %v %d×%d: element (%d, %d) = %g dequantizes to %g (error %g > %g, scale %g)",
							e, f, rows, k, i/k, i%k, x, deq[i], d, bound, sf)
					}
				}
				// the scale is the smallest that keeps the block's amax representable
				for kb, sf := range scales {
					var amax float32
					for r := range rows {
						for c := kb * BlockSize; c < min(kb*BlockSize+BlockSize, k); c++ {
							amax = max(amax, float32(math.Abs(float64(elemValue(src, e, r*k+c)))))
						}
					}
					if f == ScaleUE8M0 && (sf < max(amax, amaxFloor)/maxE4M3 || sf/2 >= max(amax, amaxFloor)/maxE4M3) {
						t.Fatalf("UE8M0 scale %g for amax %g is not the least power of two ≥ amax/448", sf, amax)
					}
				}
			}
		}
	}
}

// TestKernelsAgree: the vector and portable kernels write the same bytes for
// odd shapes (tails of every width) and every format.
func TestKernelsAgree(t *testing.T) {
	if !useAVX2Available() {
		t.Skip("no vector kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, e := range []Elem{BF16, F16, F32} {
		for _, f := range []ScaleFmt{ScaleFP32, ScaleUE8M0} {
			for range 30 {
				rows, k := 1+rng.IntN(BlockSize), 1+rng.IntN(400)
				src := randomBand(rng, e, rows, k)
				var out [2][]byte
				var sc [2][]float32
				var deq [2][]float32
				for m := range 2 {
					setAVX2(m == 0)
					q := NewQuantizer(k, e, f)
					out[m], sc[m] = make([]byte, rows*k), make([]float32, numBlocks(k))
					if err := q.quantizeNext(out[m], sc[m], src, rows); err != nil {
						t.Fatal(err)
					}
					deq[m] = make([]float32, rows*k)
					if err := dequantizeBand(deq[m], out[0], sc[0], rows, k); err != nil {
						t.Fatal(err)
					}
				}
				setAVX2(true)
				if string(out[0]) != string(out[1]) || string(f32Bytes(sc[0])) != string(f32Bytes(sc[1])) {
					t.Fatalf("%v %v %d×%d: vector and portable quantization differ", e, f, rows, k)
				}
				if string(f32Bytes(deq[0])) != string(f32Bytes(deq[1])) {
					t.Fatalf("%v %v %d×%d: vector and portable dequantization differ", e, f, rows, k)
				}
			}
		}
	}
	// all 256 codes (NaN included) through both dequantizers
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	var deq [2][]float32
	for m := range 2 {
		setAVX2(m == 0)
		deq[m] = make([]float32, 256)
		if err := dequantizeBand(deq[m], codes, []float32{0.75, 3}, 1, 256); err != nil {
			t.Fatal(err)
		}
	}
	setAVX2(true)
	if string(f32Bytes(deq[0])) != string(f32Bytes(deq[1])) {
		t.Errorf("dequantizing all codes: vector and portable differ")
	}
}

func TestQuantizeNonFinite(t *testing.T) { eachKernel(t, testQuantizeNonFinite) }

func testQuantizeNonFinite(t *testing.T) {
	for _, c := range []struct {
		e    Elem
		bits uint32
	}{
		{BF16, 0x7FC0}, {BF16, 0xFF80}, {BF16, 0x7F80}, {BF16, 0x7F81},
		{F16, 0x7C00}, {F16, 0xFE00}, {F32, 0x7F800000}, {F32, 0xFFC00001},
	} {
		const rows, k = 100, 300
		src := randomBand(rand.New(rand.NewPCG(1, 1)), c.e, rows, k)
		putElem(src, c.e, 77*k+260, c.bits) // row 77 of band 3, column block 2
		putElem(src, c.e, 90*k+270, c.bits) // a later one in the same block
		q := NewQuantizer(k, c.e, ScaleUE8M0)
		err := q.QuantizeBandAt(3, make([]byte, rows*k), make([]float32, 3), src, rows)
		var nf *BlockError
		if !errors.Is(err, ErrNonFinite) || !errors.As(err, &nf) {
			t.Fatalf("%v 0x%x: err %v, want a *BlockError", c.e, c.bits, err)
		}
		want := BlockError{Err: ErrNonFinite, Elem: c.e, Bits: c.bits, Band: 3, Row: 3*BlockSize + 77, ColBlock: 2, Col: 260}
		if *nf != want {
			t.Errorf("%v 0x%x: %+v, want %+v", c.e, c.bits, *nf, want)
		}
		if nf.Error() == "" {
			t.Error("empty message")
		}
	}
}

func TestQuantizeShapeErrors(t *testing.T) {
	q := NewQuantizer(256, BF16, ScaleFP32)
	src, dst, sc := make([]byte, 2*128*256), make([]byte, 128*256), make([]float32, 2)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"0 rows", q.quantizeNext(dst, sc, src, 0)},
		{"129 rows", q.quantizeNext(dst, sc, src, 129)},
		{"short src", q.quantizeNext(dst, sc, src[:2*128*256-1], 128)},
		{"short dst", q.quantizeNext(dst[:100], sc, src, 128)},
		{"short scales", q.quantizeNext(dst, sc[:1], src, 128)},
		{"K 0", NewQuantizer(0, BF16, ScaleFP32).quantizeNext(dst, sc, src, 1)},
		{"K too large", NewQuantizer(MaxK+1, BF16, ScaleFP32).quantizeNext(dst, sc, src, 1)},
		{"bad elem", NewQuantizer(256, Elem(9), ScaleFP32).quantizeNext(dst, sc, src, 1)},
		{"bad fmt", NewQuantizer(256, BF16, ScaleFmt(9)).quantizeNext(dst, sc, src, 1)},
		{"dequant short", dequantizeBand(make([]float32, 10), dst, sc, 128, 256)},
		{"dequant K 0", dequantizeBand(nil, dst, sc, 1, 0)},
		{"dequant BF16 short", DequantizeBandBF16(make([]byte, 10), dst, sc, 128, 256)},
	} {
		if !errors.Is(c.err, errShape) {
			t.Errorf("%s: %v, want ErrShape", c.name, c.err)
		}
	}
}

// TestQuantizeNoAllocs: the hot loop allocates nothing per band.
func TestQuantizeNoAllocs(t *testing.T) {
	const k = 7168
	src := randomBand(rand.New(rand.NewPCG(2, 2)), BF16, BlockSize, k)
	q := NewQuantizer(k, BF16, ScaleUE8M0)
	dst, sc, deq := make([]byte, BlockSize*k), make([]float32, numBlocks(k)), make([]float32, BlockSize*k)
	if a := testing.AllocsPerRun(5, func() {
		if err := q.quantizeNext(dst, sc, src, BlockSize); err != nil {
			t.Fatal(err)
		}
		if err := dequantizeBand(deq, dst, sc, BlockSize, k); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("%v allocations per band", a)
	}
}

func TestEnumStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{BF16.name(), "BF16"}, {F16.name(), "F16"}, {F32.name(), "F32"}, {Elem(7).name(), "Elem(7)"},
		{ScaleFP32.String(), "fp32"}, {ScaleUE8M0.String(), "ue8m0"}, {ScaleFmt(5).String(), "ScaleFmt(5)"},
	} {
		if c.got != c.want {
			t.Errorf("String() = %q, want %q", c.got, c.want)
		}
	}
	if BF16.Size() != 2 || F32.Size() != 4 || Elem(9).Size() != 0 {
		t.Error("Elem.Size wrong")
	}
}

// dequantizeBand widens a band of rows×k FP8 E4M3FN bytes to float32,
// multiplying each by its column block's scale (scales holds ⌈k/128⌉ values).
// NaN codes stay NaN. Only the leading entries of the buffers are used.
func dequantizeBand(dst []float32, src []byte, scales []float32, rows, k int) error {
	if err := checkDequant(len(dst), src, scales, rows, k); err != nil {
		return err
	}
	// Row by row: the output is 4 bytes an element, and writing it in
	// order beats revisiting 128 rows that are a multiple of 4 KiB apart.
	for r := range rows {
		dequantRowGo(dst[r*k:(r+1)*k], src[r*k:(r+1)*k], scales[:numBlocks(k)])
	}
	return nil
}

// packMXFP4 is PackMXFP4Measured without the error measurement.
func packMXFP4(packed, scales, src []byte, rows, k int) (PackStats, error) {
	return PackMXFP4Measured(packed, scales, src, rows, k, nil)
}

// quantizeNext quantizes the next band (the quantizer counts the bands it has
// seen, for error messages); see QuantizeBandAt.
func (q *Quantizer) quantizeNext(dst []byte, scales []float32, src []byte, rows int) error {
	err := q.QuantizeBandAt(q.band, dst, scales, src, rows)
	q.band++
	return err
}

// dequantRowGo widens one row of FP8 codes, column block j by scales[j].
func dequantRowGo(dst []float32, src []byte, scales []float32) {
	for j := 0; len(src) > 0; j++ {
		n := min(BlockSize, len(src))
		d, s := dst[:n], scales[j]
		for i, b := range src[:n] {
			d[i] = e4m3Table[b] * s
		}
		dst, src = dst[n:], src[n:]
	}
}
