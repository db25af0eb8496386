package fsx

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Every overlap of DST and an input is refused however the paths are
// spelled (relative, with "..", through a link, not existing yet); disjoint
// directories, siblings with a common name prefix among them, pass.
func TestDisjoint(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "ckpt")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(src, filepath.Join(tmp, "link")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(tmp)
	for _, c := range []struct {
		dst, in string
		overlap bool
	}{
		{"ckpt/fp8", "ckpt", true},
		{"ckpt", "ckpt", true},
		{"./ckpt/", "ckpt", true},
		{"link/fp8", "ckpt", true},
		{"ckpt/sub/../fp8", "link", true},
		{".", "ckpt", true},
		{tmp, "link/sub", true},
		{"ckpt-fp8", "ckpt", false},
		{"out/fp8", "ckpt", false},
		{filepath.Join(tmp, "other"), src, false},
	} {
		err := Disjoint(c.dst, c.in)
		if got := errors.Is(err, ErrOverlap); got != c.overlap || (!c.overlap && err != nil) {
			t.Errorf("Disjoint(%q, %q) = %v, want overlap %v", c.dst, c.in, err, c.overlap)
		}
	}
}
