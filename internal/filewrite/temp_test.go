package filewrite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommitAbort(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "x.bin")
	f, err := CreateTemp(final)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("hello")
	if _, err := os.Stat(final); !os.IsNotExist(err) {
		t.Fatal("final name exists before Commit")
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(final); string(b) != "hello" {
		t.Fatalf("content %q", b)
	}
	if st, _ := os.Stat(final); st.Mode().Perm() != defaultPerm {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	if err := f.Abort(); err != nil {
		t.Fatalf("Abort after Commit: %v", err)
	}
	g, _ := CreateTemp(filepath.Join(dir, "y.bin"))
	g.WriteString("partial")
	g.Abort()
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "x.bin" {
		t.Fatalf("left %v", ents)
	}
}

func TestWriteFileAndRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "a.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "a.json")); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	// Two leftovers of a killed run.
	for range 2 {
		f, _ := CreateTemp(filepath.Join(dir, "b.safetensors"))
		f.File.Close()
	}
	n, err := RemoveTemps(dir)
	if err != nil || n != 2 {
		t.Fatalf("removed %d: %v", n, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			t.Fatalf("temp %s left", e.Name())
		}
	}
	if len(ents) != 1 {
		t.Fatalf("entries %v", ents)
	}
}

// TestCommitNoSync: CommitNoSync puts the complete file under its name
// without syncing the file or the directory; Commit syncs both.
func TestCommitNoSync(t *testing.T) {
	var files, dirs int
	defer func(f func(*os.File) error, d func(string) error) { fsync, syncDir = f, d }(fsync, syncDir)
	fsync = func(f *os.File) error { files++; return f.Sync() }
	syncDir = func(d string) error { dirs++; return SyncDir(d) }
	dir := t.TempDir()
	for _, durable := range []bool{false, true} {
		files, dirs = 0, 0
		path := filepath.Join(dir, fmt.Sprintf("r-%v.json", durable))
		f, err := CreateTemp(path)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("{}")
		commit := f.CommitNoSync
		if durable {
			commit = f.Commit
		}
		if err := commit(); err != nil {
			t.Fatal(err)
		}
		if err := commit(); err == nil {
			t.Fatal("second commit accepted")
		}
		want := 0
		if durable {
			want = 1
		}
		if files != want || dirs != want {
			t.Errorf("durable %v: %d file and %d directory syncs, want %d each", durable, files, dirs, want)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "{}" {
			t.Errorf("durable %v: %q, %v", durable, b, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("entries %v", ents)
	}
}

// TestOneWritePath: a small file written whole (WriteFile) and a staged
// File both reach their final name through the Temp commit: one fsync of the
// file, a rename (the final name is absent until then, and no temporary is
// left), one fsync of the directory.
func TestOneWritePath(t *testing.T) {
	var files, dirs int
	defer func(f func(*os.File) error, d func(string) error) { fsync, syncDir = f, d }(fsync, syncDir)
	dir := t.TempDir()
	final := map[string]bool{}
	fsync = func(f *os.File) error {
		files++
		if !strings.HasPrefix(filepath.Base(f.Name()), TempPrefix) {
			t.Errorf("synced %s, not a temporary", f.Name())
		}
		for name := range final {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				t.Errorf("%s exists before its rename", name)
			}
		}
		return f.Sync()
	}
	syncDir = func(d string) error { dirs++; return SyncDir(d) }
	writes := map[string]func(path string) error{
		"small.json": func(p string) error { return WriteFile(p, []byte("{}"), 0o644) },
		"big.bin": func(p string) error {
			f, err := Create(p, nil, nil)
			if err != nil {
				return err
			}
			defer f.Abort()
			if _, err := f.Write([]byte("{}")); err != nil {
				return err
			}
			return f.Commit()
		},
	}
	for name, write := range writes {
		files, dirs = 0, 0
		final = map[string]bool{name: true}
		if err := write(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		if files != 1 || dirs != 1 {
			t.Errorf("%s: %d file and %d directory syncs, want 1 each", name, files, dirs)
		}
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "{}" {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(writes) {
		t.Fatalf("entries %v", ents)
	}
}
