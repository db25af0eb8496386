package safetensors

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// TestRemoteHub opens hf://org/name@rev from a hub-like origin that checks
// the token and 302-redirects every file to a CDN on another port (another
// origin) that refuses any Authorization header: the checkpoint opens, its
// tensors read as on disk, and the token never reaches the CDN.
func TestRemoteHub(t *testing.T) {
	dir := twoShardCheckpoint(t)
	var leaked atomic.Int64
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
			http.Error(w, "no tokens here", http.StatusBadRequest)
			return
		}
		f, err := os.Open(filepath.Join(dir, filepath.Base(r.URL.Path)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		http.ServeContent(w, r, "", time.Time{}, f)
	}))
	defer cdn.Close()
	const prefix = "/org/name/resolve/v1.0/"
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "token", http.StatusUnauthorized)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("X-Repo-Commit", strings.Repeat("a", 40))
		http.Redirect(w, r, cdn.URL+"/blobs/"+name, http.StatusFound)
	}))
	defer hub.Close()
	env := map[string]string{"HF_ENDPOINT": hub.URL, "HF_TOKEN": "secret", "HOME": t.TempDir()}
	c, err := OpenWith(t.Context(), "hf://org/name@v1.0", OpenOptions{Env: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Remote == nil || c.Root != hub.URL+prefix || c.NumTensors() != 3 {
		t.Fatalf("remote %v, root %s, %d tensors", c.Remote, c.Root, c.NumTensors())
	}
	local, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	for _, name := range []string{"a", "b", "c"} {
		f, ti, _ := c.Lookup(name)
		got, err := io.ReadAll(f.Section(ti))
		lf, lti, _ := local.Lookup(name)
		want, _ := io.ReadAll(lf.Section(lti))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("tensor %s: %v, %x want %x", name, err, got, want)
		}
	}
	if leaked.Load() != 0 {
		t.Fatalf("the token went to the CDN %d times", leaked.Load())
	}
	// The CDN sends no ETag or Last-Modified: the hub's X-Repo-Commit is
	// what identifies the files' version.
	rf, _ := c.Files[0].ReaderAt().(*remote.File)
	if c.BytesFetched() < c.HeaderBytesRead || rf == nil || rf.Version() != "commit "+strings.Repeat("a", 40) {
		t.Fatalf("fetched %d, headers %d, file %v", c.BytesFetched(), c.HeaderBytesRead, rf)
	}

	// Without the token the hub refuses, and the error says so.
	delete(env, "HF_TOKEN")
	_, err = OpenWith(t.Context(), "hf://org/name@v1.0", OpenOptions{Env: func(k string) string { return env[k] }})
	if !errors.Is(err, errRemote) || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "no token was sent") {
		t.Fatalf("no token: %v", err)
	}
}

// TestRemoteHubOffline: with HF_HUB_OFFLINE an hf:// reference opens the
// cached snapshot (refs/main naming the commit), with no network at all.
func TestRemoteHubOffline(t *testing.T) {
	dir := twoShardCheckpoint(t)
	cache := t.TempDir()
	commit := strings.Repeat("b", 40)
	repo := filepath.Join(cache, "models--org--name")
	snap := filepath.Join(repo, "snapshots", commit)
	if err := os.MkdirAll(filepath.Join(repo, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(snap), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, snap); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": cache, "HF_ENDPOINT": "http://127.0.0.1:1"}
	c, err := OpenWith(t.Context(), "hf://org/name", OpenOptions{Env: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Remote != nil || c.NumTensors() != 3 || c.Root != snap {
		t.Fatalf("offline: remote %v, root %s, %d tensors", c.Remote, c.Root, c.NumTensors())
	}
	if _, err := OpenWith(t.Context(), "hf://org/other", OpenOptions{Env: func(k string) string { return env[k] }}); !errors.Is(err, errRemote) || !strings.Contains(err.Error(), "offline") {
		t.Fatalf("offline, not cached: %v", err)
	}
}
