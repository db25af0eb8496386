package safetensors

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// walkAll opens p for one pass and walks it without keeping anything.
func walkAll(t *testing.T, p string) error {
	t.Helper()
	s, err := OpenShards(t.Context(), p)
	if err != nil {
		return err
	}
	return s.Walk(t.Context(), false, func(int, *File) error { return nil })
}

// TestShardsWalkSeesWhatOpenKeeps walks a good checkpoint (through its
// directory, its index and one file): every shard is handed over once, at
// its place in Names, with the tensors Open keeps; its reader is closed
// when the callback returns; a second walk is refused.
func TestShardsWalkSeesWhatOpenKeeps(t *testing.T) {
	dir := twoShardCheckpoint(t)
	for _, p := range []string{dir, filepath.Join(dir, IndexName), filepath.Join(dir, "model-00002-of-00002.safetensors")} {
		ck, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenShards(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Names; len(got) != len(ck.Files) {
			t.Fatalf("%s: names %v, Open has %d files", p, got, len(ck.Files))
		}
		var mu sync.Mutex
		seen := make([]int, len(ck.Files))
		var handed []*File
		err = s.Walk(t.Context(), false, func(i int, f *File) error {
			mu.Lock()
			defer mu.Unlock()
			seen[i]++
			want := ck.Files[i]
			if f.Path != want.Path || s.Names[i] != f.Path || f.Size != want.Size || f.DataStart != want.DataStart {
				t.Errorf("%s: shard %d is %s (%d B), Open has %s (%d B)", p, i, f.Path, f.Size, want.Path, want.Size)
			}
			if !slices.EqualFunc(f.Tensors, want.Tensors, func(a, b TensorInfo) bool {
				return a.Name == b.Name && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && a.Begin == b.Begin && a.End == b.End
			}) {
				t.Errorf("%s: shard %s: tensors %v, Open has %v", p, f.Path, f.Tensors, want.Tensors)
			}
			handed = append(handed, f)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for i, n := range seen {
			if n != 1 {
				t.Errorf("%s: shard %d handed over %d times", p, i, n)
			}
		}
		for _, f := range handed {
			if f.closer != nil {
				t.Errorf("%s: %s still open after the walk", p, f.Path)
			}
		}
		if read, _ := s.BytesRead(); read != ck.HeaderBytesRead {
			t.Errorf("%s: walk read %d header bytes, Open %d", p, read, ck.HeaderBytesRead)
		}
		if b, err := s.ReadAux("config.json"); err != nil || !strings.Contains(string(b), "model_type") {
			t.Errorf("%s: config: %v", p, err)
		}
		if err := s.Walk(t.Context(), false, nil); err == nil {
			t.Errorf("%s: second walk accepted", p)
		}
		ck.Close()
	}
}

// TestShardsWalkStopsOnCallbackError: the callback's error is the walk's.
func TestShardsWalkStopsOnCallbackError(t *testing.T) {
	dir := twoShardCheckpoint(t)
	s, err := OpenShards(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	if err := s.Walk(t.Context(), false, func(int, *File) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("got %v", err)
	}
}

// TestShardsWalkBadHeader: a bad header is reported as Open reports it,
// before what is wrong with the index.
func TestShardsWalkBadHeader(t *testing.T) {
	dir := twoShardCheckpoint(t)
	if err := os.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), []byte("\x02\x00\x00\x00\x00\x00\x00\x00{x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexName), []byte(`{"weight_map":{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir)
	if !errors.Is(err, errHeaderJSON) {
		t.Fatalf("Open: %v", err)
	}
	if werr := walkAll(t, dir); werr == nil || werr.Error() != err.Error() {
		t.Errorf("Walk: %v, Open: %v", werr, err)
	}
}

// manyShardCheckpoint writes n shards of different sizes, names, dtypes and
// shapes (shard i holds 1+3i tensors, the last with i+1 dimensions), with
// their index: a walk reusing header memory must not let one shard's
// tensors show through in another's.
func manyShardCheckpoint(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	idx := &Index{WeightMap: map[string]string{}}
	dts := []DType{F32, BF16, U8, i64}
	for i := range n {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
		var specs []TensorSpec
		for j := range 1 + 3*i {
			shape := []int64{int64(j + 1), int64(i + 2)}
			if j == 3*i {
				shape = slices.Repeat([]int64{2}, i+1)
			}
			specs = append(specs, TensorSpec{fmt.Sprintf("s%d.t%d", i, j), dts[(i+j)%len(dts)], shape})
			idx.WeightMap[specs[j].Name] = name
		}
		writeTestFile(t, dir, name, specs)
		f, err := OpenFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		idx.TotalSize += f.Size - f.DataStart
		f.Close()
	}
	if err := WriteIndex(filepath.Join(dir, IndexName), idx); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestShardsWalkTransient: a walk that reuses header memory hands every
// shard over with the tensors Open keeps (copied inside the callback, as
// its contract asks), over more shards than headers in flight.
func TestShardsWalkTransient(t *testing.T) {
	dir := manyShardCheckpoint(t, 12)
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	s, err := OpenShards(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]TensorInfo, len(ck.Files))
	err = s.Walk(t.Context(), true, func(i int, f *File) error {
		ts := make([]TensorInfo, len(f.Tensors))
		for j, x := range f.Tensors {
			ts[j] = TensorInfo{strings.Clone(x.Name), x.DType, slices.Clone(x.Shape), x.Begin, x.End}
			if y, ok := f.Lookup(x.Name); !ok || y.Begin != x.Begin {
				t.Errorf("shard %d: Lookup(%s) = %v %v", i, x.Name, y, ok)
			}
		}
		got[i] = ts
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range ck.Files {
		if !slices.EqualFunc(got[i], f.Tensors, func(a, b TensorInfo) bool {
			return a.Name == b.Name && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && a.Begin == b.Begin && a.End == b.End
		}) {
			t.Errorf("shard %d: walked %v, Open has %v", i, got[i], f.Tensors)
		}
	}
	// A bad index is reported as Walk reports it.
	if err := os.WriteFile(filepath.Join(dir, IndexName), []byte(`{"metadata":{"total_size":0},"weight_map":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s1, err1 := OpenShards(t.Context(), dir)
	s2, err2 := OpenShards(t.Context(), dir)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	werr := s1.Walk(t.Context(), false, func(int, *File) error { return nil })
	terr := s2.Walk(t.Context(), true, func(int, *File) error { return nil })
	if werr == nil || terr == nil || werr.Error() != terr.Error() {
		t.Errorf("Walk: %v, transient Walk: %v", werr, terr)
	}
}
