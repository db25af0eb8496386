package quant

import "encoding/binary"

// The block kernels work on a rows×cols window of a row-major band: src and
// dst start at the window's first element, rows stride bytes apart. On amd64
// with AVX2, vector versions take the columns that fill whole vectors.

// amax16Go returns the largest |x| bit pattern (x & 0x7FFF) of 16-bit elements.
func amax16Go(src []byte, stride, rows, cols int) uint16 {
	var m uint16
	for r := range rows {
		for c := range cols {
			m = max(m, binary.LittleEndian.Uint16(src[r*stride+2*c:])&0x7FFF)
		}
	}
	return m
}

// amax32Go returns the largest |x| bit pattern (x & 0x7FFFFFFF) of float32 elements.
func amax32Go(src []byte, stride, rows, cols int) uint32 {
	var m uint32
	for r := range rows {
		for c := range cols {
			m = max(m, binary.LittleEndian.Uint32(src[r*stride+4*c:])&0x7FFFFFFF)
		}
	}
	return m
}

// encodeGo writes e4m3(x·inv) for a window of elements of format in; the
// explicit float32 conversion keeps the product from being fused with the
// rounding that follows (torch rounds the product first).
func encodeGo(in Elem, dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv float32) {
	for r := range rows {
		d, s := dst[r*dstStride:r*dstStride+cols], src[r*srcStride:]
		for i := range d {
			d[i] = e4m3Select(float32(in.widen(in.bits(s, i)) * inv))
		}
	}
}

// encodeWindow encodes a window of format in with scale sf = 1/inv (with
// modelOpt, a BF16 one as encodeModelOpt does).
func encodeWindow(in Elem, dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv, sf float32, modelOpt bool) {
	if modelOpt {
		encodeMO(dst, dstStride, src, srcStride, rows, cols, sf)
	} else {
		encode(in, dst, dstStride, src, srcStride, rows, cols, inv)
	}
}

// encodeErrGo encodes a BF16 window as encodeWindow, then adds its error with
// errWindowGo in two passes: the columns of whole 8-lane vectors, then the rest.
func encodeErrGo(l *laneSums, dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv, sf, top float32, modelOpt bool) {
	encodeWindow(BF16, dst, dstStride, src, srcStride, rows, cols, inv, sf, modelOpt)
	n := cols &^ 7
	errWindowGo(l, dst, dstStride, src, srcStride, rows, 0, n, sf, top)
	errWindowGo(l, dst, dstStride, src, srcStride, rows, n, cols, sf, top)
}
