package remote

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Without an ETag, Last-Modified identifies a file: every response must
// repeat it, so a file replaced mid-run by another of the same size fails
// the read instead of mixing versions.
func TestLastModifiedChange(t *testing.T) {
	data := pattern(4096, 1)
	var mu sync.Mutex
	lm := "Mon, 01 Dec 2026 10:00:00 GMT"
	fs := newFileServer(t, map[string][]byte{"a": data})
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		mu.Lock()
		w.Header().Set("Last-Modified", lm)
		mu.Unlock()
		serveRange(noETag{w}, r, data, "", func(int) {})
		return true
	}
	var warned []string
	o := fastOptions()
	o.Warn = func(m string) { warned = append(warned, m) }
	s := newTestSource(t, fs.url(), o)
	f, err := s.Open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if f.etag != "" || f.Version() != "last-modified "+lm || len(warned) != 0 {
		t.Fatalf("version %q (ETag %q), warnings %q", f.Version(), f.etag, warned)
	}
	if err := f.readRange(context.Background(), make([]byte, 100), 10, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	lm = "Mon, 01 Dec 2026 11:00:00 GMT"
	mu.Unlock()
	err = f.readRange(context.Background(), make([]byte, 100), 200, nil)
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "Last-Modified was Mon, 01 Dec 2026 10:00:00 GMT") {
		t.Fatalf("got %v, want ErrChanged naming Last-Modified", err)
	}
}

// noETag drops the ETag serveRange sets.
type noETag struct{ http.ResponseWriter }

func (w noETag) WriteHeader(code int) {
	w.Header().Del("ETag")
	w.ResponseWriter.WriteHeader(code)
}

// A server offering nothing to verify by is warned about once per source,
// however many such files are opened; a revision pinned to a commit is a
// version of its own.
func TestUnverifiedWarnedOnce(t *testing.T) {
	files := map[string][]byte{"a": pattern(100, 1), "b": pattern(200, 2)}
	fs := newFileServer(t, files)
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		serveRange(noETag{w}, r, files[name], "", func(int) {})
		return true
	}
	var warned []string
	o := fastOptions()
	o.Warn = func(m string) { warned = append(warned, m) }
	s := newTestSource(t, fs.url(), o)
	for _, n := range []string{"a", "b"} {
		f, err := s.Open(context.Background(), n)
		if err != nil || f.Version() != "" {
			t.Fatalf("%s: %v, version %q", n, err, f.Version())
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "no ETag, Last-Modified or commit for a") {
		t.Fatalf("warnings %q, want one naming the first file", warned)
	}
	const commit = "0123456789abcdef0123456789abcdef01234567"
	warned = nil
	ps, err := NewSource(context.Background(), location{Base: fs.url(), Revision: commit}, o)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ps.Open(context.Background(), "a")
	if err != nil || f.Version() != "commit "+commit || len(warned) != 0 {
		t.Fatalf("pinned: %v, version %q, warnings %q", err, f.Version(), warned)
	}
}
