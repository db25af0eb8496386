package safetensors

import (
	"errors"
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
	return s.Walk(t.Context(), func(int, *File) error { return nil })
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
		if got := s.Names(); len(got) != len(ck.Files) {
			t.Fatalf("%s: names %v, Open has %d files", p, got, len(ck.Files))
		}
		var mu sync.Mutex
		seen := make([]int, len(ck.Files))
		var handed []*File
		err = s.Walk(t.Context(), func(i int, f *File) error {
			mu.Lock()
			defer mu.Unlock()
			seen[i]++
			want := ck.Files[i]
			if f.Path != want.Path || s.Names()[i] != f.Path || f.Size != want.Size || f.DataStart != want.DataStart {
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
		if s.HeaderBytesRead() != ck.HeaderBytesRead {
			t.Errorf("%s: walk read %d header bytes, Open %d", p, s.HeaderBytesRead(), ck.HeaderBytesRead)
		}
		if b, err := s.ReadAux("config.json"); err != nil || !strings.Contains(string(b), "model_type") {
			t.Errorf("%s: config: %v", p, err)
		}
		if err := s.Walk(t.Context(), nil); err == nil {
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
	if err := s.Walk(t.Context(), func(int, *File) error { return stop }); !errors.Is(err, stop) {
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
	if !errors.Is(err, ErrHeaderJSON) {
		t.Fatalf("Open: %v", err)
	}
	if werr := walkAll(t, dir); werr == nil || werr.Error() != err.Error() {
		t.Errorf("Walk: %v, Open: %v", werr, err)
	}
}
