package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// remoteSource is the tiny replica cut to 16 layers with its data (seed 3),
// made once per test binary for the tests that serve it over HTTP: read only.
func remoteSource(t *testing.T) string {
	t.Helper()
	cfg := testckpt.LayersConfigJSON(t, model.ScaleTiny, 16)
	return testckpt.Dir(t, "remote-src-16", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: cfg, Seed: 3})
	})
}

func runConvertCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newConvertCmd()
	var out, errs bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errs) // warnings: not part of the report
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// TestConvertFromURL runs `k3ckpt convert` on a small replica served over
// HTTP from 127.0.0.1 and on the same directory: the shards, index and
// config are the same bytes, and the JSON report carries the network
// figures (needed ≤ fetched ≤ what the server sent).
func TestConvertFromURL(t *testing.T) {
	if testing.Short() {
		t.Skip("converts a replica twice")
	}
	t.Parallel()
	src := remoteSource(t)
	var sent atomic.Int64
	fsrv := http.FileServer(http.Dir(src))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fsrv.ServeHTTP(&countW{w, &sent}, r)
	}))
	defer srv.Close()
	local, remote := filepath.Join(t.TempDir(), "local"), filepath.Join(t.TempDir(), "remote")
	if _, err := runConvertCmd(t, src, local, "--json"); err != nil {
		t.Fatal(err)
	}
	out, err := runConvertCmd(t, srv.URL+"/", remote, "--json", "--connections", "4")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rep struct {
		Finalized bool `json:"finalized"`
		Network   *struct {
			Needed  int64 `json:"needed_bytes"`
			Fetched int64 `json:"fetched_bytes"`
			Total   int64 `json:"total_received_bytes"`
		} `json:"network"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.Finalized || rep.Network == nil {
		t.Fatalf("report %s: %v", out, err)
	}
	n := rep.Network
	if n.Needed <= 0 || n.Fetched < n.Needed || n.Fetched > 2*n.Needed || n.Total < n.Fetched || n.Total > sent.Load() {
		t.Fatalf("network %+v, server sent %d", *n, sent.Load())
	}
	ents, _ := os.ReadDir(local)
	if rents, _ := os.ReadDir(remote); len(rents) != len(ents) {
		t.Errorf("%d entries from the URL, %d from the directory", len(rents), len(ents))
	}
	for _, e := range ents {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		a, _ := os.ReadFile(filepath.Join(local, e.Name()))
		b, err := os.ReadFile(filepath.Join(remote, e.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: differs between the local and the remote conversion (%v)", e.Name(), err)
		}
	}
}

type countW struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countW) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// TestExportFromURL runs `k3ckpt export --layout dp16 --ranks 0` on a small
// replica over HTTP and on the directory: the same files, and the report's
// network figures show the rank fetched its own bytes only (fetched within
// twice the needed bytes, the server's total below the checkpoint's size).
func TestExportFromURL(t *testing.T) {
	if testing.Short() {
		t.Skip("exports a replica twice")
	}
	t.Parallel()
	src := remoteSource(t)
	var size int64
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			size += info.Size()
		}
	}
	var sent atomic.Int64
	fsrv := http.FileServer(http.Dir(src))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fsrv.ServeHTTP(&countW{w, &sent}, r)
	}))
	defer srv.Close()
	run := func(args ...string) string {
		cmd := newExportCmd()
		var out, errs bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errs)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("export %v: %v\n%s%s", args, err, out.String(), errs.String())
		}
		return out.String()
	}
	local, remote := filepath.Join(t.TempDir(), "local"), filepath.Join(t.TempDir(), "remote")
	run(src, local, "--layout", "dp16", "--ranks", "0")
	out := run(srv.URL+"/", remote, "--layout", "dp16", "--ranks", "0", "--json", "--connections", "8")
	var rep struct {
		Network *struct {
			Needed  int64 `json:"needed_bytes"`
			Fetched int64 `json:"fetched_bytes"`
			Total   int64 `json:"total_received_bytes"`
		} `json:"network"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Network == nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	n := rep.Network
	if n.Needed <= 0 || n.Fetched < n.Needed || n.Fetched > 2*n.Needed || n.Total > sent.Load() || sent.Load() >= size {
		t.Fatalf("network %+v, server sent %d of %d", *n, sent.Load(), size)
	}
	want := map[string][]byte{}
	// Dot files are the runs' records of their outputs' stamps (inode, times):
	// they differ between any two runs.
	filepath.WalkDir(local, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
			rel, _ := filepath.Rel(local, p)
			want[rel], _ = os.ReadFile(p)
		}
		return nil
	})
	got := 0
	filepath.WalkDir(remote, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
			rel, _ := filepath.Rel(remote, p)
			b, _ := os.ReadFile(p)
			if w, ok := want[rel]; !ok || !bytes.Equal(w, b) {
				t.Errorf("%s: not the local export's", rel)
			}
			got++
		}
		return nil
	})
	if got != len(want) || got == 0 {
		t.Errorf("%d files from the URL, %d from the directory", got, len(want))
	}
}
