package safetensors

import "fmt"

// DType is a safetensors element type. The numeric order of the values is the
// reference serializer's dtype order (huggingface safetensors' Dtype enum), which
// decides where a tensor lands in a file written in canonical form.
type DType uint8

// The 22 dtypes of the reference, in its enum order (ascending alignment/size).
const (
	bOOL DType = iota
	// F4 is a 4-bit float (E2M1); two elements per byte.
	F4
	f6_E2M3
	f6_E3M2
	// U8 is an unsigned byte (also the carrier of packed MXFP4 codes and E8M0 scales).
	U8
	i8
	f8_E5M2
	// F8_E4M3 is the 8-bit E4M3FN float used by block-FP8 weights.
	F8_E4M3
	f8_E8M0
	f8_E4M3FNUZ
	f8_E5M2FNUZ
	i16
	u16
	// F16 is IEEE half precision.
	F16
	// BF16 is bfloat16.
	BF16
	// I32 is a signed 32-bit integer.
	I32
	u32
	// F32 is IEEE single precision.
	F32
	c64
	f64
	i64
	u64

	numDTypes = int(u64) + 1
)

// dtypeFacts holds each dtype's header name and width in bits.
var dtypeFacts = [numDTypes]struct {
	name string
	bits int64
}{
	bOOL: {"BOOL", 8}, F4: {"F4", 4}, f6_E2M3: {"F6_E2M3", 6}, f6_E3M2: {"F6_E3M2", 6},
	U8: {"U8", 8}, i8: {"I8", 8}, f8_E5M2: {"F8_E5M2", 8}, F8_E4M3: {"F8_E4M3", 8},
	f8_E8M0: {"F8_E8M0", 8}, f8_E4M3FNUZ: {"F8_E4M3FNUZ", 8}, f8_E5M2FNUZ: {"F8_E5M2FNUZ", 8},
	i16: {"I16", 16}, u16: {"U16", 16}, F16: {"F16", 16}, BF16: {"BF16", 16},
	I32: {"I32", 32}, u32: {"U32", 32}, F32: {"F32", 32}, c64: {"C64", 64},
	f64: {"F64", 64}, i64: {"I64", 64}, u64: {"U64", 64},
}

var dtypeByName = func() map[string]DType {
	m := make(map[string]DType, numDTypes)
	for i, f := range dtypeFacts {
		m[f.name] = DType(i)
	}
	return m
}()

// String returns the dtype's name as written in safetensors headers.
func (d DType) String() string {
	if int(d) < numDTypes {
		return dtypeFacts[d].name
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Bits is the width of one element in bits (4 for F4, 6 for F6_*).
func (d DType) Bits() int64 {
	if int(d) < numDTypes {
		return dtypeFacts[d].bits
	}
	return 0
}

// valid reports whether d is one of the 22 known dtypes.
func (d DType) valid() bool { return int(d) < numDTypes }

// parseDType maps a header dtype name to its DType.
func parseDType(s string) (DType, error) {
	if d, ok := dtypeByName[s]; ok {
		return d, nil
	}
	return 0, fmt.Errorf("%w: %q", errDType, s)
}

// MarshalText writes the header name, so DTypes serialize as strings in JSON.
func (d DType) MarshalText() ([]byte, error) {
	if !d.valid() {
		return nil, fmt.Errorf("%w: %d", errDType, uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText parses a header name.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := parseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
