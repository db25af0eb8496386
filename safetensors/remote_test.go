package safetensors

import (
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
)

// rangeServer serves dir with Range support (http.ServeContent) and counts the
// body bytes it sends.
func rangeServer(t *testing.T, dir string, ranges bool) (*httptest.Server, *atomic.Int64) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(filepath.Join(dir, filepath.Clean(r.URL.Path)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		cw := &countWriter{ResponseWriter: w, n: &sent}
		if !ranges {
			r.Header.Del("Range")
			io.Copy(cw, f)
			return
		}
		http.ServeContent(cw, r, "", time.Time{}, f)
	}))
	t.Cleanup(srv.Close)
	return srv, &sent
}

type countWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return c.ResponseWriter.Write(p)
}

func TestRemoteHeadersOnly(t *testing.T) {
	dir := twoShardCheckpoint(t)
	// Make the data large so reading it would show in the byte count.
	writeTestFile(t, dir, "model-00002-of-00002.safetensors", []TensorSpec{{"c", U8, []int64{5}}})
	srv, sent := rangeServer(t, dir, true)
	for _, u := range []string{srv.URL + "/", srv.URL + "/" + IndexName} {
		sent.Store(0)
		c, err := Open(u)
		if err != nil {
			t.Fatal(err)
		}
		if c.NumTensors() != 3 {
			t.Fatalf("%d tensors", c.NumTensors())
		}
		var headers int64
		for _, f := range c.Files {
			headers += f.DataStart
		}
		idx, _ := os.ReadFile(filepath.Join(dir, IndexName))
		want := headers + int64(len(idx))
		// The 8-byte probe per file is the only overhead.
		if got := sent.Load(); got > want+8*int64(len(c.Files)) || got < want {
			t.Fatalf("fetched %d bytes, headers+index are %d", got, want)
		}
		if c.BytesFetched() < want {
			t.Fatalf("BytesFetched %d", c.BytesFetched())
		}
		cfg, err := c.ReadAux("config.json")
		if err != nil || !strings.Contains(string(cfg), "model_type") {
			t.Fatalf("remote config: %v", err)
		}
		// A tensor's bytes stream through the same reader.
		f, ti, _ := c.Lookup("a")
		b, err := io.ReadAll(f.Section(ti))
		if err != nil || len(b) != 24 || b[0] != 1 {
			t.Fatalf("remote tensor read: %v %v", err, b)
		}
	}
	c, err := Open(srv.URL + "/model-00001-of-00002.safetensors")
	if err != nil || c.NumTensors() != 2 {
		t.Fatalf("single remote file: %v", err)
	}
}

func TestRemoteErrors(t *testing.T) {
	dir := twoShardCheckpoint(t)
	srv, sent := rangeServer(t, dir, false)
	_, err := Open(srv.URL + "/model-00001-of-00002.safetensors")
	if !errors.Is(err, errRemote) || !strings.Contains(err.Error(), "range") {
		t.Fatalf("no-range server: %v", err)
	}
	_ = sent
	good, _ := rangeServer(t, dir, true)
	if _, err := Open(good.URL + "/nothing-here/"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := Open("http://127.0.0.1:1/x.safetensors"); !errors.Is(err, errRemote) {
		t.Fatalf("unreachable: %v", err)
	}
}
