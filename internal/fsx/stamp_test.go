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

// TestStampChange: Change names the difference that matters most, and says
// nothing for an unknown (zero) stamp on either side.
func TestStampChange(t *testing.T) {
	s := Stamp{Size: 10, MTime: 5, CTime: 5, Dev: 1, Inode: 7}
	for _, c := range []struct {
		now  Stamp
		want string
	}{
		{s, ""},
		{Stamp{}, ""},
		{Stamp{Size: 11, MTime: 6, Dev: 1, Inode: 8}, "resized from 10 to 11 bytes"},
		{Stamp{Size: 10, MTime: 5, CTime: 5, Dev: 1, Inode: 8}, "replaced by another file"},
		{Stamp{Size: 10, MTime: 5, CTime: 6, Dev: 1, Inode: 7}, "modified"},
	} {
		if got := s.Change(c.now); got != c.want {
			t.Errorf("%+v → %+v: %q, want %q", s, c.now, got, c.want)
		}
	}
	if got := (Stamp{}).Change(s); got != "" {
		t.Errorf("unknown → %+v: %q", s, got)
	}
	if got := s.Change(Stamp{Size: 10, MTime: 9, CTime: 5, Dev: 1, Inode: 7}); len(got) < 12 || got[:12] != "modified at " {
		t.Errorf("mtime moved: %q", got)
	}
}
