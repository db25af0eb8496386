package safetensors

import (
	"crypto/sha256"
	"encoding/binary"
	"os"
	"reflect"
	"slices"
	"testing"
)

// TestNewFilePlanSumMatchesReference: for every file Python safetensors wrote
// (safetensors/testdata/golden/gen_goldens.py), NewFilePlanSum's sum is the sha256 of
// the reference file's header prefix, its offsets are the reference's, and
// it keeps no header bytes. The cases run twice over in alternating sizes,
// so a reused render buffer of a larger header never leaks into a smaller one.
func TestNewFilePlanSumMatchesReference(t *testing.T) {
	cases := loadGoldens(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range cases {
			if !yield(n) {
				return
			}
		}
	})
	for range 2 {
		for _, name := range names {
			c := cases[name]
			want, err := os.ReadFile("testdata/golden/" + name + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			hdr := want[:8+binary.LittleEndian.Uint64(want)]
			specs := make([]TensorSpec, len(c.Tensors))
			for i, ct := range c.Tensors {
				dt, err := parseDType(ct.DType)
				if err != nil {
					t.Fatal(err)
				}
				specs[i] = TensorSpec{Name: ct.Name, DType: dt, Shape: slices.Clone(ct.Shape)}
			}
			l, sum, err := NewFilePlanSum(specs, c.Metadata)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if sum != sha256.Sum256(hdr) {
				t.Errorf("%s: sum %x, the reference header's is %x", name, sum, sha256.Sum256(hdr))
			}
			if l.Header != nil || l.DataStart != int64(len(hdr)) || l.Size != int64(len(want)) {
				t.Errorf("%s: header %d bytes kept, data start %d, size %d; reference %d, %d", name, len(l.Header), l.DataStart, l.Size, len(hdr), len(want))
			}
			again, err := l.HeaderBytes()
			if err != nil || string(again) != string(hdr) {
				t.Errorf("%s: header rendered again differs from the reference (%v)", name, err)
			}
			for i, ti := range l.Tensors {
				if j, ok := l.Index(ti.Name); !ok || j != i {
					t.Errorf("%s: Index(%q) = %d, %v; it is tensor %d", name, ti.Name, j, ok, i)
				}
			}
			if _, ok := l.Index("no such tensor"); ok {
				t.Errorf("%s: Index finds a tensor not laid out", name)
			}
			// The layout holds its own shapes.
			kept := slices.Clone(l.Tensors)
			for i := range kept {
				kept[i].Shape = slices.Clone(kept[i].Shape)
			}
			for _, s := range specs {
				for j := range s.Shape {
					s.Shape[j]++
				}
			}
			if !reflect.DeepEqual(kept, l.Tensors) {
				t.Errorf("%s: changing the specs' shapes changed the layout", name)
			}
		}
	}
}
