// Package testckpt gives tests K3 checkpoints: header-only replicas on disk
// made once per test binary (Replica; Copy for a test that damages one),
// configs derived from the built-in ones, and a hub server and cache. A
// package using the replicas calls Main from its TestMain, which removes them
// when the tests end:
//
//	func TestMain(m *testing.M) { testckpt.Main(m) }
//
// End-to-end tests on the full-size replica (seconds and ~130 MB of disk)
// should be few and skip under -short.
package testckpt

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// The on-disk replicas of this test binary, under one temporary directory.
var (
	diskMu   sync.Mutex
	diskRoot string
	replicas = map[string]*dirEntry{}
)

type dirEntry struct {
	once sync.Once
	err  error
}

// Main runs a package's tests and removes the replicas they made; call it
// from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	diskMu.Lock()
	if diskRoot != "" {
		os.RemoveAll(diskRoot)
	}
	diskMu.Unlock()
	os.Exit(code)
}

// Replica is the directory of a header-only replica of a built-in scale
// (config.json, the shards with their data as holes, the index), synthesized
// on first use in this test binary. Tests must not write into it (Copy).
func Replica(tb testing.TB, scale model.Scale) string {
	tb.Helper()
	return Dir(tb, "replica-"+scale.String(), func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Scale: scale, HeaderOnly: true})
	})
}

// Dir is a directory made once per test binary by make (given an empty
// directory) and shared under name, for fixtures other than a plain replica.
// A failed make fails every test asking.
func Dir(tb testing.TB, name string, make func(dir string) error) string {
	tb.Helper()
	diskMu.Lock()
	if diskRoot == "" {
		d, err := os.MkdirTemp("", "k3ckpt-testckpt-")
		if err != nil {
			diskMu.Unlock()
			tb.Fatal(err)
		}
		diskRoot = d
	}
	e := replicas[name]
	if e == nil {
		e = &dirEntry{}
		replicas[name] = e
	}
	root := diskRoot
	diskMu.Unlock()
	dir := filepath.Join(root, name)
	e.once.Do(func() {
		if e.err = os.MkdirAll(dir, 0o755); e.err == nil {
			e.err = make(dir)
		}
		if e.err != nil {
			e.err = fmt.Errorf("test checkpoint %s: %w", name, e.err)
		}
	})
	if e.err != nil {
		tb.Fatal(e.err)
	}
	return dir
}

// Copy copies a header-only checkpoint directory (headers and side files;
// data stays holes) into a fresh tb.TempDir(), for a test that damages it.
func Copy(tb testing.TB, src string) string {
	tb.Helper()
	dst := tb.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		if err := copyHead(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			tb.Fatal(err)
		}
	}
	return dst
}

// copyHead copies a side file whole, or a shard's header, keeping its size.
func copyHead(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	var head []byte
	if filepath.Ext(src) == ".safetensors" {
		f, err := safetensors.OpenFile(src)
		if err != nil {
			return err
		}
		head = make([]byte, f.DataStart) // bounded by the codec's header limit
		_, err = f.ReaderAt().ReadAt(head, 0)
		f.Close()
		if err != nil {
			return err
		}
	} else if head, err = os.ReadFile(src); err != nil {
		return err
	}
	if err := os.WriteFile(dst, head, 0o666); err != nil {
		return err
	}
	return os.Truncate(dst, st.Size())
}
