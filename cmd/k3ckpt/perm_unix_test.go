//go:build unix

package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// privateCopy copies the header-only replica dir (its data regions stay
// holes) into a fresh temporary directory and makes every file 0600.
func privateCopy(t *testing.T, dir string) string {
	t.Helper()
	dst := testckpt.Copy(t, dir)
	ents, err := os.ReadDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Chmod(filepath.Join(dst, e.Name()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// permsUnder fails the test for every regular file under dir with bits
// outside allowed, and reports how many files it saw.
func permsUnder(t *testing.T, dir string, allowed os.FileMode) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if m := fi.Mode().Perm(); m&^allowed != 0 {
			t.Errorf("%s: mode %v, more readable than %v", p, m, allowed)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Outputs are no more readable than their source: under umask 077 every
// file of synth and convert is private; under umask 022 a 0600 source
// gives 0600 outputs (shards, configs, index, side files alike) from
// convert, shard, export and reassemble.
func TestOutputsNoMoreReadableThanSource(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	tmp := t.TempDir()
	src := privateCopy(t, smallReplica(t))
	cfg := filepath.Join(tmp, "config.json")
	if err := os.WriteFile(cfg, testckpt.LayersConfigJSON(t, model.ScaleTiny, 16), 0o644); err != nil {
		t.Fatal(err)
	}

	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	syn, conv := filepath.Join(tmp, "synth"), filepath.Join(tmp, "conv077")
	for _, args := range [][]string{{"synth", syn, "--config", cfg, "-q"}, {"convert", src, conv, "-q"}} {
		if _, e, code := k3(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
	}
	for _, dir := range []string{syn, conv} {
		if n := permsUnder(t, dir, 0o600); n == 0 {
			t.Errorf("%s: no files", dir)
		}
	}

	syscall.Umask(0o022)
	conv, st, re, ex := filepath.Join(tmp, "conv"), filepath.Join(tmp, "st"), filepath.Join(tmp, "re"), filepath.Join(tmp, "ex")
	for _, args := range [][]string{
		{"convert", src, conv, "-q"},
		{"shard", src, st, "-q"},
		{"reassemble", st, re, "-q"},
		{"export", src, ex, "--layout", "dp2-dcp8", "--ranks", "0", "-q"},
	} {
		if _, e, code := k3(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
	}
	for _, dir := range []string{conv, st, re, ex} {
		if n := permsUnder(t, dir, 0o600); n == 0 {
			t.Errorf("%s: no files", dir)
		}
	}
}
