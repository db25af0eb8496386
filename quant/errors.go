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
	errShape     = errors.New("bad shape")          // dimensions out of range, a buffer too short
	errNotUE8M0  = errors.New("scale is not UE8M0") // not zero or a power of two a UE8M0 byte holds
	// ErrRange: a scale outside what the operation accepts (an E8M0 exponent
	// above an MXFP4 → NVFP4 cast's K_max, a block scale at which the block's
	// codes dequantize to infinity).
	ErrRange = errors.New("scale out of range")
	// errInconsistent: packed UE8M0 rows of one 128-row block that disagree,
	// or padding slots that are not zero.
	errInconsistent = errors.New("inconsistent packed scales")
)

// BlockError locates what a block quantization refused: a non-finite source
// element (ErrNonFinite; Bits, Row and Col say which), or a block whose scale
// makes its largest code dequantize to infinity (ErrRange; Bits the largest
// magnitude: with UE8M0 an amax near the float32 maximum gets scale 2^120, and
// code 256 × 2^120 overflows).
type BlockError struct {
	Err      error   // ErrNonFinite or ErrRange, which Unwrap returns
	Elem     Elem    // source format
	Bits     uint32  // a bit pattern of Elem
	Band     int     // row band (rows Band*128 .. Band*128+127 of the matrix)
	Row      int     // row in the matrix (ErrNonFinite)
	ColBlock int     // column block (columns ColBlock*128 .. ColBlock*128+127)
	Col      int     // column in the matrix (ErrNonFinite)
	Scale    float32 // the block's scale (ErrRange)
}

func (e *BlockError) Error() string {
	if e.Err == ErrRange {
		return fmt.Sprintf("%v: the largest magnitude %s 0x%0*x of row band %d, column block %d gets the scale %g, at which it dequantizes to infinity",
			ErrRange, e.Elem.name(), 2*e.Elem.Size(), e.Bits, e.Band, e.ColBlock, e.Scale)
	}
	return fmt.Sprintf("%v: %s 0x%0*x at row %d, column %d (row band %d, column block %d)",
		e.Err, e.Elem.name(), 2*e.Elem.Size(), e.Bits, e.Row, e.Col, e.Band, e.ColBlock)
}

// Unwrap lets errors.Is match Err.
func (e *BlockError) Unwrap() error { return e.Err }
