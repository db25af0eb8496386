package safetensors

import (
	"slices"
	"testing"
)

// compactEntries are tensor entries around the compact form: the form
// itself (those in compactFast), and near misses the fast path must leave to
// the general parser.
var compactEntries = []string{
	`{"dtype":"BF16","shape":[7168],"data_offsets":[0,14336]}`,
	`{"dtype":"F32","shape":[],"data_offsets":[0,4]}`,
	`{"dtype":"F8_E4M3FNUZ","shape":[2,3],"data_offsets":[10,16]}`,
	`{"dtype":"U8","shape":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"data_offsets":[0,1]}`,
	`{"dtype":"U8","shape":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"data_offsets":[0,1]}`,
	`{"dtype":"BF16","shape":[999999999999999999],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[9999999999999999999],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[9223372036854775807],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[9223372036854775808],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[01],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[0],"data_offsets":[0,0]}`,
	`{"dtype":"BF16","shape":[-1],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[1.0],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[1e3],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[1E3],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[1,],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[,1],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[1 ],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0,2,4]}`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0]}`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[00,2]}`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0,2.5]}`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0,2],"x":1}`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0,2] }`,
	`{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}`,
	`{"dtype":"BF1","shape":[1],"data_offsets":[0,2]}`,
	`{"dtype":"BF16X","shape":[1],"data_offsets":[0,2]}`,
	`{"dtype":"\u0042F16","shape":[1],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0,2],"dtype":"F32"}`,
	`{"shape":[1],"dtype":"BF16","data_offsets":[0,2]}`,
	`{ "dtype":"BF16","shape":[1],"data_offsets":[0,2]}`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0,2`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0,`,
	`{"dtype":"BF16","shape":[1`,
	`{"dtype":"BF16`,
	`{"dtype":"`,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}`,
}

// compactFast are the entries of compactEntries the fast path answers.
var compactFast = map[string]bool{
	`{"dtype":"BF16","shape":[7168],"data_offsets":[0,14336]}`:                             true,
	`{"dtype":"F32","shape":[],"data_offsets":[0,4]}`:                                      true,
	`{"dtype":"F8_E4M3FNUZ","shape":[2,3],"data_offsets":[10,16]}`:                         true,
	`{"dtype":"U8","shape":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"data_offsets":[0,1]}`: true,
	`{"dtype":"BF16","shape":[999999999999999999],"data_offsets":[0,2]}`:                   true,
	`{"dtype":"BF16","shape":[0],"data_offsets":[0,0]}`:                                    true,
	`{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}`:                                   true,
}

// The compact fast path agrees with the general tensor parser wherever it
// answers, and leaves the position untouched where it does not.
func TestCompactTensorAgrees(t *testing.T) {
	for _, e := range compactEntries {
		if got := checkCompact(t, []byte(e)); got != compactFast[e] {
			t.Errorf("%s: fast path answered %v, want %v", e, got, compactFast[e])
		}
	}
}

func FuzzCompactTensor(f *testing.F) {
	for _, e := range compactEntries {
		f.Add([]byte(e))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkCompact(t, b) })
}

// checkCompact parses b with both paths (twice in one parser, so that the
// previous dtype is remembered as in a header) and reports whether the fast
// path answered.
func checkCompact(t *testing.T, b []byte) bool {
	t.Helper()
	p := parser{b: b}
	var fast []TensorInfo
	for range 2 {
		p.i = 0
		got, ok := p.compactTensor("t")
		if !ok {
			if p.i != 0 {
				t.Fatalf("%s: refused, position moved to %d", b, p.i)
			}
			return false
		}
		fast = append(fast, got)
	}
	end := p.i
	q := parser{b: b}
	want, err := q.tensor("t")
	if err != nil {
		t.Fatalf("%s: fast path accepted %+v, general parser: %v", b, fast[0], err)
	}
	for _, got := range fast {
		if got.Name != want.Name || got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || got.Begin != want.Begin || got.End != want.End {
			t.Fatalf("%s: fast %+v, general %+v", b, got, want)
		}
	}
	if end != q.i {
		t.Fatalf("%s: fast path ends at %d, general at %d", b, end, q.i)
	}
	return true
}
