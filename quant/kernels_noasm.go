//go:build !amd64

package quant

func amax16(src []byte, stride, rows, cols int) uint16 { return amax16Go(src, stride, rows, cols) }

func amax32(src []byte, stride, rows, cols int) uint32 { return amax32Go(src, stride, rows, cols) }

func encode(in Elem, dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv float32) {
	encodeGo(in, dst, dstStride, src, srcStride, rows, cols, inv)
}

func dequantRow(dst []float32, src []byte, scales []float32) { dequantRowGo(dst, src, scales) }

func errRowBF16(l *laneSums, src []byte, xhat []float32) { errRowBF16Go(l, src, xhat, 0) }
