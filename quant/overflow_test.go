package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand"
	"testing"
)

// A finite BF16 near the top of the range (0x7F7F) rounds its UE8M0 block
// scale up to 2^120, where its code (256) dequantizes to +Inf: the block is
// refused, naming it. With FP32 scales the same block quantizes and
// dequantizes finite.
func TestUE8M0ScaleOverflowRefused(t *testing.T) {
	const k = 256
	src := make([]byte, 2*k)
	binary.LittleEndian.PutUint16(src[2*200:], 0x7F7F) // column block 1
	dst, scales := make([]byte, k), make([]float32, 2)
	err := NewQuantizer(k, BF16, ScaleUE8M0).QuantizeBandAt(3, dst, scales, src, 1)
	var so *BlockError
	if !errors.As(err, &so) || !errors.Is(err, ErrRange) || so.Err != ErrRange || so.Band != 3 || so.ColBlock != 1 || so.Bits != 0x7F7F || so.Scale != 0x1p120 {
		t.Fatalf("got %v (%+v), want a BlockError (ErrRange) for band 3, column block 1, scale 2^120", err, so)
	}
	if err := NewQuantizer(k, BF16, ScaleFP32).QuantizeBandAt(3, dst, scales, src, 1); err != nil {
		t.Fatal(err)
	}
	if v := E4M3ToF32(dst[200]) * scales[1]; math.IsInf(float64(v), 0) || v <= 0 {
		t.Fatalf("fp32 scale: dequantized %g", v)
	}
}

// Property: over random BF16 bit patterns, whenever a band quantizes, every
// code dequantizes (code × scale in float32, as engines compute it) to a
// finite value, for every numerics and scale format.
func TestQuantizedDequantizesFinite(t *testing.T) {
	rng := rand.New(rand.NewSource(24))
	const k, rows = 256, 4
	src := make([]byte, 2*k*rows)
	dst, scales := make([]byte, k*rows), make([]float32, 2)
	trials := 4000
	if testing.Short() {
		trials = 1000
	}
	ok := 0
	for n := 0; n < trials; n++ {
		// Bit patterns from the whole range, near its top, or near one binade.
		for i := 0; i < k*rows; i++ {
			var b uint16
			switch n % 3 {
			case 0:
				b = uint16(rng.Intn(1 << 16))
			case 1:
				b = 0x7F00 | uint16(rng.Intn(0x80)) | uint16(rng.Intn(2))<<15
			default:
				b = 0x3F00 | uint16(rng.Intn(0x100))
			}
			if b&0x7F80 == 0x7F80 {
				b &^= 0x0080 // keep it finite: non-finite inputs are refused before
			}
			binary.LittleEndian.PutUint16(src[2*i:], b)
		}
		if n%5 == 0 { // a near-max value among ordinary ones
			binary.LittleEndian.PutUint16(src[2*rng.Intn(k*rows):], 0x7F7F)
		}
		for _, fmt := range []ScaleFmt{ScaleFP32, ScaleUE8M0} {
			for _, num := range []Numerics{DeepGEMM, ModelOpt} {
				q := NewQuantizer(k, BF16, fmt)
				if q.Numerics = num; q.numericsErr() != nil {
					continue
				}
				err := q.QuantizeBandAt(0, dst, scales, src, rows)
				if err != nil {
					if !errors.Is(err, ErrRange) {
						t.Fatalf("%v/%v: %v", fmt, num, err)
					}
					continue
				}
				ok++
				for i, c := range dst {
					s := scales[(i%k)/BlockSize]
					if s == 0 && num == ModelOpt {
						continue // ModelOpt's zero-scale block
					}
					if v := E4M3ToF32(c) * s; math.IsInf(float64(v), 0) {
						x := binary.LittleEndian.Uint16(src[2*i:])
						t.Fatalf("%v/%v: BF16 %#04x → code %#02x × scale %g = %g", fmt, num, x, c, s, v)
					}
				}
			}
		}
	}
	if ok == 0 {
		t.Fatal("no band quantized")
	}
}
