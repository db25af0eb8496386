package fsx

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// A stamp changes when the file is written (same size, mtime moved as any
// write moves it) or replaced under its name, and not when it is only read.
func TestStamp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("abcd"), 0o644); err != nil {
		t.Fatal(err)
	}
	stamp := func() Stamp {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return StampOf(fi)
	}
	s0 := stamp()
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	if s := stamp(); s != s0 {
		t.Errorf("a read changed the stamp: %+v → %+v", s0, s)
	}
	if err := os.WriteFile(p, []byte("abce"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The write's times may fall in the same coarse tick as the first look;
	// set mtime apart explicitly, as any later write would.
	old := time.Unix(0, s0.MTime).Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if s := stamp(); s == s0 {
		t.Errorf("a write left the stamp unchanged: %+v", s)
	}
	if runtime.GOOS != "linux" {
		return
	}
	// Replaced by another file with the very same size and times: the inode tells.
	s1 := stamp()
	q := filepath.Join(dir, "g")
	if err := os.WriteFile(q, []byte("abce"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(q, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(q, p); err != nil {
		t.Fatal(err)
	}
	if s := stamp(); s.Inode == s1.Inode || s == s1 {
		t.Errorf("a replacement left the stamp unchanged: %+v", s)
	}
}
