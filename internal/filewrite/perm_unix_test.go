//go:build unix

package filewrite

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A file's mode follows the umask and the LimitPerm cap, and Chmod cannot
// widen it past them (execute bits only where reading is allowed).
func TestPermFollowsUmaskAndLimit(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	write := func(name string, chmod os.FileMode) os.FileMode {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := WriteFile(p, []byte("x"), chmod); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if m := write("a", 0o644); m != 0o600 {
		t.Errorf("umask 077: mode %v, want 0600", m)
	}
	if m := write("b", 0o755); m != 0o700 {
		t.Errorf("umask 077, chmod 0755: mode %v, want 0700", m)
	}
	syscall.Umask(0o022)
	if m := write("c", 0o644); m != 0o644 {
		t.Errorf("umask 022: mode %v, want 0644", m)
	}
	restore := LimitPerm(0o640)
	if m := write("d", 0o644); m != 0o640 {
		t.Errorf("limit 0640: mode %v, want 0640", m)
	}
	restore()
	if m := write("e", 0o644); m != 0o644 {
		t.Errorf("restored: mode %v, want 0644", m)
	}
}
