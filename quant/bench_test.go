package quant

import (
	"sync"
	"testing"
)

// benchN, benchK is a KDA q_proj: [12288, 7168] BF16, 168 MiB.
const benchN, benchK = 12288, 7168

// benchMatrix fills a BF16 matrix with the deterministic generator used for the
// goldens (log-uniform magnitudes over ~20 binades, as real weights span).
func benchMatrix(n, k int) []byte {
	src := make([]byte, 2*n*k)
	genFill(src, BF16, k, region{R0: 0, R1: n, C0: 0, C1: k, Seed: 7, ELo: 108, EHi: 128})
	return src
}

var benchSrc = sync.OnceValue(func() []byte { return benchMatrix(benchN, benchK) })

// BenchmarkCopy is the floor: a plain copy of the same BF16 bytes, band by band.
func BenchmarkCopy(b *testing.B) {
	src := benchSrc()
	dst := make([]byte, 2*BlockSize*benchK)
	band := 2 * BlockSize * benchK
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < len(src); off += band {
			copy(dst, src[off:off+band])
		}
	}
}

func benchQuant(b *testing.B, fmt ScaleFmt, workers int) {
	src := benchSrc()
	band := 2 * BlockSize * benchK
	nb := len(src) / band
	type scratch struct {
		q      *Quantizer
		dst    []byte
		scales []float32
	}
	ws := make([]scratch, workers)
	for i := range ws {
		ws[i] = scratch{NewQuantizer(benchK, BF16, fmt), make([]byte, BlockSize*benchK), make([]float32, NumBlocks(benchK))}
	}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				s := ws[w]
				for i := w; i < nb; i += workers {
					if err := s.q.QuantizeBandAt(i, s.dst, s.scales, src[i*band:(i+1)*band], BlockSize); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}

func BenchmarkQuantizeFP32Scale1(b *testing.B)  { benchQuant(b, ScaleFP32, 1) }
func BenchmarkQuantizeUE8M0Scale1(b *testing.B) { benchQuant(b, ScaleUE8M0, 1) }
func BenchmarkQuantizeFP32Scale2(b *testing.B)  { benchQuant(b, ScaleFP32, 2) }
func BenchmarkQuantizeUE8M0Scale2(b *testing.B) { benchQuant(b, ScaleUE8M0, 2) }
