package quant

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestPackMXFP4Errors(t *testing.T) {
	p, s := make([]byte, 64), make([]byte, 4)
	if _, err := packMXFP4(p, s, make([]byte, 2*48), 1, 48); !errors.Is(err, ErrShape) {
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
		if got, ok := MXFP4ScaleByte(c.amax); !ok || got != c.want {
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
