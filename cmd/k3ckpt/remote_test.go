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

	"github.com/k3ckpt/k3ckpt/model"
)

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

// TestConvertFromURL runs `k3ckpt convert` on a tiny replica served over
// HTTP from 127.0.0.1 and on the same directory: the shards, index and
// config are the same bytes, and the JSON report carries the network
// figures (needed ≤ fetched ≤ what the server sent).
func TestConvertFromURL(t *testing.T) {
	if testing.Short() {
		t.Skip("converts the tiny replica twice")
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := model.Synth(src, model.SynthOptions{Scale: model.ScaleTiny, Seed: 3}); err != nil {
		t.Fatal(err)
	}
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
