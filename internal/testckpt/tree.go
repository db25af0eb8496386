package testckpt

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TreeHashes maps every regular file under dir (root-relative, slash
// separated) to its sha256, leaving out the files skip reports (nil: none),
// so two output trees can be compared byte for byte.
func TreeHashes(tb testing.TB, dir string, skip func(rel string) bool) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skip != nil && skip(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// SameTree reports as test errors every file that differs between the trees
// got and want, or is in only one of them; what names want in the messages.
func SameTree(tb testing.TB, got, want, what string, skip func(rel string) bool) {
	tb.Helper()
	g, w := TreeHashes(tb, got, skip), TreeHashes(tb, want, skip)
	for name, h := range w {
		if g[name] != h {
			tb.Errorf("%s: differs from %s", name, what)
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			tb.Errorf("%s: not in %s", name, what)
		}
	}
}

// CopyTree copies every regular file under from into to (created), folders
// included. It copies rather than links: a hard link changes the ctime, which
// a concurrent conversion of from takes for a changed source.
func CopyTree(tb testing.TB, from, to string) {
	tb.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		target := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			return copyFile(p, target)
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("copy %s: %v", from, err)
	}
}
