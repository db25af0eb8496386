package quant

import "testing"

// BenchmarkQuantizeErrStats is BenchmarkQuantize's one-goroutine FP32-scale
// case with the error measurement off and on, side by side: the FP8
// kernel's worst case (every element measured; convert's other work is not
// in it). MB/s is of BF16 input.
//
//	go test -run XXX -bench QuantizeErrStats ./quant
func BenchmarkQuantizeErrStats(b *testing.B) {
	src := benchSrc()
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			var es ErrStats
			runBands(b, 1, func() quantScratch {
				q := NewQuantizer(benchK, BF16, ScaleFP32)
				if on {
					q.SetErrStats(&es)
				}
				return quantScratch{q, make([]byte, BlockSize*benchK), make([]float32, numBlocks(benchK))}
			}, func(s quantScratch, band int) error {
				return s.q.QuantizeBandAt(band, s.dst, s.scales, src[band*bandBytes:(band+1)*bandBytes], BlockSize)
			})
		})
	}
}
