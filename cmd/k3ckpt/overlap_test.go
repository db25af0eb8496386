package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// linkTree fills dir with hard links to (or, across filesystems, copies of)
// the regular files of src: a source a refused command may not damage.
func linkTree(t *testing.T, src, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())
		if !e.Type().IsRegular() {
			continue
		}
		if os.Link(from, to) != nil {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(to, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// No command writes into its own input or takes its input for its output,
// however the paths are spelled (relative, "..", "."): shard, export,
// convert, reassemble (its export and its --check source) and verify refuse
// before anything is written, exit non-zero and name the overlap.
func TestOutputOverlapsInput(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	tmp := t.TempDir()
	linkTree(t, smallReplica(t), filepath.Join(tmp, "ckpt"))
	t.Chdir(tmp)
	if _, e, code := k3("shard", "ckpt", "st", "-q"); code != 0 {
		t.Fatalf("shard: exit %d: %s", code, e)
	}
	before := dirNames(t, tmp)
	for _, args := range [][]string{
		{"shard", "ckpt", "ckpt"},
		{"shard", "ckpt", "ckpt/pp"},
		{"shard", "./ckpt", "ckpt/x/../pp"},
		{"shard", "ckpt", "."},
		{"export", "ckpt", "ckpt/e", "--layout", "dp16"},
		{"convert", "ckpt", "ckpt/fp8"},
		{"convert", "ckpt", "."},
		{"reassemble", "st", "st/stage-00", "--restart"},
		{"reassemble", "st", "st"},
		{"reassemble", "st", "."},
		{"reassemble", "st", "out", "--check", "out/.."},
		{"verify", "ckpt", "ckpt"},
		{"verify", "ckpt", "./ckpt/../ckpt"},
	} {
		_, e, code := k3(args...)
		if code == 0 || !strings.Contains(e, "source") || !(strings.Contains(e, "inside") || strings.Contains(e, " is the source")) {
			t.Errorf("%v: exit %d: %s", args, code, e)
		}
	}
	if after := dirNames(t, tmp); after != before {
		t.Errorf("refused commands changed the tree:\n%s\nwas\n%s", after, before)
	}
}

// dirNames lists every path under dir, one a line.
func dirNames(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			b.WriteString(p + "\n")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
