package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// seedHeaders returns the header JSON of every committed golden file.
func seedHeaders(t interface{ Fatal(...any) }) [][]byte {
	paths, _ := filepath.Glob("testdata/golden/*.safetensors")
	if len(paths) == 0 {
		t.Fatal("no seeds: testdata/golden/*.safetensors matches nothing")
	}
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		n := binary.LittleEndian.Uint64(b)
		out = append(out, b[8:8+n])
	}
	return out
}

// FuzzParseHeader checks that the parser never panics or over-allocates and
// that anything it accepts survives a canonical write and a second parse with
// the same tensors.
func FuzzParseHeader(f *testing.F) {
	for _, h := range seedHeaders(f) {
		f.Add(h)
	}
	f.Add([]byte(`{"a":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}}`))
	f.Add([]byte(`{"__metadata__":{"k":"v"},"b":{"dtype":"F6_E3M2","shape":[4],"data_offsets":[0,3]}}`))
	f.Fuzz(func(t *testing.T, header []byte) {
		if len(header) > 1<<20 {
			return
		}
		got, err := ParseHeader(header)
		if err != nil {
			return
		}
		specs := make([]TensorSpec, len(got.Tensors))
		for i, ti := range got.Tensors {
			specs[i] = TensorSpec{ti.Name, ti.DType, ti.Shape}
		}
		l, err := NewFilePlan(specs, got.Metadata)
		if err != nil {
			t.Fatalf("accepted header cannot be written: %v", err)
		}
		back, err := ParseHeader(l.Header[8:])
		if err != nil {
			t.Fatalf("written header does not parse: %v\n%s", err, l.Header[8:])
		}
		if len(back.Tensors) != len(got.Tensors) || !mapsEqual(back.Metadata, got.Metadata) {
			t.Fatalf("round trip changed the header")
		}
		for _, ti := range got.Tensors {
			bt, ok := back.Lookup(ti.Name)
			if !ok || bt.DType != ti.DType || !slices.Equal(bt.Shape, ti.Shape) || bt.Size() != ti.Size() {
				t.Fatalf("tensor %q changed: %+v → %+v", ti.Name, ti, bt)
			}
		}
		// A canonical header is a fixed point.
		again, _ := NewFilePlan(specs, back.Metadata)
		if !bytes.Equal(again.Header, l.Header) {
			t.Fatalf("canonical form is not stable")
		}
	})
}

// FuzzParseIndex checks that the index parser never panics, that every shard
// name it accepts stays inside the checkpoint, and that an accepted index
// survives Marshal and a second parse unchanged. Seeds: testdata/index.
func FuzzParseIndex(f *testing.F) {
	paths, _ := filepath.Glob("testdata/index/*.json")
	if len(paths) == 0 {
		f.Fatal("no seeds in testdata/index")
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<20 {
			return
		}
		idx, err := parseIndex(b, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrIndex) {
				t.Fatalf("error outside the ErrIndex class: %v", err)
			}
			return
		}
		for name, file := range idx.WeightMap {
			if err := checkShardName(file); err != nil {
				t.Fatalf("tensor %q: accepted shard name %q: %v", name, file, err)
			}
		}
		out, err := idx.Marshal()
		if err != nil {
			t.Fatalf("accepted index cannot be written: %v", err)
		}
		back, err := parseIndex(out, "again")
		if err != nil {
			t.Fatalf("written index does not parse: %v\n%s", err, out)
		}
		if back.TotalSize != idx.TotalSize || !maps.Equal(back.WeightMap, idx.WeightMap) || len(back.Metadata) != len(idx.Metadata) {
			t.Fatalf("round trip changed the index")
		}
		again, _ := back.Marshal()
		if !bytes.Equal(again, out) {
			t.Fatalf("written form is not a fixed point")
		}
	})
}

// ParseHeader validates a header's JSON bytes (without the 8-byte length) on
// their own: tensors, offsets contiguity and sizes, but not the file size.
// The File has no HeaderSum: it was not read from a file.
func ParseHeader(b []byte) (*File, error) {
	f, err := parseHeader(b, nil)
	if err != nil {
		return nil, err
	}
	f.DataStart = 8 + int64(len(b))
	f.raw, f.rawSum = nil, nil
	return f, nil
}
