package fsx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hubSnapshot builds the layout huggingface_hub's cache uses:
// models--org--name/{blobs/<hash>, snapshots/<rev>/<file> -> ../../blobs/<hash>}.
func hubSnapshot(t *testing.T) (base, repo, snap string) {
	base = t.TempDir()
	repo = filepath.Join(base, "hub", "models--org--name")
	snap = filepath.Join(repo, "snapshots", "0123abc")
	for _, d := range []string{filepath.Join(repo, "blobs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(repo, "blobs", "aa11"), []byte("x"), 0o644)
	if err := os.Symlink("../../blobs/aa11", filepath.Join(snap, "config.json")); err != nil {
		t.Fatal(err)
	}
	return base, repo, snap
}

func TestRootHubSnapshot(t *testing.T) {
	base, repo, snap := hubSnapshot(t)
	r, err := NewRoot(snap)
	if err != nil {
		t.Fatal(err)
	}
	real, err := r.Resolve("config.json")
	if err != nil {
		t.Fatalf("link into ../../blobs refused: %v", err)
	}
	if want, _ := filepath.EvalSymlinks(filepath.Join(repo, "blobs", "aa11")); real != want {
		t.Fatalf("resolved %s, want %s", real, want)
	}
	// A link out of the repository folder, even into the same cache, is refused.
	other := filepath.Join(base, "hub", "models--other--repo", "blobs")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "bb"), []byte("y"), 0o600)
	os.Symlink(filepath.Join(other, "bb"), filepath.Join(snap, "tokenizer.json"))
	os.WriteFile(filepath.Join(base, "secret"), []byte("z"), 0o600)
	os.Symlink("../../../../secret", filepath.Join(snap, "evil.json"))
	for _, name := range []string{"tokenizer.json", "evil.json"} {
		_, err := r.Resolve(name)
		if !errors.Is(err, ErrOutside) || !strings.Contains(err.Error(), "resolves to "+base) || !strings.Contains(err.Error(), "models--org--name") {
			t.Fatalf("%s: %v, want ErrOutside naming the target and what is allowed", name, err)
		}
	}
	// The same decision for a caller that resolved the path itself.
	blob, _ := filepath.EvalSymlinks(filepath.Join(repo, "blobs", "aa11"))
	if err := allowed(snap, blob); err != nil {
		t.Fatal(err)
	}
	secret, _ := filepath.EvalSymlinks(filepath.Join(base, "secret"))
	if err := allowed(snap, secret); !errors.Is(err, ErrOutside) {
		t.Fatalf("secret: %v", err)
	}
	// A subfolder of a snapshot belongs to the same repository.
	sub := filepath.Join(snap, "sub")
	os.Mkdir(sub, 0o755)
	os.Symlink("../../../blobs/aa11", filepath.Join(sub, "c.json"))
	if r2, err := NewRoot(sub); err != nil {
		t.Fatal(err)
	} else if _, err := r2.Resolve("c.json"); err != nil {
		t.Fatalf("subfolder: %v", err)
	}
}

func TestRootPlainDirectory(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "ckpt")
	os.MkdirAll(filepath.Join(dir, "inner"), 0o755)
	os.WriteFile(filepath.Join(dir, "inner", "a"), []byte("a"), 0o644)
	os.Symlink("inner/a", filepath.Join(dir, "in"))
	os.WriteFile(filepath.Join(base, "out"), []byte("o"), 0o600)
	os.Symlink("../out", filepath.Join(dir, "out"))
	// A directory merely named like a hub repository, without snapshots/, grants nothing.
	fake := filepath.Join(base, "models--x--y")
	os.MkdirAll(fake, 0o755)
	os.WriteFile(filepath.Join(fake, "b"), []byte("b"), 0o600)
	os.Symlink("../models--x--y/b", filepath.Join(dir, "fake"))
	r, err := NewRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve("in"); err != nil {
		t.Fatalf("link inside: %v", err)
	}
	for _, name := range []string{"out", "fake"} {
		if _, err := r.Resolve(name); !errors.Is(err, ErrOutside) || !strings.Contains(err.Error(), "links may point only inside the checkpoint directory") {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := r.Resolve("missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

// allowed is Root.Allowed for a single decision: whether the resolved path
// real may be read for the checkpoint directory root.
func allowed(root, real string) error {
	r, err := NewRoot(root)
	if err != nil {
		return err
	}
	return r.allowed(real)
}
