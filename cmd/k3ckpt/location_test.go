package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnknownSchemeIsAnError: a scheme:// the command cannot read or write
// fails before anything runs, for every command, and nothing appears in the
// working directory (a DST "s3://b/x" used to become the local ./s3:/b/x).
// Under -short on the 16-layer replica.
func TestUnknownSchemeIsAnError(t *testing.T) {
	dir := shortReplica(t)
	t.Chdir(t.TempDir())
	local := t.TempDir()
	for _, args := range [][]string{
		{"inspect", "ftp://host/ckpt"},
		{"check", "ftp://host/ckpt"},
		{"convert", "ftp://host/ckpt", filepath.Join(local, "c")},
		{"convert", dir, "nosuch://bucket/out"},
		{"convert", dir, "hf://org/name"},
		{"verify", "ftp://host/ckpt", filepath.Join(local, "c")},
		{"verify", dir, "ftp://host/out"},
		{"shard", "ftp://host/ckpt", filepath.Join(local, "s")},
		{"shard", dir, "nosuch://bucket/out"},
		{"export", "ftp://host/ckpt", filepath.Join(local, "e"), "--layout", "dp16"},
		{"export", dir, "nosuch://bucket/out", "--layout", "dp16"},
		{"reassemble", "ftp://host/export", filepath.Join(local, "r")},
		{"reassemble", filepath.Join(local, "e"), "nosuch://bucket/out"},
		{"reassemble", filepath.Join(local, "e"), filepath.Join(local, "r"), "--check", "ftp://host/ckpt"},
		{"merge", "nosuch://bucket/out"},
		{"synth", "nosuch://bucket/out", "--dry-run"},
		{"reassemble", "s3://bucket/export", filepath.Join(local, "r")},
		{"shard", dir, "hf://org/name"},
		{"export", dir, "https://host/out", "--layout", "dp16"},
		{"reassemble", filepath.Join(local, "e"), "hf://org/name"},
	} {
		_, stderr, code := k3(args...)
		if code == 0 {
			t.Errorf("%v: exit 0", args)
			continue
		}
		scheme := "ftp://"
		for _, s := range []string{"nosuch://", "hf://", "https://", "s3://", "gs://"} {
			if strings.Contains(strings.Join(args, " "), s) {
				scheme = s
			}
		}
		if !strings.Contains(stderr, "cannot") || !strings.Contains(stderr, scheme) {
			t.Errorf("%v: error does not name the scheme %s: %s", args, scheme, stderr)
		}
	}
	if ents, _ := os.ReadDir("."); len(ents) != 0 {
		t.Errorf("the working directory got %d entries, first %s", len(ents), ents[0].Name())
	}
	if ents, _ := os.ReadDir(local); len(ents) != 0 {
		t.Errorf("%s got %d entries, first %s", local, len(ents), ents[0].Name())
	}
}
