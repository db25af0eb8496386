package quant

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
)

// naiveErr is the error of a quantized band computed element by element in
// float64 (x̂ = float32(code value × block scale)), for comparison.
func naiveErr(src []byte, codes []byte, scales []float32, rows, k int) ErrStats {
	var s ErrStats
	nkb := numBlocks(k)
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
			q.Numerics = num
			q.Measure = &got[i]
			codes := make([]byte, rows*k)
			scales := make([]float32, numBlocks(k))
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

// The one-pass encode-and-measure kernel writes the codes the encoder
// writes (encodeGo; with ModelOpt's cast, encodeModelOpt) and the lane
// sums, maxima and counts errWindowGo takes over those codes, bit for bit:
// windows of whole vectors and with leftover columns, a window with
// elements in every E4M3 binade (subnormal codes and zeros included), ±0,
// and scales that saturate the top code or not.
func TestEncodeErrMatchesPortable(t *testing.T) {
	eachKernel(t, func(t *testing.T) {
		for _, mo := range []bool{false, true} {
			t.Run(map[bool]string{false: "deepgemm", true: "modelopt"}[mo], func(t *testing.T) { testEncodeErr(t, mo) })
		}
	})
}

func testEncodeErr(t *testing.T, modelOpt bool) {
	const rows, k = 37, 200
	src := make([]byte, 2*rows*k)
	genFill(src, BF16, k, region{R0: 0, R1: rows, C0: 0, C1: k, Seed: 11, ELo: 100, EHi: 135})
	binary.LittleEndian.PutUint16(src[2*7:], 0x8000) // −0
	binary.LittleEndian.PutUint16(src[2*9:], 0)
	for _, cols := range []int{8, 16, 40, 128, 131, 200} {
		amax := BF16ToF32(amax16Go(src, 2*k, rows, cols))
		// amax/470 and amax/500 make NaN codes (from 464 and from 480 up),
		// whose lanes are a stand-in: only the codes are compared.
		sfs := []float32{amax / 448, amax * invMaxE4M3, ceilUE8M0(amax / 448), amax / 440, amax / 460, amax / 470, amax / 500}
		if modelOpt {
			sfs[1] = modelOptScale(F32ToBF16(amax))
		}
		for _, sf := range sfs {
			top := satTop(sf, amax)
			var want, got laneSums
			wantCodes, gotCodes := make([]byte, rows*k), make([]byte, rows*k)
			if modelOpt {
				encodeModelOpt(wantCodes, k, src, 2*k, rows, cols, sf)
			} else {
				encodeGo(BF16, wantCodes, k, src, 2*k, rows, cols, 1/sf)
			}
			errWindowGo(&want, wantCodes, k, src, 2*k, rows, 0, cols&^7, sf, top)
			errWindowGo(&want, wantCodes, k, src, 2*k, rows, cols&^7, cols, sf, top)
			encodeErr(&got, gotCodes, k, src, 2*k, rows, cols, 1/sf, sf, top, modelOpt)
			if !bytes.Equal(gotCodes, wantCodes) {
				t.Errorf("%d columns, scale %g: the codes differ from the encoder's", cols, sf)
			}
			if nan := slices.ContainsFunc(wantCodes, func(c byte) bool { return c&0x7F == 0x7F }); nan != (sf == amax/470 || sf == amax/500) {
				t.Errorf("%d columns, scale %g: NaN codes %v", cols, sf, nan)
			} else if !nan && got != want {
				t.Errorf("%d columns, scale %g: lanes %+v, portable %+v", cols, sf, got, want)
			}
			if sf == amax/460 && top == float32(math.Inf(1)) {
				t.Errorf("scale %g saturates nothing: the test does not reach the count", sf)
			}
		}
	}
}

// The ModelOpt encoder with its vector kernel writes encodeModelOpt's
// portable bytes for every finite BF16 source of magnitude up to the
// block's amax (whose product lands in every E4M3 binade, subnormals and
// the BF16 rounding of the product's ties included), for BF16 scales of a
// few mantissas and the amax/448 a block of that amax gets, with leftover
// columns.
func TestEncodeModelOptMatchesPortable(t *testing.T) {
	const amaxBits = 0x43E0 // 448
	var xs []uint16
	for b := uint16(0); b <= amaxBits; b++ {
		xs = append(xs, b, b|0x8000)
	}
	cols := 16*7 + 5
	rows := (len(xs) + cols - 1) / cols
	src := make([]byte, 2*rows*cols)
	for i, b := range xs {
		binary.LittleEndian.PutUint16(src[2*i:], b)
	}
	for _, sf := range []float32{1, modelOptScale(amaxBits), modelOptScale(0x3F81), BF16ToF32(0x3FB3), BF16ToF32(0x3AFF), BF16ToF32(0x42C5), 0x1p-120} {
		want, got := make([]byte, rows*cols), make([]byte, rows*cols)
		encodeModelOpt(want, cols, src, 2*cols, rows, cols, sf)
		encodeMO(got, cols, src, 2*cols, rows, cols, sf)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("scale %g: source %#04x: code %#02x, portable %#02x", sf, binary.LittleEndian.Uint16(src[2*i:]), got[i], want[i])
			}
		}
	}
}

// sumSq4s (the vector kernel where the CPU has it) gives each block's
// 4·Σv² over its 32 E2M1 codes, every byte value included, for runs of
// blocks of several lengths.
func TestSumSq4s(t *testing.T) {
	eachKernel(t, func(t *testing.T) {
		src := make([]byte, 16*300)
		for i := range src {
			src[i] = byte(i*37 + i/256)
		}
		for _, n := range []int{1, 2, 16, 255, 256, 300} {
			got := make([]uint16, n+1)
			got[n] = 0xBEEF
			sumSq4s(got, src[:16*n])
			for b := range n {
				want := 0.0
				for _, v := range src[16*b : 16*b+16] {
					lo, hi := float64(e2m1Values[v&7]), float64(e2m1Values[v>>4&7])
					want += 4*lo*lo + 4*hi*hi
				}
				if float64(got[b]) != want {
					t.Fatalf("%d blocks: block %d: %d, want %g", n, b, got[b], want)
				}
			}
			if got[n] != 0xBEEF {
				t.Fatalf("%d blocks: wrote past them", n)
			}
		}
	})
}
