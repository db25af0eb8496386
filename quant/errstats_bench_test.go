package quant

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkQuantizeErrStats is BenchmarkQuantize's one-goroutine FP32-scale
// case with the error measurement off and on, side by side: the FP8
// kernel's worst case (every element measured; convert's other work is not
// in it). Where the CPU has AVX-512, on-avx2 is the measurement with the
// AVX2 kernel instead. MB/s is of BF16 input.
//
//	go test -run XXX -bench QuantizeErrStats ./quant
func BenchmarkQuantizeErrStats(b *testing.B) {
	src := benchSrc()
	arms := []string{"off", "on"}
	if avx512Available() {
		arms = append(arms, "on-avx2")
	}
	for _, name := range arms {
		on := name != "off"
		b.Run(name, func(b *testing.B) {
			if name == "on-avx2" {
				setAVX512(false)
				defer setAVX512(true)
			}
			var es ErrStats
			runBands(b, 1, func() quantScratch {
				q := NewQuantizer(benchK, BF16, ScaleFP32)
				if on {
					q.Measure = &es
				}
				return quantScratch{q, make([]byte, BlockSize*benchK), make([]float32, numBlocks(benchK))}
			}, func(s quantScratch, band int) error {
				return s.q.QuantizeBandAt(band, s.dst, s.scales, src[band*bandBytes:(band+1)*bandBytes], BlockSize)
			})
		})
	}
}

// BenchmarkNVFP4CastErrStats is BenchmarkNVFP4Cast's spread=12 case (every
// block in range: the exact path) with the error measurement off and on,
// side by side; MB/s is of MXFP4 code bytes.
//
//	go test -run XXX -bench NVFP4CastErrStats ./quant
func BenchmarkNVFP4CastErrStats(b *testing.B) {
	const rows, k = 3072, 3584
	rng := rand.New(rand.NewPCG(9, 12))
	packed, scales := randomMXFP4(rng, rows, k, 108, 120)
	var m KMax
	if err := m.Add(scales); err != nil {
		b.Fatal(err)
	}
	out, osc := make([]byte, BlockSize*k/2), make([]byte, BlockSize*k/16)
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			b.SetBytes(int64(len(packed)))
			var es ErrStats
			for b.Loop() {
				c, err := NewNVFP4Cast(k, m.Value)
				if err != nil {
					b.Fatal(err)
				}
				if on {
					c.Measure = &es
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
