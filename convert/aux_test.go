package convert

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCopyAuxChangedSource: a side file that no longer has its planned size is
// an error, and nothing appears under its final name.
func TestCopyAuxChangedSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	from, to := filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "out", "tokenizer.json")
	os.WriteFile(from, []byte("0123456789"), 0o644)
	var s scratch
	a := &auxFile{Name: "tokenizer.json", Size: 7}
	if _, _, err := s.copyAux(context.Background(), &Plan{SrcRoot: dir}, a, to, meter{}); !errors.Is(err, errChanged) {
		t.Fatalf("changed source: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Dir(to))
	if len(ents) != 0 {
		t.Fatalf("left %v", ents)
	}
	a.Size = 10
	rec, commit, err := s.copyAux(context.Background(), &Plan{SrcRoot: dir}, a, to, meter{})
	if err != nil || rec.Size != 10 {
		t.Fatalf("copy: %v %+v", err, rec)
	}
	if _, err := commit(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(to); string(b) != "0123456789" {
		t.Fatalf("content %q", b)
	}
}
