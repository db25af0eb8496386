package safetensors

import (
	"fmt"
	"math/bits"
)

// TensorInfo describes one tensor of a file; Begin and End are its data_offsets.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	Begin int64
	End   int64
}

// Size is the tensor's byte length.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// TensorSpec names a tensor to be written: no offsets yet, the layout assigns them.
type TensorSpec struct {
	Name  string
	DType DType
	Shape []int64
}

// maxElements bounds element counts so that bit counts (at most 64 bits an
// element) never overflow int64: 2^57-1 elements are at most 2^63-64 bits.
const maxElements = int64(1)<<57 - 1

// NumElements multiplies a shape with overflow checks.
func NumElements(shape []int64) (int64, error) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("%w: negative dimension %d", errShape, d)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > uint64(maxElements) {
			return 0, fmt.Errorf("%w: %v overflows", errShape, shape)
		}
		n = lo
	}
	return int64(n), nil
}

// ByteSize is a tensor's byte count; it fails when the element count overflows
// or the bits do not fill whole bytes.
func ByteSize(dt DType, shape []int64) (int64, error) {
	if !dt.valid() {
		return 0, fmt.Errorf("%w: %d", errDType, uint8(dt))
	}
	n, err := NumElements(shape)
	if err != nil {
		return 0, err
	}
	b := n * dt.Bits() // n < 2^57 and bits ≤ 64: no overflow
	if b%8 != 0 {
		return 0, fmt.Errorf("%w: %d elements of %s are not a whole number of bytes", ErrSizeMismatch, n, dt)
	}
	return b / 8, nil
}
