package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestLayoutIndexIsShardIndex: the index rendered from the layouts a writer
// planned is byte for byte the one rebuilt from the files written with them
// (names needing escapes, several shards, tensors in non-sorted order).
func TestLayoutIndexIsShardIndex(t *testing.T) {
	dir := t.TempDir()
	shards := [][]TensorSpec{
		{{Name: "b.weight", DType: BF16, Shape: []int64{4, 8}}, {Name: "a.weight", DType: F32, Shape: []int64{3}}},
		{{Name: "caf\u00e9 \"q\"", DType: U8, Shape: []int64{5, 2}}, {Name: "z", DType: F8_E4M3, Shape: []int64{128, 128}}},
		{{Name: "m\\n", DType: I32, Shape: []int64{}}},
	}
	var names []string
	var layouts []*FilePlan
	for i, specs := range shards {
		l, err := NewFilePlan(specs, map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		name := []string{"s-1.safetensors", "s-2.safetensors", "sub/s-3.safetensors"}[i]
		path := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(path), 0o755)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err = f.Write(l.Header); err == nil {
			err = f.Truncate(l.Size)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		names, layouts = append(names, name), append(layouts, l)
	}
	var fromFiles, fromLayouts bytes.Buffer
	n1, err := WriteShardIndex(&fromFiles, dir, names)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := WriteFilePlanIndex(&fromLayouts, names, layouts)
	if err != nil {
		t.Fatal(err)
	}
	if n1 != n2 || !bytes.Equal(fromFiles.Bytes(), fromLayouts.Bytes()) {
		t.Fatalf("total %d vs %d; index from files:\n%s\nfrom layouts:\n%s", n1, n2, fromFiles.Bytes(), fromLayouts.Bytes())
	}
	if _, err := WriteFilePlanIndex(&fromLayouts, names[:1], layouts); err == nil {
		t.Error("mismatched names and layouts accepted")
	}
}
