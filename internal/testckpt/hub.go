package testckpt

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hubRepo is the repository folder name huggingface_hub's cache gives K3.
const hubRepo = "models--moonshotai--Kimi-K3"

// HubCache lays a checkpoint directory out as huggingface_hub's cache does,
// in a fresh tb.TempDir(): repo is <tmp>/hub/models--moonshotai--Kimi-K3 and
// snap its snapshots/<rev>/, whose entries are relative links into
// ../../blobs/<sha256>. Blobs are hard links to src's files where possible
// (which changes their ctime: src must be one no other test converts
// meanwhile), copies otherwise.
func HubCache(tb testing.TB, src string) (snap, repo string) {
	tb.Helper()
	repo = filepath.Join(tb.TempDir(), "hub", hubRepo)
	snap = filepath.Join(repo, "snapshots", "0123abcd")
	blobs := filepath.Join(repo, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		tb.Fatal(err)
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p) // a small replica
		if err != nil {
			return err
		}
		h := sha256.Sum256(b)
		sum := hex.EncodeToString(h[:])
		blob := filepath.Join(blobs, sum)
		if _, err := os.Lstat(blob); os.IsNotExist(err) {
			if os.Link(p, blob) != nil {
				if err := copyFile(p, blob); err != nil {
					return err
				}
			}
		}
		link := filepath.Join(snap, rel)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		up := strings.Repeat("../", strings.Count(filepath.ToSlash(rel), "/")+2)
		return os.Symlink(up+"blobs/"+sum, link)
	})
	if err != nil {
		tb.Fatalf("hub cache of %s: %v", src, err)
	}
	return snap, repo
}

func copyFile(from, to string) error {
	r, err := os.Open(from)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.Create(to)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, r)
	return errors.Join(err, w.Close())
}
