package quant

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// randomMXFP4 returns rows×k random codes (with extra −0 codes) and scale
// bytes drawn from [lo, hi].
func randomMXFP4(rng *rand.Rand, rows, k int, lo, hi uint8) (packed, scales []byte) {
	packed = make([]byte, rows*k/2)
	for i := range packed {
		packed[i] = uint8(rng.Uint32())
		if rng.IntN(8) == 0 {
			packed[i] = packed[i]&0xF0 | 0x8
		}
	}
	scales = make([]byte, rows*k/MXGroupSize)
	for i := range scales {
		scales[i] = lo + uint8(rng.IntN(int(hi-lo)+1))
	}
	return packed, scales
}

func kmaxOf(t *testing.T, scales ...[]byte) int {
	t.Helper()
	k := math.MinInt
	for _, s := range scales {
		var m KMax
		if err := m.Add(s); err != nil {
			t.Fatal(err)
		}
		k = max(k, m.Value)
	}
	return k
}

func castAll(t *testing.T, packed, scales []byte, rows, k, kmax int) ([]byte, []byte, *nVFP4Cast) {
	t.Helper()
	c, err := NewNVFP4Cast(k, kmax)
	if err != nil {
		t.Fatal(err)
	}
	out, osc := make([]byte, len(packed)), make([]byte, 2*len(scales))
	for r0 := 0; r0 < rows; r0 += 3 {
		r1 := min(r0+3, rows)
		if err := c.CastBand(out[r0*k/2:], osc[r0*k/16:], packed[r0*k/2:r1*k/2], scales[r0*k/32:r1*k/32], r1-r0); err != nil {
			t.Fatal(err)
		}
	}
	return out, osc, c
}

// TestNVFP4CastProperty: for blocks in range (k_j ≥ K_max − 17, k_j < 126)
// the dequantized NVFP4 equals the dequantized MXFP4, element by element in
// float32; every other block with a non-zero byte is counted out of range,
// and the lossy count equals an exact comparison. Spreads of exponents from
// none to far beyond E4M3's window.
func TestNVFP4CastProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, k = 20, 256
	for _, spread := range []uint8{0, 5, 17, 18, 25, 60, 126} {
		lo := uint8(127 - spread)
		packed, scales := randomMXFP4(rng, rows, k, lo, 127)
		kmax := kmaxOf(t, scales)
		out, osc, c := castAll(t, packed, scales, rows, k, kmax)
		mx, nv := make([]float32, k), make([]float32, k)
		var oor int64
		for r := range rows {
			if err := decodeMXFP4(mx, packed[r*k/2:], scales[r*k/32:]); err != nil {
				t.Fatal(err)
			}
			if err := decodeNVFP4(nv, out[r*k/2:], osc[r*k/16:], c.Scale2); err != nil {
				t.Fatal(err)
			}
			for j := range k / MXGroupSize {
				b := scales[r*k/32+j]
				kj := int(b) - 127
				if kj < kmax-17 {
					if b != 0 {
						oor++
					}
					continue
				}
				for e := j * 32; e < j*32+32; e++ {
					if mx[e] != nv[e] {
						t.Fatalf("spread %d: in-range element (%d, %d) MXFP4 %g, NVFP4 %g", spread, r, e, mx[e], nv[e])
					}
				}
			}
		}
		st := c.Stats
		if st.Blocks != rows*k/32 || st.OutOfRange != oor {
			t.Errorf("spread %d: stats %+v, want %d blocks, %d out of range", spread, st, rows*k/32, oor)
		}
		if want := exactLossy(packed, scales, out, osc, c.Scale2, k); st.Lossy != want {
			t.Errorf("spread %d: %d lossy, exact comparison %d", spread, st.Lossy, want)
		}
		if spread <= 17 && (st.OutOfRange != 0 || st.Lossy != 0) {
			t.Errorf("spread %d fits E4M3: %+v", spread, st)
		}
		if spread >= 25 && st.Lossy == 0 {
			t.Errorf("spread %d: no lossy block", spread)
		}
	}
}

// TestNVFP4CastInRangeBytes: in range, the codes are the source bytes with
// every −0 nibble cleared, and the scales the powers of two 2^(k_j−K_max+8).
func TestNVFP4CastInRangeBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, k = 8, 128
	packed, scales := randomMXFP4(rng, rows, k, 110, 120)
	out, osc, c := castAll(t, packed, scales, rows, k, 0) // K_max 0 above every exponent: a partner's
	for i, b := range packed {
		want := b
		if b&0xF == 8 {
			want &^= 0x08
		}
		if b>>4 == 8 {
			want &^= 0x80
		}
		if out[i] != want {
			t.Fatalf("byte %d: 0x%02x → 0x%02x, want 0x%02x", i, b, out[i], want)
		}
	}
	for i, b := range scales {
		want := e4M3FromF32(float32(math.Ldexp(1, int(b)-127+8)))
		if osc[2*i] != want || osc[2*i+1] != want {
			t.Fatalf("block %d: scales 0x%02x 0x%02x, want 0x%02x", i, osc[2*i], osc[2*i+1], want)
		}
	}
	if c.Scale2 != 1.0/256 || c.Stats.Lossy != 0 {
		t.Errorf("scale2 %g, stats %+v", c.Scale2, c.Stats)
	}
	// In place gives the same bytes.
	in := append([]byte(nil), packed...)
	c2, _ := NewNVFP4Cast(k, 0)
	osc2 := make([]byte, len(osc))
	if err := c2.CastBand(in, osc2, in, scales, rows); err != nil {
		t.Fatal(err)
	}
	if string(in) != string(out) || string(osc2) != string(osc) {
		t.Error("casting in place differs")
	}
}

// TestNVFP4CastEdges: all-zero tensors, zero scale bytes over non-zero codes,
// K_max at both ends, NaN and too-large scale bytes.
func TestNVFP4CastEdges(t *testing.T) {
	const k = 64
	// All-zero scales and codes: K_max 0, scale 2^-9, nothing lost.
	zp, zs := make([]byte, k/2), make([]byte, k/32)
	if km := kmaxOf(t, zs); km != 0 {
		t.Fatalf("all-zero K_max %d, want 0", km)
	}
	out, osc, c := castAll(t, zp, zs, 1, k, 0)
	if st := c.Stats; st != (CastStats{Blocks: 2}) || osc[0] != 0x01 || out[0] != 0 {
		t.Errorf("all-zero: %+v, scale 0x%02x", st, osc[0])
	}
	// Zero scale bytes over codes 2^-127·c: NVIDIA counts them lossless, their values are lost.
	np := make([]byte, k/2)
	for i := range np {
		np[i] = 0x9F // -0.5, -6
	}
	_, _, c = castAll(t, np, zs, 1, k, 0)
	if st := c.Stats; st.OutOfRange != 0 || st.Lossy != 2 {
		t.Errorf("zero bytes with codes: %+v, want 0 out of range, 2 lossy", st)
	}
	// K_max extremes: bytes 1 (K = -126) to 252 cast losslessly on their own;
	// 253 and 254 lose values (their amax 6·2^k_j is not a float32 and the
	// scale clamps to 448), though NVIDIA counts them lossless.
	for _, b := range []uint8{1, 17, 127, 252, 253, 254} {
		sp := []byte{b, b}
		km := kmaxOf(t, sp)
		if km != int(b)-127 {
			t.Fatalf("byte %d: K_max %d", b, km)
		}
		codes := make([]byte, k/2)
		for i := range codes {
			codes[i] = 0x31 // 0.5, 1.5: never overflow
		}
		out, _, c := castAll(t, codes, sp, 1, k, km)
		st := c.Stats
		switch {
		case b < hotK+127 && (st.Lossy != 0 || st.OutOfRange != 0 || string(out) != string(codes)):
			t.Errorf("byte %d: %+v", b, st)
		case b >= hotK+127 && (st.Lossy != 2 || st.OutOfRange != 0):
			t.Errorf("byte %d: %+v, want 2 lossy blocks", b, st)
		}
		want := float32(math.Ldexp(1, km-8))
		if c.Scale2 != want {
			t.Errorf("byte %d: scale2 %g, want %g", b, c.Scale2, want)
		}
	}
	// NaN scales are refused, by KMax and by the cast, naming the position.
	var m KMax
	if err := m.Add([]byte{120, 121, 0xFF}); !errors.Is(err, ErrNonFinite) || m.Value != 0 {
		t.Errorf("KMax.Add(NaN) = %v, value %d", err, m.Value)
	}
	c, _ = NewNVFP4Cast(k, 0)
	if err := c.CastBand(make([]byte, k/2), make([]byte, k/16), make([]byte, k/2), []byte{127, 0xFF}, 1); !errors.Is(err, ErrNonFinite) {
		t.Errorf("CastBand(NaN) = %v", err)
	} else {
		t.Log(err)
	}
	if err := c.CastBand(make([]byte, k/2), make([]byte, k/16), make([]byte, k/2), []byte{127, 128}, 1); !errors.Is(err, ErrRange) {
		t.Errorf("CastBand(byte above K_max) = %v", err)
	}
	if c.Stats != (CastStats{}) {
		t.Errorf("failed bands counted: %+v", c.Stats)
	}
	// Shapes.
	for _, bad := range [][2]int{{0, 0}, {48, 0}, {64, -127}, {64, 128}} {
		if _, err := NewNVFP4Cast(bad[0], bad[1]); !errors.Is(err, errShape) {
			t.Errorf("NewNVFP4Cast(%d, %d) = %v", bad[0], bad[1], err)
		}
	}
	if err := c.CastBand(make([]byte, k/2-1), make([]byte, k/16), make([]byte, k/2), []byte{1, 1}, 1); !errors.Is(err, errShape) {
		t.Errorf("short output: %v", err)
	}
	if err := decodeNVFP4(make([]float32, 24), nil, nil, 1); !errors.Is(err, errShape) {
		t.Errorf("decodeNVFP4(24) = %v", err)
	}
}

// TestNVFP4CastNoAllocs: a band allocates nothing.
func TestNVFP4CastNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, k = 16, 1024
	packed, scales := randomMXFP4(rng, rows, k, 60, 127)
	c, _ := NewNVFP4Cast(k, 0)
	out, osc := make([]byte, len(packed)), make([]byte, 2*len(scales))
	if n := testing.AllocsPerRun(10, func() {
		if err := c.CastBand(out, osc, packed, scales, rows); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per band", n)
	}
}

// TestModelOptScaleDivision: for every finite BF16 amax, bf16(amax/448) is the
// same whether the quotient is exact, float32 division (torch on CPU) or
// multiplication by float32(1/448) (torch on CUDA).
func TestModelOptScaleDivision(t *testing.T) {
	for m := range uint16(0x7F80) {
		a := BF16ToF32(m)
		exact := F32ToBF16(float32(float64(a) / maxE4M3)) // float64 quotient: double rounding cannot bite at 24 → 8 bits here
		div := F32ToBF16(a / maxE4M3)
		mul := F32ToBF16(a * invMaxE4M3)
		if exact != div || div != mul || math.Float32bits(modelOptScale(m)) != uint32(div)<<16 {
			t.Fatalf("amax 0x%04x: exact 0x%04x, div 0x%04x, mul 0x%04x", m, exact, div, mul)
		}
	}
}

// TestModelOptOptions: ModelOpt numerics take BF16 and FP32 scales only, and
// have no 1e-4 floor (an all-zero block gets scale 0 and NaN codes).
func TestModelOptOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		in   Elem
		fmt  ScaleFmt
	}{{"F32 source", F32, ScaleFP32}, {"UE8M0", BF16, ScaleUE8M0}} {
		q := NewQuantizer(128, c.in, c.fmt)
		q.Numerics = ModelOpt
		if err := q.QuantizeBandAt(0, make([]byte, 128), make([]float32, 1), make([]byte, 4*128), 1); !errors.Is(err, errShape) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	q := NewQuantizer(130, BF16, ScaleFP32)
	q.Numerics = ModelOpt
	src := make([]byte, 2*2*130)
	src[1] = 0x80                         // -0
	src[2*129], src[2*129+1] = 0x80, 0x3F // 1.0 in the second column block
	dst, sc := make([]byte, 2*130), make([]float32, 2)
	if err := q.quantizeNext(dst, sc, src, 2); err != nil {
		t.Fatal(err)
	}
	if sc[0] != 0 || dst[0] != 0xFF || dst[1] != 0xFF || q.ZeroScaleBlocks != 1 {
		t.Errorf("zero block: scale %g, codes 0x%02x 0x%02x, %d zero-scale blocks", sc[0], dst[0], dst[1], q.ZeroScaleBlocks)
	}
	if want := BF16ToF32(F32ToBF16(1.0 / 448)); sc[1] != want || dst[129] != 0x7E || dst[128] != 0 {
		t.Errorf("block 1: scale %g (want %g), codes 0x%02x 0x%02x", sc[1], want, dst[128], dst[129])
	}
	if ModelOpt.String() != "modelopt" || DeepGEMM.String() != "deepgemm" {
		t.Error("Numerics names")
	}
}

// FuzzNVFP4Cast: any codes and scale bytes with any K_max at or above theirs
// cast without panic, NaN bytes are refused, and the lossy count matches the
// exact comparison.
func FuzzNVFP4Cast(f *testing.F) {
	f.Add([]byte{0x8f, 0x31, 0x08, 0x77}, []byte{127}, uint8(0))
	f.Add([]byte{0xff, 0x99}, []byte{0}, uint8(30))
	f.Add([]byte{0x7c, 0x4f}, []byte{254}, uint8(0))
	f.Add([]byte{0x01, 0x02}, []byte{1}, uint8(200))
	f.Fuzz(func(t *testing.T, codes, scales []byte, extra uint8) {
		if len(scales) == 0 || len(scales) > 64 {
			return
		}
		const k = MXGroupSize
		rows := len(scales)
		packed := make([]byte, rows*k/2)
		for i := range packed {
			if len(codes) > 0 {
				packed[i] = codes[i%len(codes)]
			}
		}
		var m KMax
		if err := m.Add(scales); err != nil {
			if !errors.Is(err, ErrNonFinite) {
				t.Fatal(err)
			}
			return
		}
		kmax := min(m.Value+int(extra), maxKMax)
		c, err := NewNVFP4Cast(k, kmax)
		if err != nil {
			t.Fatal(err)
		}
		out, osc := make([]byte, len(packed)), make([]byte, 2*len(scales))
		if err := c.CastBand(out, osc, packed, scales, rows); err != nil {
			t.Fatal(err)
		}
		if got, want := c.Stats.Lossy, exactLossy(packed, scales, out, osc, c.Scale2, k); got != want {
			t.Fatalf("lossy %d, exact %d", got, want)
		}
	})
}

// TestModelOptReciprocal: for every normal BF16 scale and a spread of BF16
// elements up to 448 times it, bf16(x·float32(1/sf)) equals bf16(x/sf), the
// rounding ModelOpt's division gives.
func TestModelOptReciprocal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for s := uint16(0x0080); s < 0x7F80; s++ {
		sf := BF16ToF32(s)
		inv := 1 / sf
		for range 48 {
			x := BF16ToF32(uint16(rng.Uint32()) & 0x7FFF)
			if x > sf*maxE4M3*1.01 || math.IsInf(float64(x), 0) || x != x {
				continue
			}
			if a, b := F32ToBF16(x/sf), F32ToBF16(x*inv); a != b {
				t.Fatalf("x %g, sf %g: divide 0x%04x, multiply 0x%04x", x, sf, a, b)
			}
		}
	}
}

// The cast counts marshal in the report's keys, with NVIDIA's lossless count,
// and read back.
func TestCastStatsJSON(t *testing.T) {
	st := CastStats{Blocks: 10, OutOfRange: 3, Lossy: 2}
	b, err := json.Marshal(st)
	if want := `{"blocks":10,"out_of_range":3,"lossless":7,"lossy":2}`; err != nil || string(b) != want {
		t.Fatalf("got %s, %v; want %s", b, err, want)
	}
	var back CastStats
	if err := json.Unmarshal(b, &back); err != nil || back != st {
		t.Fatalf("read back %+v, %v; want %+v", back, err, st)
	}
}

// decodeNVFP4 widens one row of NVFP4 to float32 the way ModelOpt's
// NVFP4QTensor.dequantize does: one E4M3 scale per 16 elements, value =
// code × float32(scale × scale2) in float32, and code 0x8 gives +0. For the
// cast's outputs scale × scale2 is a power of two, so the values are exact.
// NaN scale codes (0x7F, 0xFF) give NaN.
func decodeNVFP4(dst []float32, packed, scales []byte, scale2 float32) error {
	return decodeFP4(dst, packed, scales, NVFP4GroupSize, &nvE2M1, func(g int) (float32, error) {
		return float32(E4M3ToF32(scales[g]) * scale2), nil
	})
}
