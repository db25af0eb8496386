package remote

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveSlowly answers a range request with its headers, then writes the body
// through send (which returns false to stop), until the client goes away.
func serveSlowly(w http.ResponseWriter, r *http.Request, data []byte, etag string, send func(w http.ResponseWriter, r *http.Request, body []byte) bool) {
	a, b, _ := parseTestRange(r.Header.Get("Range"), int64(len(data)))
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Range", "bytes "+itoa(a)+"-"+itoa(b)+"/"+itoa(int64(len(data))))
	w.Header().Set("Content-Length", itoa(b-a+1))
	w.WriteHeader(http.StatusPartialContent)
	w.(http.Flusher).Flush()
	send(w, r, data[a:b+1])
}

func dataRequests(fs *fileServer) int {
	n := 0
	for _, e := range fs.requests() {
		if !strings.HasPrefix(e.rng, "bytes=0-") {
			n++
		}
	}
	return n
}

// A server that trickles a byte now and then keeps a stall timer alive for
// ever; the minimum rate fails each such attempt, and the read fails after
// its retries.
func TestTrickleFails(t *testing.T) {
	t.Parallel()
	data := pattern(64<<10, 1)
	fs := newFileServer(t, map[string][]byte{"a": data})
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		if n == 1 {
			return false // the probe
		}
		serveSlowly(w, r, data, fs.etags[name], func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			for i := range body {
				select {
				case <-r.Context().Done():
					return false
				case <-time.After(5 * time.Millisecond):
				}
				w.Write(body[i : i+1])
				w.(http.Flusher).Flush()
			}
			return true
		})
		return true
	}
	o := fastOptions()
	// Windows long enough that a loaded machine still gets the probe and
	// each header in time: the attempts fail on their bodies' rate.
	o.StallTimeout, o.MinRate, o.Retries = 400*time.Millisecond, 1000, 2
	s := newTestSource(t, fs.url(), o)
	f, err := s.Open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	err = f.readRange(context.Background(), make([]byte, 32<<10), 100, nil)
	var e *Error
	if !errors.Is(err, errTimeout) || !errors.As(err, &e) || e.Attempts != 3 ||
		!strings.Contains(err.Error(), "under the minimum rate of 1000 B/s") {
		t.Fatalf("got %v, want a timeout under the minimum rate after 3 attempts", err)
	}
	if n := dataRequests(fs); n != 3 {
		t.Errorf("%d data requests, want 3", n)
	}
}

// A server that sends a little and then stalls on every attempt advances
// each retry a little: the retries of a read are bounded in all, progress or
// not, so the read fails after Retries+1 attempts instead of crawling on.
func TestStallAfterProgressBounded(t *testing.T) {
	t.Parallel()
	data := pattern(1<<20, 2)
	fs := newFileServer(t, map[string][]byte{"a": data})
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		if n == 1 {
			return false
		}
		serveSlowly(w, r, data, fs.etags[name], func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			w.Write(body[:100])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return false
		})
		return true
	}
	o := fastOptions()
	// Long enough that a loaded machine still sends the first 100 bytes of
	// every attempt in time: each attempt stalls after them.
	o.StallTimeout, o.MinRate, o.Retries = 300*time.Millisecond, -1, 3
	rec := &recorder{}
	o.Progress = rec
	s := newTestSource(t, fs.url(), o)
	f, err := s.Open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	err = f.readRange(context.Background(), make([]byte, 500_000), 1000, nil)
	var e *Error
	if !errors.Is(err, errTimeout) || !errors.As(err, &e) || e.Attempts != 4 || !strings.Contains(err.Error(), "no data for 300ms") {
		t.Fatalf("got %v, want a stall after 4 attempts", err)
	}
	if n := dataRequests(fs); n != 4 {
		t.Errorf("%d data requests, want 4", n)
	}
	if len(rec.retries) != 3 || rec.retries[2].Attempt != 3 || rec.retries[2].Resume != 1000+300 {
		t.Errorf("retries %+v, want 3 counted 1..3, each resuming after the bytes received", rec.retries)
	}
}

// A read that keeps failing after some progress, with retries to spare, ends
// at its deadline: the time limit plus its bytes' time at the minimum rate.
func TestReadDeadline(t *testing.T) {
	t.Parallel()
	data := pattern(1<<20, 3)
	fs := newFileServer(t, map[string][]byte{"a": data})
	fs.hook = func(w http.ResponseWriter, r *http.Request, name string, n int) bool {
		if n == 1 {
			return false
		}
		serveSlowly(w, r, data, fs.etags[name], func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			w.Write(body[:100])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		})
		return true
	}
	o := fastOptions()
	o.RetryBase, o.RetryMax = 10*time.Millisecond, 10*time.Millisecond
	o.Retries, o.TimeLimit, o.MinRate = 1_000_000, 100*time.Millisecond, 1<<20
	s := newTestSource(t, fs.url(), o)
	f, err := s.Open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	err = f.readRange(context.Background(), make([]byte, 1<<19), 1000, nil)
	if !errors.Is(err, errTimeout) || !strings.Contains(err.Error(), "524288 bytes at offset 1000 not received within 600ms (the time limit 100ms plus their time at the minimum rate of 1 MiB/s)") {
		t.Fatalf("got %v, want the read's deadline", err)
	}
	if n := dataRequests(fs); n > 200 {
		t.Errorf("%d data requests in 600ms", n)
	}
}

// The deadline scales with the read's size.
func TestReadDeadlineScales(t *testing.T) {
	t.Parallel()
	s := newTestSource(t, "http://127.0.0.1:1/", Options{MinRate: 1 << 10, TimeLimit: time.Second})
	for _, n := range []int64{0, 1 << 10, 1 << 20} {
		ctx, cancel := s.readDeadline(context.Background(), "a", 0, n)
		dl, ok := ctx.Deadline()
		cancel()
		want := time.Second + time.Duration(n>>10)*time.Second
		if got := time.Until(dl); !ok || got > want || got < want-time.Second/2 {
			t.Errorf("%d bytes: deadline in %v, want %v", n, got, want)
		}
	}
}
