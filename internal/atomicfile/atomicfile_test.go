package atomicfile

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
	f, err := Create(final)
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
	if st, _ := os.Stat(final); st.Mode().Perm() != DefaultPerm {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	if err := f.Abort(); err != nil {
		t.Fatalf("Abort after Commit: %v", err)
	}
	g, _ := Create(filepath.Join(dir, "y.bin"))
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
		f, _ := Create(filepath.Join(dir, "b.safetensors"))
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
		f, err := Create(path)
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
