package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// naiveErr is the error of a quantized band computed element by element in
// float64 (x̂ = float32(code value × block scale)), for comparison.
func naiveErr(src []byte, codes []byte, scales []float32, rows, k int) ErrStats {
	var s ErrStats
	nkb := NumBlocks(k)
	for kb := range nkb {
		c0, c1 := kb*BlockSize, min(kb*BlockSize+BlockSize, k)
		lossy, zero := false, true
		for r := range rows {
			for c := c0; c < c1; c++ {
				x := float64(BF16ToF32(binary.LittleEndian.Uint16(src[2*(r*k+c):])))
				y := float64(E4M3ToF32(codes[r*k+c]) * scales[kb])
				zero = zero && x == 0
				if math.IsNaN(y) {
					s.NaN++
					lossy = true
					continue
				}
				d := x - y
				s.SumSq += x * x
				s.SumSqErr += d * d
				s.MaxAbs = max(s.MaxAbs, math.Abs(d))
				lossy = lossy || d != 0
				if codes[r*k+c]&0x7F == 0x7E && math.Abs(x) > math.Abs(y) {
					s.Saturated++
				}
			}
		}
		s.Blocks++
		if lossy {
			s.LossyBlocks++
		}
		if zero {
			s.ZeroTiles++
		}
	}
	return s
}

func closeRel(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Abs(b) }

// The FP8 error the quantizer measures agrees with a naive computation
// (counts and max exactly, sums to 1e-12), is the same bits on the vector
// and the portable kernels, and a band that fails leaves it unchanged.
func TestQuantizerErrStats(t *testing.T) {
	const rows, k = 128, 128*3 + 43 // a partial column block, not a multiple of 8 wide
	src := make([]byte, 2*rows*k)
	genFill(src, BF16, k, region{R0: 0, R1: rows, C0: 0, C1: k, Seed: 3, ELo: 100, EHi: 130})
	// Column block 2 spans 2^13..2^24: large scales.
	genFill(src, BF16, k, region{R0: 0, R1: rows, C0: 256, C1: 384, Seed: 5, ELo: 140, EHi: 150})
	// One all-zero column block's worth of a tile: the last block's first 16 rows stay, the rest is zeroed.
	for r := range rows {
		for c := 128; c < 256; c++ {
			binary.LittleEndian.PutUint16(src[2*(r*k+c):], 0)
		}
	}
	for _, num := range []Numerics{DeepGEMM, ModelOpt} {
		var got [2]ErrStats
		for i, vec := range []bool{true, false} {
			if vec && !useAVX2Available() {
				continue
			}
			setAVX2(vec)
			q := NewQuantizer(k, BF16, ScaleFP32)
			if err := q.SetNumerics(num); err != nil {
				t.Fatal(err)
			}
			q.SetErrStats(&got[i])
			codes := make([]byte, rows*k)
			scales := make([]float32, NumBlocks(k))
			if err := q.QuantizeBandAt(0, codes, scales, src, rows); err != nil {
				t.Fatal(err)
			}
			want := naiveErr(src, codes, scales, rows, k)
			g := got[i]
			if g.Blocks != want.Blocks || g.LossyBlocks != want.LossyBlocks || g.ZeroTiles != want.ZeroTiles || g.NaN != want.NaN ||
				g.Saturated != want.Saturated || g.MaxAbs != want.MaxAbs || !closeRel(g.SumSq, want.SumSq) || !closeRel(g.SumSqErr, want.SumSqErr) {
				t.Errorf("%v vector %v: %+v, naive %+v", num, vec, g, want)
			}
			if num == ModelOpt && (g.NaN != rows*128 || g.ZeroTiles != 1) {
				t.Errorf("ModelOpt zero tile: %d NaN, %d zero tiles; want %d and 1", g.NaN, g.ZeroTiles, rows*128)
			}
			// A band with a NaN fails and leaves the sums as they were.
			bad := append([]byte(nil), src...)
			binary.LittleEndian.PutUint16(bad[2*(5*k+300):], 0x7FC0)
			before := got[i]
			if err := q.QuantizeBandAt(1, codes, scales, bad, rows); !errors.Is(err, ErrNonFinite) {
				t.Fatalf("NaN band: %v", err)
			}
			if got[i] != before {
				t.Errorf("a failed band changed the sums: %+v → %+v", before, got[i])
			}
		}
		setAVX2(true)
		if useAVX2Available() && got[0] != got[1] {
			t.Errorf("%v: vector kernels %+v, portable %+v", num, got[0], got[1])
		}
	}
}
