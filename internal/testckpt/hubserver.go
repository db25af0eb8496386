package testckpt

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// HubServer serves a checkpoint directory as the hub repository
// hf://org/name on 127.0.0.1: files with byte ranges and an ETag ("v1"
// unless set), and the file listing. It counts range requests' body bytes
// per file, and can fail a file or give it another ETag.
type HubServer struct {
	URL string // the server's base URL (HF_ENDPOINT)
	// Env is the environment a remote open sees: HF_ENDPOINT is the server,
	// HOME a folder with no token.
	Env func(key string) string
	dir string

	mu   sync.Mutex
	sent map[string]int64  // range-request body bytes per file
	fail map[string]int    // file → HTTP status to answer instead (0: none)
	etag map[string]string // file → ETag other than "v1"
}

// NewHubServer serves dir until the test ends.
func NewHubServer(tb testing.TB, dir string) *HubServer {
	h := &HubServer{dir: dir, sent: map[string]int64{}, fail: map[string]int{}, etag: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(h.serve))
	tb.Cleanup(srv.Close)
	h.URL = srv.URL
	env := map[string]string{"HF_ENDPOINT": h.URL, "HOME": dir + "-nohome"}
	h.Env = func(k string) string { return env[k] }
	return h
}

// Sent is the range-request body bytes sent since the last Reset of the
// file name, or of every file for "".
func (h *HubServer) Sent(name string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if name != "" {
		return h.sent[name]
	}
	var n int64
	for _, v := range h.sent {
		n += v
	}
	return n
}

// Reset zeroes the byte counts.
func (h *HubServer) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent = map[string]int64{}
}

// Fail answers every request for name with status (0: serve it again).
func (h *HubServer) Fail(name string, status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fail[name] = status
}

// SetETag gives name another ETag, as if the file had changed upstream.
func (h *HubServer) SetETag(name, etag string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.etag[name] = etag
}

func (h *HubServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/api/models/org/name/revision/main" {
		var sibs []map[string]any
		filepath.WalkDir(h.dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if info, err := d.Info(); err == nil {
					rel, _ := filepath.Rel(h.dir, p)
					sibs = append(sibs, map[string]any{"rfilename": filepath.ToSlash(rel), "size": info.Size()})
				}
			}
			return nil
		})
		json.NewEncoder(w).Encode(map[string]any{"siblings": sibs})
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/org/name/resolve/main/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	status, etag := h.fail[name], h.etag[name]
	h.mu.Unlock()
	if status != 0 {
		http.Error(w, "failing on purpose", status)
		return
	}
	f, err := os.Open(filepath.Join(h.dir, filepath.FromSlash(name)))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	if etag == "" {
		etag = `"v1"`
	}
	w.Header().Set("ETag", etag)
	ranged := r.Header.Get("Range") != ""
	http.ServeContent(&countingWriter{w, func(n int) {
		if ranged {
			h.mu.Lock()
			h.sent[name] += int64(n)
			h.mu.Unlock()
		}
	}}, r, "", time.Time{}, f)
}

type countingWriter struct {
	http.ResponseWriter
	add func(int)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.add(n)
	return n, err
}
