package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/x448/float16"
)

// Elem is the source element format of a band.
type Elem uint8

const (
	// BF16 is bfloat16, two little-endian bytes; the dtype of K3's BF16 weights.
	BF16 Elem = iota
	// F16 is IEEE half precision, two little-endian bytes.
	F16
	// F32 is IEEE single precision, four little-endian bytes.
	F32
)

var elemFacts = [...]struct {
	name string
	size int    // bytes per element
	inf  uint32 // magnitude bits of +Inf: magnitudes at or above it are Inf or NaN
}{
	BF16: {"BF16", 2, 0x7F80},
	F16:  {"F16", 2, 0x7C00},
	F32:  {"F32", 4, 0x7F800000},
}

func (e Elem) valid() bool { return int(e) < len(elemFacts) }

// name returns the safetensors dtype name of e.
func (e Elem) name() string {
	if !e.valid() {
		return fmt.Sprintf("Elem(%d)", uint8(e))
	}
	return elemFacts[e].name
}

// Size returns the number of bytes of one element (0 for an invalid Elem).
func (e Elem) Size() int {
	if !e.valid() {
		return 0
	}
	return elemFacts[e].size
}

// BF16ToF32 widens a bfloat16 exactly: bfloat16 is the top half of a float32.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds to the nearest bfloat16, ties to even, as torch's scalar
// cast (c10::detail::round_to_nearest_even) does; every NaN becomes 0x7FC0.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7FFFFFFF > 0x7F800000 {
		return 0x7FC0
	}
	// Adding 0x7FFF plus the lowest kept bit carries exactly when the dropped
	// half is above one half, or equal to it with an odd kept half.
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}

// bits returns element i of b.
func (e Elem) bits(b []byte, i int) uint32 {
	if e == F32 {
		return binary.LittleEndian.Uint32(b[4*i:])
	}
	return uint32(binary.LittleEndian.Uint16(b[2*i:]))
}

// widen converts a bit pattern of format e to float32 exactly.
func (e Elem) widen(bits uint32) float32 {
	switch e {
	case BF16:
		return BF16ToF32(uint16(bits))
	case F16:
		return float16.Frombits(uint16(bits)).Float32()
	}
	return math.Float32frombits(bits)
}
