package safetensors

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// openFast opens p with retries a millisecond apart and no environment
// (no token, no HF_ENDPOINT from the machine running the tests).
func openFast(ctx context.Context, p string) (*Checkpoint, error) {
	return OpenWith(ctx, p, OpenOptions{
		Remote: remote.Options{RetryBase: time.Microsecond, RetryMax: time.Millisecond},
		Env:    func(string) string { return "" },
	})
}

// TestRemoteErrorsSayWhat checks that each failure of a remote source is
// reported as what it is, not as "not found".
func TestRemoteErrorsSayWhat(t *testing.T) {
	// Connection refused: a port that was listening and is closed now.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/"
	l.Close()
	noHang(t, "refused", func() {
		_, err := Open(closed) // default options: a host never reached is not retried
		if !errors.Is(err, errRemote) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "connection refused") || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("refused: %v", err)
		}
	})

	status := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer status.Close()
	host := strings.TrimPrefix(status.URL, "http://")
	for _, u := range []string{status.URL + "/", status.URL + "/" + IndexName, status.URL + "/x.safetensors"} {
		_, err := openFast(t.Context(), u) // a 500 is retried: quickly here
		if !errors.Is(err, errRemote) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "HTTP 500") || !strings.Contains(err.Error(), "from "+host) {
			t.Errorf("%s: %v, want HTTP 500 naming the host", u, err)
		}
	}

	var hops atomic.Int64
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hops.Add(1)
		if strings.HasPrefix(r.URL.Path, "/ping") {
			http.Redirect(w, r, "/pong"+r.URL.Path[5:], http.StatusFound)
			return
		}
		http.Redirect(w, r, "/ping"+r.URL.Path[5:], http.StatusFound)
	}))
	defer loop.Close()
	_, err = Open(loop.URL + "/ping/x.safetensors")
	if !errors.Is(err, errRemote) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "redirect loop") {
		t.Errorf("redirect loop: %v", err)
	}
	if hops.Load() > 10+1 { // remote's default bound: 10 redirects
		t.Errorf("followed %d redirects", hops.Load())
	}

	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	if _, err := Open(missing.URL + "/x.safetensors"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "404") {
		t.Errorf("404: %v", err)
	}
}

// TestRemoteOneDeadline serves the index and lets every shard hang: the
// whole opening ends with the caller's deadline, reported as a timeout,
// instead of one request timeout per shard.
func TestRemoteOneDeadline(t *testing.T) {
	t.Parallel()
	dir := twoShardCheckpoint(t)
	idx, _ := os.ReadFile(filepath.Join(dir, IndexName))
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, IndexName) {
			w.Write(idx)
			return
		}
		select { // hang until the client gives up or the test ends
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	noHang(t, "hanging shards", func() {
		_, err := OpenWith(ctx, srv.URL+"/"+IndexName, OpenOptions{})
		if !errors.Is(err, errRemote) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out") {
			t.Errorf("got %v, want a timeout", err)
		}
	})
}

// TestRemoteFirstErrorCancels fails one shard and hangs the other: the
// failure is returned without waiting for the hanging request.
func TestRemoteFirstErrorCancels(t *testing.T) {
	dir := twoShardCheckpoint(t)
	idx, _ := os.ReadFile(filepath.Join(dir, IndexName))
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, IndexName):
			w.Write(idx)
		case strings.Contains(r.URL.Path, "00001"):
			http.Error(w, "gone bad", http.StatusBadGateway)
		default:
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	defer srv.Close()
	defer close(release)
	noHang(t, "one failing shard", func() {
		_, err := openFast(t.Context(), srv.URL+"/"+IndexName) // RemoteOpenTimeout is minutes: the hang guard fires first
		if err == nil || !strings.Contains(err.Error(), "HTTP 502") || !strings.Contains(err.Error(), "00001") {
			t.Errorf("got %v, want the 502 of shard 1", err)
		}
	})
}

// TestRemoteEndlessIndex streams an index that never ends: at most
// MaxIndexSize bytes are buffered before the body is refused.
func TestRemoteEndlessIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("streams MaxIndexSize bytes")
	}
	chunk := []byte(strings.Repeat(" ", 1<<16))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("{"))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	noHang(t, "endless index", func() {
		_, err := Open(srv.URL + "/" + IndexName)
		if !errors.Is(err, errRemote) || !strings.Contains(err.Error(), "limit") {
			t.Errorf("got %v, want the size limit", err)
		}
	})
}
