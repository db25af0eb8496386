package quant

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error this package returns wraps one of them.
var (
	// ErrNonFinite: an Inf or NaN where a finite value is required (an input
	// element, an E8M0 scale of 0xFF).
	ErrNonFinite = errors.New("non-finite value")
	// errShape: dimensions out of range or a buffer of the wrong length.
	errShape = errors.New("bad shape")
	// errNotUE8M0: a scale that is not a non-negative power of two (or zero)
	// representable as a UE8M0 exponent byte.
	errNotUE8M0 = errors.New("scale is not UE8M0")
	// ErrRange: a scale outside what the operation accepts (an E8M0 exponent
	// above the K_max an MXFP4 → NVFP4 cast was set up with, a block scale
	// at which the block's codes dequantize to infinity).
	ErrRange = errors.New("scale out of range")
	// errInconsistent: a packed UE8M0 buffer whose broadcast rows of one
	// 128-row block disagree, or whose padding slots are not zero.
	errInconsistent = errors.New("inconsistent packed scales")
)

// NonFiniteError locates a non-finite input element of a block quantization,
// so that a converter can name the tensor, row band and column block.
type NonFiniteError struct {
	Elem     Elem   // source format
	Bits     uint32 // the element's bit pattern
	Band     int    // row band (rows Band*128 .. Band*128+127 of the matrix)
	Row      int    // row in the matrix
	ColBlock int    // column block (columns ColBlock*128 .. ColBlock*128+127)
	Col      int    // column in the matrix
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("%v: %s 0x%0*x at row %d, column %d (row band %d, column block %d)",
		ErrNonFinite, e.Elem, 2*e.Elem.Size(), e.Bits, e.Row, e.Col, e.Band, e.ColBlock)
}

// Unwrap lets errors.Is match ErrNonFinite.
func (e *NonFiniteError) Unwrap() error { return ErrNonFinite }

// ScaleOverflowError locates a block of finite elements whose scale is so
// large that the block's largest code dequantizes to infinity: with UE8M0
// scales, an amax near the top of the float32 range rounds its scale up to
// 2^120, and code 256 × 2^120 overflows. Writing it would give a weight that
// does not dequantize to its source, so the block is refused instead.
type ScaleOverflowError struct {
	Elem     Elem    // source format
	Bits     uint32  // the block's largest magnitude, as a bit pattern of Elem
	Band     int     // row band (rows Band*128 .. Band*128+127 of the matrix)
	ColBlock int     // column block (columns ColBlock*128 .. ColBlock*128+127)
	Scale    float32 // the block's scale
}

func (e *ScaleOverflowError) Error() string {
	return fmt.Sprintf("%v: the largest magnitude %s 0x%0*x of row band %d, column block %d gets the scale %g, at which it dequantizes to infinity",
		ErrRange, e.Elem, 2*e.Elem.Size(), e.Bits, e.Band, e.ColBlock, e.Scale)
}

// Unwrap lets errors.Is match ErrRange.
func (e *ScaleOverflowError) Unwrap() error { return ErrRange }
