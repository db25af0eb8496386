//go:build amd64

package quant

import "golang.org/x/sys/cpu"

var (
	cpuHasAVX2   = cpu.X86.HasAVX2
	cpuHasFMA    = cpu.X86.HasFMA // encodeErrBF16AVX2 adds with fused multiply-adds
	cpuHasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW
	// useAVX2 selects the vector kernels and useAVX512 encodeErrBF16AVX512
	// over encodeErrBF16AVX2; tests turn them off to compare the paths' bits.
	useAVX2   = cpuHasAVX2
	useAVX512 = cpuHasAVX512
)

// Vector kernels (kernels_amd64.s). cols must be a positive multiple of the
// vector width (16 elements; 8 for amax32); rows ≥ 1.
//
//go:noescape
func amax16AVX2(src *byte, stride, rows, cols int) uint16

//go:noescape
func amax32AVX2(src *byte, stride, rows, cols int) uint32

//go:noescape
func encodeBF16AVX2(dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv float32)

//go:noescape
func encodeF32AVX2(dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv float32)

func amax16(src []byte, stride, rows, cols int) uint16 {
	v := cols &^ 15
	if !useAVX2 || v == 0 {
		return amax16Go(src, stride, rows, cols)
	}
	m := amax16AVX2(&src[0], stride, rows, v)
	if v < cols {
		m = max(m, amax16Go(src[2*v:], stride, rows, cols-v))
	}
	return m
}

func amax32(src []byte, stride, rows, cols int) uint32 {
	v := cols &^ 7
	if !useAVX2 || v == 0 {
		return amax32Go(src, stride, rows, cols)
	}
	m := amax32AVX2(&src[0], stride, rows, v)
	if v < cols {
		m = max(m, amax32Go(src[4*v:], stride, rows, cols-v))
	}
	return m
}

func encode(in Elem, dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv float32) {
	v := cols &^ 15
	if !useAVX2 || v == 0 || in == F16 {
		encodeGo(in, dst, dstStride, src, srcStride, rows, cols, inv)
		return
	}
	if in == BF16 {
		encodeBF16AVX2(&dst[0], dstStride, &src[0], srcStride, rows, v, inv)
	} else {
		encodeF32AVX2(&dst[0], dstStride, &src[0], srcStride, rows, v, inv)
	}
	if v < cols {
		encodeGo(in, dst[v:], dstStride, src[in.Size()*v:], srcStride, rows, cols-v, inv)
	}
}

//go:noescape
func encodeModelOptAVX2(dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv float32)

// encodeMO is encodeModelOpt, with the vector kernel for whole vectors where
// sf is normal (so the quotient is the product by 1/sf).
func encodeMO(dst []byte, dstStride int, src []byte, srcStride, rows, cols int, sf float32) {
	v := cols &^ 15
	if !useAVX2 || v == 0 || sf < minNormalF32 {
		encodeModelOpt(dst, dstStride, src, srcStride, rows, cols, sf)
		return
	}
	_ = dst[(rows-1)*dstStride+v-1]
	_ = src[(rows-1)*srcStride+2*v-1]
	encodeModelOptAVX2(&dst[0], dstStride, &src[0], srcStride, rows, v, 1/sf)
	if v < cols {
		encodeModelOpt(dst[v:], dstStride, src[2*v:], srcStride, rows, cols-v, sf)
	}
}

//go:noescape
func encodeErrBF16AVX2(acc *laneSums, dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv, sf, top float32, modelOpt bool)

//go:noescape
func encodeErrBF16AVX512(acc *laneSums, dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv, sf, top float32, modelOpt bool)

// encodeErr is encodeErrGo bit for bit; the vector kernel does both steps in
// one pass over whole vectors (16 wide with AVX-512), loading each source once.
func encodeErr(l *laneSums, dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv, sf, top float32, modelOpt bool) {
	n := cols &^ 7
	if !useAVX2 || !cpuHasFMA || n == 0 {
		encodeErrGo(l, dst, dstStride, src, srcStride, rows, cols, inv, sf, top, modelOpt)
		return
	}
	_ = dst[(rows-1)*dstStride+n-1]
	_ = src[(rows-1)*srcStride+2*n-1]
	if useAVX512 && n%16 == 0 {
		encodeErrBF16AVX512(l, &dst[0], dstStride, &src[0], srcStride, rows, n, inv, sf, top, modelOpt)
	} else {
		encodeErrBF16AVX2(l, &dst[0], dstStride, &src[0], srcStride, rows, n, inv, sf, top, modelOpt)
	}
	if n < cols {
		encodeWindow(BF16, dst[n:], dstStride, src[2*n:], srcStride, rows, cols-n, inv, sf, modelOpt)
		errWindowGo(l, dst, dstStride, src, srcStride, rows, n, cols, sf, top)
	}
}

//go:noescape
func sumSq4AVX2(dst *uint16, src *byte, n int)

// sumSq4s writes sumSq4 of each 16-byte block of src to dst, as sumSq4sGo.
func sumSq4s(dst []uint16, src []byte) {
	n := len(src) / 16
	if !useAVX2 || n == 0 {
		sumSq4sGo(dst, src)
		return
	}
	_ = dst[n-1]
	sumSq4AVX2(&dst[0], &src[0], n)
}
