package remote

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fileServer is a loopback origin serving byte ranges of in-memory files the
// way a CDN does (206, Content-Range, Content-Length, ETag), with hooks to
// misbehave. It logs every request.
type fileServer struct {
	t   *testing.T
	srv *httptest.Server

	mu    sync.Mutex
	files map[string][]byte
	etags map[string]string
	log   []logEntry
	sent  int64
	// hook, if set, may answer a request itself (returning true). n counts
	// the requests for that path, from 1.
	hook func(w http.ResponseWriter, r *http.Request, name string, n int) bool
	seen map[string]int
}

type logEntry struct {
	path, rng, auth string
}

func newFileServer(t *testing.T, files map[string][]byte) *fileServer {
	fs := &fileServer{t: t, files: files, etags: map[string]string{}, seen: map[string]int{}}
	for n := range files {
		fs.etags[n] = `"v1-` + n + `"`
	}
	fs.srv = httptest.NewServer(http.HandlerFunc(fs.serve))
	t.Cleanup(fs.srv.Close)
	return fs
}

func (fs *fileServer) url() string { return fs.srv.URL + "/repo/" }

// set replaces a file's content and ETag (a file changing under a run).
func (fs *fileServer) set(name string, data []byte, etag string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.files[name], fs.etags[name] = data, etag
}

func (fs *fileServer) requests() []logEntry {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]logEntry(nil), fs.log...)
}

func (fs *fileServer) bytesSent() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.sent
}

func (fs *fileServer) serve(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/repo/")
	fs.mu.Lock()
	if len(fs.log) > 10000 { // a runaway client loop fails the test instead of spinning
		fs.mu.Unlock()
		fs.t.Error("more than 10000 requests")
		http.Error(w, "too many", http.StatusTeapot)
		return
	}
	fs.log = append(fs.log, logEntry{path: name, rng: r.Header.Get("Range"), auth: r.Header.Get("Authorization")})
	fs.seen[name]++
	n := fs.seen[name]
	hook := fs.hook
	data, ok := fs.files[name]
	etag := fs.etags[name]
	fs.mu.Unlock()
	if hook != nil && hook(w, r, name, n) {
		return
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	serveRange(w, r, data, etag, func(k int) {
		fs.mu.Lock()
		fs.sent += int64(k)
		fs.mu.Unlock()
	})
}

// serveRange answers one "bytes=a-b" range (or the whole file without one).
func serveRange(w http.ResponseWriter, r *http.Request, data []byte, etag string, sent func(int)) {
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Accept-Ranges", "bytes")
	rng := r.Header.Get("Range")
	if rng == "" {
		h.Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		sent(len(data)) // counted before the client can have it
		w.Write(data)
		return
	}
	a, b, ok := parseTestRange(rng, int64(len(data)))
	if !ok {
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		return
	}
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b, len(data)))
	h.Set("Content-Length", strconv.FormatInt(b-a+1, 10))
	w.WriteHeader(http.StatusPartialContent)
	sent(int(b - a + 1)) // counted before the client can have it
	w.Write(data[a : b+1])
}

func parseTestRange(s string, size int64) (int64, int64, bool) {
	s, ok := strings.CutPrefix(s, "bytes=")
	if !ok {
		return 0, 0, false
	}
	as, bs, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, false
	}
	a, err1 := strconv.ParseInt(as, 10, 64)
	b, err2 := strconv.ParseInt(bs, 10, 64)
	if err1 != nil || err2 != nil || a < 0 || b < a || a >= size {
		return 0, 0, false
	}
	return a, min(b, size-1), true
}

// pattern is deterministic test content: byte i of file seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>8) ^ seed
	}
	return b
}

// fastOptions retry at once: no test waits for a real backoff.
func fastOptions() Options {
	return Options{RetryBase: time.Microsecond, RetryMax: time.Millisecond, StallTimeout: 5 * time.Second}
}

func newTestSource(t *testing.T, base string, o Options) *Source {
	t.Helper()
	s, err := NewSource(context.Background(), location{Base: base}, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rangeStart reads the first byte offset of a "bytes=a-b" header.
func rangeStart(t *testing.T, rng string) int64 {
	t.Helper()
	a, _, ok := strings.Cut(strings.TrimPrefix(rng, "bytes="), "-")
	n, err := strconv.ParseInt(a, 10, 64)
	if !ok || err != nil {
		t.Fatalf("bad Range %q", rng)
	}
	return n
}

// recorder is a Progress keeping every event.
type recorder struct {
	mu      sync.Mutex
	bytes   int64
	retries []RetryEvent
}

func (r *recorder) Fetched(n int64) { r.mu.Lock(); r.bytes += n; r.mu.Unlock() }
func (r *recorder) Retry(ev RetryEvent) {
	r.mu.Lock()
	r.retries = append(r.retries, ev)
	r.mu.Unlock()
}

func mustTime(s string) time.Time {
	t, err := http.ParseTime(s)
	if err != nil {
		panic(err)
	}
	return t
}
