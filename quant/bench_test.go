package quant

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// benchN, benchK is a KDA q_proj: [12288, 7168] BF16, 168 MiB.
const benchN, benchK = 12288, 7168

// benchSrc is that matrix filled by the golden generator with magnitudes
// log-uniform over 2^-15..2^1 (so every E4M3FN range, subnormals included,
// is hit at random).
var benchSrc = sync.OnceValue(func() []byte {
	src := make([]byte, 2*benchN*benchK)
	genFill(src, BF16, benchK, region{R0: 0, R1: benchN, C0: 0, C1: benchK, Seed: 7, ELo: 112, EHi: 128})
	return src
})

// bandBytes is one 128-row band of BF16 input.
const bandBytes = 2 * BlockSize * benchK

// runBands splits the bands of the matrix over workers goroutines, each with
// its own scratch made by mk.
func runBands[S any](b *testing.B, workers int, mk func() S, do func(s S, band int) error) {
	nb := benchN / BlockSize
	scratch := make([]S, workers)
	for i := range scratch {
		scratch[i] = mk()
	}
	b.SetBytes(int64(2 * benchN * benchK))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for band := w; band < nb; band += workers {
					if err := do(scratch[w], band); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}

// BenchmarkCopy is the floor: a plain copy of the same BF16 bytes, band by
// band into a per-worker buffer, the way the quantizer reads them.
func BenchmarkCopy(b *testing.B) {
	src := benchSrc()
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("goroutines=%d", w), func(b *testing.B) {
			runBands(b, w, func() []byte { return make([]byte, bandBytes) }, func(dst []byte, band int) error {
				copy(dst, src[band*bandBytes:(band+1)*bandBytes])
				return nil
			})
		})
	}
}

type quantScratch struct {
	q      *Quantizer
	dst    []byte
	scales []float32
}

// BenchmarkQuantize measures block quantization of the BF16 matrix; MB/s is
// of BF16 input.
func BenchmarkQuantize(b *testing.B) {
	src := benchSrc()
	for _, kernel := range []string{"vector", "portable"} {
		for _, f := range []ScaleFmt{ScaleFP32, ScaleUE8M0} {
			for _, w := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%v/goroutines=%d", kernel, f, w), func(b *testing.B) {
					if kernel == "vector" && !useAVX2Available() {
						b.Skip("no vector kernels here")
					}
					setAVX2(kernel == "vector")
					defer setAVX2(true)
					runBands(b, w, func() quantScratch {
						return quantScratch{NewQuantizer(benchK, BF16, f), make([]byte, BlockSize*benchK), make([]float32, numBlocks(benchK))}
					}, func(s quantScratch, band int) error {
						return s.q.QuantizeBandAt(band, s.dst, s.scales, src[band*bandBytes:(band+1)*bandBytes], BlockSize)
					})
				})
			}
		}
	}
}

// BenchmarkDequantize widens the quantized matrix back to float32; MB/s is of
// the BF16 the matrix came from (the FP8 read is half, the float32 written
// twice that).
func BenchmarkDequantize(b *testing.B) {
	src := benchSrc()
	nb, nkb := benchN/BlockSize, numBlocks(benchK)
	fp8, scales := make([]byte, benchN*benchK), make([]float32, nb*nkb)
	q := NewQuantizer(benchK, BF16, ScaleUE8M0)
	for band := range nb {
		if err := q.QuantizeBandAt(band, fp8[band*BlockSize*benchK:], scales[band*nkb:], src[band*bandBytes:], BlockSize); err != nil {
			b.Fatal(err)
		}
	}
	for _, kernel := range []string{"vector", "portable"} {
		for _, w := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", kernel, w), func(b *testing.B) {
				if kernel == "vector" && !useAVX2Available() {
					b.Skip("no vector kernels here")
				}
				setAVX2(kernel == "vector")
				defer setAVX2(true)
				runBands(b, w, func() []float32 { return make([]float32, BlockSize*benchK) }, func(dst []float32, band int) error {
					return dequantizeBand(dst, fp8[band*BlockSize*benchK:(band+1)*BlockSize*benchK], scales[band*nkb:], BlockSize, benchK)
				})
			})
		}
	}
}

// BenchmarkQuantizeModelOpt is BenchmarkQuantize's matrix under ModelOpt's
// FP8_PB_WO numerics (a product by the scale's reciprocal rounded to BF16,
// then to E4M3, per element).
func BenchmarkQuantizeModelOpt(b *testing.B) {
	src := benchSrc()
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprintf("goroutines=%d", w), func(b *testing.B) {
			runBands(b, w, func() quantScratch {
				q := NewQuantizer(benchK, BF16, ScaleFP32)
				q.Numerics = ModelOpt
				return quantScratch{q, make([]byte, BlockSize*benchK), make([]float32, numBlocks(benchK))}
			}, func(s quantScratch, band int) error {
				return s.q.QuantizeBandAt(band, s.dst, s.scales, src[band*bandBytes:(band+1)*bandBytes], BlockSize)
			})
		})
	}
}

// BenchmarkNVFP4Cast casts one K3 routed-expert w1 (MXFP4 [3072, 3584]:
// 5.25 MiB of codes, 0.33 MiB of scales) in 128-row bands, with exponents
// spread over 12 (every block in range, the K3 case) or 30 (a third out of
// range); MB/s is of MXFP4 code bytes.
func BenchmarkNVFP4Cast(b *testing.B) {
	const rows, k = 3072, 3584
	for _, spread := range []uint8{12, 30} {
		b.Run(fmt.Sprintf("spread=%d", spread), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(9, uint64(spread)))
			packed, scales := randomMXFP4(rng, rows, k, 120-spread, 120)
			out, osc := make([]byte, BlockSize*k/2), make([]byte, BlockSize*k/16)
			b.SetBytes(int64(len(packed)))
			b.ReportAllocs()
			for b.Loop() {
				var m KMax
				if err := m.Add(scales); err != nil {
					b.Fatal(err)
				}
				c, err := NewNVFP4Cast(k, m.Value)
				if err != nil {
					b.Fatal(err)
				}
				for r0 := 0; r0 < rows; r0 += BlockSize {
					if err := c.CastBand(out, osc, packed[r0*k/2:(r0+BlockSize)*k/2], scales[r0*k/32:(r0+BlockSize)*k/32], BlockSize); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
