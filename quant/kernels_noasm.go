//go:build !amd64

package quant

func amax16(src []byte, stride, rows, cols int) uint16 { return amax16Go(src, stride, rows, cols) }

func amax32(src []byte, stride, rows, cols int) uint32 { return amax32Go(src, stride, rows, cols) }

func encode(in Elem, dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv float32) {
	encodeGo(in, dst, dstStride, src, srcStride, rows, cols, inv)
}

func encodeMO(dst []byte, dstStride int, src []byte, srcStride, rows, cols int, sf float32) {
	encodeModelOpt(dst, dstStride, src, srcStride, rows, cols, sf)
}

func encodeErr(l *laneSums, dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv, sf, top float32, modelOpt bool) {
	encodeErrGo(l, dst, dstStride, src, srcStride, rows, cols, inv, sf, top, modelOpt)
}

func sumSq4s(dst []uint16, src []byte) { sumSq4sGo(dst, src) }
