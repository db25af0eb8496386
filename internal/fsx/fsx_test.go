package fsx

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// noHang fails the test instead of hanging it when f blocks: the regressions
// these tests guard against are opens and reads that never return.
func noHang(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("blocked: the call did not return within 10s")
	}
}

func TestOpenRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	link := filepath.Join(dir, "link-to-fifo")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	if l, err := net.Listen("unix", sock); err == nil {
		defer l.Close()
	} else {
		sock = ""
	}
	cases := map[string]string{
		fifo:        "named pipe (FIFO)",
		link:        "named pipe (FIFO)",
		"/dev/zero": "character device",
		dir:         "directory",
	}
	if sock != "" {
		cases[sock] = "socket"
	}
	for p, kind := range cases {
		if _, err := os.Stat(p); err != nil {
			continue // no /dev/zero here
		}
		noHang(t, func() {
			f, err := Open(p)
			if err == nil {
				f.Close()
				t.Errorf("%s: opened", p)
				return
			}
			var pe *fs.PathError
			if !errors.Is(err, ErrNotRegular) || !errors.As(err, &pe) || pe.Path != p || !strings.Contains(err.Error(), kind) {
				t.Errorf("%s: %v, want ErrNotRegular naming the path and %q", p, err, kind)
			}
			if _, err := ReadFile(p, 1<<20); !errors.Is(err, ErrNotRegular) {
				t.Errorf("ReadFile %s: %v", p, err)
			}
		})
	}
}

func TestOpenRegular(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "hello" {
		t.Fatalf("%q %v", b, err)
	}
	f.Close()
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if b, err := ReadFile(p, 5); err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile: %q %v", b, err)
	}
	if _, err := ReadFile(p, 4); !errors.Is(err, errTooLarge) || !strings.Contains(err.Error(), p) {
		t.Fatalf("over the limit: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "e")
	os.WriteFile(empty, nil, 0o644)
	if b, err := ReadFile(empty, 0); err != nil || len(b) != 0 {
		t.Fatalf("empty: %q %v", b, err)
	}
}

// A large file is read into one buffer sized from its Stat: regrowing it
// would copy a 58 MB index several times over.
func TestReadFileOneBuffer(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []byte
	allocs := testing.AllocsPerRun(3, func() {
		b, err := ReadFile(p, 16<<20)
		if err != nil {
			t.Fatal(err)
		}
		got = b
	})
	if len(got) != 8<<20 {
		t.Fatalf("read %d bytes, want %d", len(got), 8<<20)
	}
	// Open, Stat and the buffer; regrowing from a small buffer takes many more.
	if allocs > 10 {
		t.Errorf("ReadFile of 8 MiB: %.0f allocations, want the buffer allocated once", allocs)
	}
}
