package quant

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestPackMXFP4Errors(t *testing.T) {
	p, s := make([]byte, 64), make([]byte, 4)
	if _, err := packMXFP4(p, s, make([]byte, 2*48), 1, 48); !errors.Is(err, errShape) {
		t.Errorf("K = 48: %v, want ErrShape", err)
	}
	src := make([]byte, 64)
	binary.LittleEndian.PutUint16(src[10:], 0x7FC0) // NaN
	if _, err := packMXFP4(p, s, src, 1, 32); !errors.Is(err, ErrNonFinite) {
		t.Errorf("NaN element: %v, want ErrNonFinite", err)
	}
	binary.LittleEndian.PutUint16(src[10:], 0x7F70) // 1.875·2^127: the rule's power of two is Inf
	if _, err := packMXFP4(p, s, src, 1, 32); !errors.Is(err, ErrRange) {
		t.Errorf("amax over 1.75·2^127: %v, want ErrRange", err)
	}
}

func TestMXFP4ScaleByte(t *testing.T) {
	for _, c := range []struct {
		amax uint16
		want uint8
	}{
		{0, 0}, {0x0001, 0}, {0x3F80, 125}, // 1.0 → 2^0 → 127−2
		{0x3FDF, 125}, // 1.7421875: mantissa below 0.75 stays
		{0x3FE0, 126}, // 1.75 rounds up to 2
		{0x40C0, 127}, // 6.0 → 4 → scale 1
		{0x7F5F, 252}, // just under 1.75·2^127
	} {
		if got, ok := mxfp4ScaleByte(c.amax); !ok || got != c.want {
			t.Errorf("amax 0x%04x: %d, %v; want %d", c.amax, got, ok, c.want)
		}
	}
}

// TestPackMXFP4RoundTrip: MXFP4 → BF16 → MXFP4 gives every value back, and every
// byte where the source's scale is the one the rule picks for the decoded
// values and no code is −0 (which decodes to −0 and packs as +0).
func TestPackMXFP4RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const k = 32
	for it := range 20000 {
		packed, scales := make([]byte, k/2), []byte{byte(1 + rng.IntN(250))}
		for i := range packed {
			packed[i] = byte(rng.IntN(256))
		}
		if it%3 == 0 { // the group's largest code is 6 or 4: the rule picks this scale or not
			packed[0] = 0x07
		}
		bf := make([]byte, 2*k)
		if _, err := MXFP4ToBF16(bf, packed, scales); err != nil {
			t.Fatal(err)
		}
		p2, s2 := make([]byte, k/2), make([]byte, 1)
		st, err := packMXFP4(p2, s2, bf, 1, k)
		if err != nil {
			t.Fatal(err)
		}
		if st.Lossy != 0 {
			t.Fatalf("case %d: values of an MXFP4 group did not come back", it)
		}
		back := make([]byte, 2*k)
		if _, err := MXFP4ToBF16(back, p2, s2); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2*k; i += 2 {
			a, b := BF16ToF32(binary.LittleEndian.Uint16(bf[i:])), BF16ToF32(binary.LittleEndian.Uint16(back[i:]))
			if a != b {
				t.Fatalf("case %d: element %d: %g came back as %g", it, i/2, a, b)
			}
		}
		negZero := false
		for _, b := range packed {
			negZero = negZero || b&0xF == 8 || b>>4 == 8
		}
		if s2[0] == scales[0] && !negZero && !bytes.Equal(p2, packed) {
			t.Fatalf("case %d: same scale, codes % x came back as % x", it, packed, p2)
		}
	}
}

// The error PackMXFP4Measured adds agrees with one computed element by
// element from the packed output (x̂ = code value × 2^(e−127)): counts and
// max exactly, sums to 1e-12.
func TestPackMXFP4MeasuredErr(t *testing.T) {
	const rows, k = 8, 128
	src := make([]byte, 2*rows*k)
	genFill(src, BF16, k, region{R0: 0, R1: rows, C0: 0, C1: k, Seed: 9, ELo: 110, EHi: 135})
	for i := 0; i < 64; i += 2 { // one all-zero group
		binary.LittleEndian.PutUint16(src[i:], 0)
	}
	packed, scales := make([]byte, rows*k/2), make([]byte, rows*k/MXGroupSize)
	var got ErrStats
	if _, err := PackMXFP4Measured(packed, scales, src, rows, k, &got); err != nil {
		t.Fatal(err)
	}
	var want ErrStats
	for g := range rows * k / MXGroupSize {
		lossy, zero := false, true
		for i := g * MXGroupSize; i < (g+1)*MXGroupSize; i++ {
			x := float64(BF16ToF32(binary.LittleEndian.Uint16(src[2*i:])))
			c := packed[i/2] >> (4 * (i & 1)) & 0xF
			y := float64(e2m1Table[c] * e8M0ToF32(scales[g]))
			d := x - y
			want.SumSq += x * x
			want.SumSqErr += d * d
			want.MaxAbs = max(want.MaxAbs, math.Abs(d))
			lossy, zero = lossy || d != 0, zero && x == 0
			if c&7 == 7 && math.Abs(x) > math.Abs(y) {
				want.Saturated++
			}
		}
		want.Blocks++
		if lossy {
			want.LossyBlocks++
		}
		if zero {
			want.ZeroTiles++
		}
	}
	if got.Blocks != want.Blocks || got.LossyBlocks != want.LossyBlocks || got.ZeroTiles != want.ZeroTiles || got.Saturated != want.Saturated ||
		got.NaN != 0 || got.MaxAbs != want.MaxAbs || !closeRel(got.SumSq, want.SumSq) || !closeRel(got.SumSqErr, want.SumSqErr) {
		t.Errorf("measured %+v, element by element %+v", got, want)
	}
	if want.Saturated == 0 || want.ZeroTiles != 1 {
		t.Errorf("the data should saturate some elements and hold one zero group: %+v", want)
	}
}
