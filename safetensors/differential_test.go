package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ref "github.com/nlpodyssey/safetensors"
)

// TestDifferentialNLPOdyssey parses files with github.com/nlpodyssey/safetensors,
// an independent Go implementation, and with ours. It only knows the classic
// dtypes (no F8/F4/F6/C64), so the inputs are the golden files that use those
// and thousands of seeded single-byte mutations of their headers. Where both
// accept, they must report the same tensors; where they disagree, the cause
// must be one of the documented deliberate differences (README, "Reference
// parser"): duplicate names or fields, which its JSON decoder silently
// collapses, and invalid UTF-8, which it replaces; we reject both, as the Rust
// reference does.
func TestDifferentialNLPOdyssey(t *testing.T) {
	var inputs [][]byte
	for _, name := range []string{"f32", "i32", "bf16", "u8", "scalar", "empty", "metadata", "metadata_escape", "unicode_names"} {
		b, err := os.ReadFile(filepath.Join("testdata/golden", name+".safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	base := len(inputs)
	alphabet := []byte(`{}[]",:0123456789-.eE aFUI8BfT`)
	for i := 0; i < 4000; i++ {
		src := inputs[rng.IntN(base)]
		n := int(binary.LittleEndian.Uint64(src))
		m := bytes.Clone(src)
		m[8+rng.IntN(n)] = alphabet[rng.IntN(len(alphabet))]
		inputs = append(inputs, m)
	}
	// Number and escape forms, valid and not: both parsers must decide them
	// alike (JSON's grammar). The reference here refuses unknown fields, so the
	// forms go where it reads them: numbers as a shape, escapes in a tensor
	// name and a metadata value (TestMalformed covers them in ignored values).
	for _, v := range []string{`1`, `1.`, `01`, `-.5`, `.5`, `+1`, `1e`, `1.e3`, `-`, `0x10`, `1e400`, `-0`, `1E+0`, `1.0`, `123456789012345678901234567890`} {
		inputs = append(inputs, rawFile(`{"a":{"dtype":"U8","shape":[`+v+`],"data_offsets":[0,1]}}`, 1))
	}
	for _, v := range []string{`\x41`, `\u12`, `\u+123`, `\q`, `\'`, `\u00e9\/`, `\t\"\\\b\f\n\r`, `\ud83d\ude00`} {
		inputs = append(inputs, rawFile(`{"a`+v+`":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1))
		inputs = append(inputs, rawFile(`{"__metadata__":{"k":"`+v+`"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1))
	}
	agreeAccept, agreeReject := 0, 0
	for i, in := range inputs {
		ours, oerr := ReadHeader(bytes.NewReader(in), int64(len(in)), "x")
		theirs, terr := ref.Deserialize(in)
		switch {
		case oerr == nil && terr == nil:
			agreeAccept++
			names := theirs.Names()
			if len(names) != len(ours.Tensors) {
				t.Fatalf("input %d: %d vs %d tensors", i, len(ours.Tensors), len(names))
			}
			for _, nv := range theirs.Tensors() {
				ti, ok := ours.Lookup(nv.Name)
				if !ok || ti.DType.String() != nv.TensorView.DType().String() || int64(len(nv.TensorView.Data())) != ti.Size() {
					t.Fatalf("input %d: tensor %q differs: %+v", i, nv.Name, ti)
				}
				shape := make([]int64, len(nv.TensorView.Shape()))
				for j, d := range nv.TensorView.Shape() {
					shape[j] = int64(d)
				}
				if !slices.Equal(shape, ti.Shape) {
					t.Fatalf("input %d: tensor %q shape %v vs %v", i, nv.Name, ti.Shape, shape)
				}
			}
		case oerr != nil && terr != nil:
			agreeReject++
		case oerr != nil && terr == nil:
			// Deliberate: duplicates that its map-based decoding collapses, and
			// invalid UTF-8, which encoding/json replaces and the Rust reference rejects.
			if !errors.Is(oerr, errDuplicate) && !errors.Is(oerr, errHeaderUTF8) && !strings.Contains(oerr.Error(), "duplicate") {
				t.Fatalf("input %d: we reject (%v) what the reference parser accepts:\n%s", i, oerr, in[8:])
			}
		default:
			t.Fatalf("input %d: we accept what the reference parser rejects (%v):\n%s", i, terr, in[8:])
		}
	}
	if agreeAccept < base || agreeReject < 1000 {
		t.Fatalf("too few agreements: %d accepted, %d rejected", agreeAccept, agreeReject)
	}
	t.Logf("%d inputs: both accept %d, both reject %d", len(inputs), agreeAccept, agreeReject)
}
