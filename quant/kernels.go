package quant

import (
	"encoding/binary"
	"math"
)

// The block kernels work on a rows×cols window of a row-major band: src (and
// dst) start at the window's first element and consecutive rows are stride
// bytes (elements, for float32 dst) apart. Callers guarantee the slices cover
// the window. Each has a portable version here; on amd64 with AVX2 the
// dispatchers in kernels_amd64.go run the vector versions for the columns
// that fill whole vectors and these for the rest.

// amax16Go returns the largest |x| bit pattern (x & 0x7FFF) of 16-bit elements.
func amax16Go(src []byte, stride, rows, cols int) uint16 {
	var m uint16
	for r := range rows {
		m = max(m, maxMag16(src[r*stride:r*stride+2*cols]))
	}
	return m
}

// amax32Go returns the largest |x| bit pattern (x & 0x7FFFFFFF) of float32 elements.
func amax32Go(src []byte, stride, rows, cols int) uint32 {
	var m uint32
	for r := range rows {
		m = max(m, maxMag32(src[r*stride:r*stride+4*cols]))
	}
	return m
}

func maxMag16(s []byte) uint16 {
	var m0, m1 uint16
	for len(s) >= 4 {
		m0 = max(m0, binary.LittleEndian.Uint16(s)&0x7FFF)
		m1 = max(m1, binary.LittleEndian.Uint16(s[2:])&0x7FFF)
		s = s[4:]
	}
	if len(s) >= 2 {
		m0 = max(m0, binary.LittleEndian.Uint16(s)&0x7FFF)
	}
	return max(m0, m1)
}

func maxMag32(s []byte) uint32 {
	var m uint32
	for len(s) >= 4 {
		m = max(m, binary.LittleEndian.Uint32(s)&0x7FFFFFFF)
		s = s[4:]
	}
	return m
}

// encodeGo writes e4m3(x·inv) for a window of elements of format in.
func encodeGo(in Elem, dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv float32) {
	size := in.Size()
	for r := range rows {
		d := dst[r*dstStride : r*dstStride+cols]
		s := src[r*srcStride : r*srcStride+size*cols]
		switch in {
		case BF16:
			encodeBF16(d, s, inv)
		case F16:
			encodeF16(d, s, inv)
		case F32:
			encodeF32(d, s, inv)
		}
	}
}

// encodeWindow is encodeErr's encoder alone: a BF16 window by inv, or
// with modelOpt encodeModelOpt's bytes by sf.
func encodeWindow(dst []byte, dstStride int, src []byte, srcStride, rows, cols int, inv, sf float32, modelOpt bool) {
	if modelOpt {
		encodeMO(dst, dstStride, src, srcStride, rows, cols, sf)
	} else {
		encode(BF16, dst, dstStride, src, srcStride, rows, cols, inv)
	}
}

// encodeBF16 writes E4M3FromF32(x·inv) for each BF16 x of src. The product is
// converted to float32 explicitly so that no compiler may fuse it with the
// rounding arithmetic that follows (torch rounds the product first).
func encodeBF16(dst, src []byte, inv float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		x := BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		dst[i] = e4m3Select(float32(x * inv))
	}
}

func encodeF16(dst, src []byte, inv float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		x := f16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		dst[i] = e4m3Select(float32(x * inv))
	}
}

func encodeF32(dst, src []byte, inv float32) {
	src = src[:4*len(dst)]
	for i := range dst {
		x := math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		dst[i] = e4m3Select(float32(x * inv))
	}
}

// e4m3Select is E4M3FromF32 computing all three cases and selecting one, which
// the compiler turns into conditional moves: in a block of weights spanning
// many binades the subnormal case is taken at random, and a mispredicted branch
// costs more than the whole conversion.
func e4m3Select(f float32) uint8 {
	b := math.Float32bits(f)
	a := b & 0x7FFFFFFF
	r := (a - f32BiasShift + 0x7FFFF + (a>>20)&1) >> 20
	s := math.Float32bits(math.Float32frombits(a)+float32(1<<14)) - f32Bits2p14
	if a < f32BitsMinNorm {
		r = s
	}
	if a >= f32Bits480 {
		r = e4M3NaN
	}
	return uint8(r) | uint8(b>>24)&0x80
}
