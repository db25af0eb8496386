package s3test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// proxy is a loopback reverse proxy in front of a Server that misbehaves on
// purpose: it answers 503 SlowDown to the first Throttle requests, cuts
// the connection halfway through the body of the first Cut GETs that carry
// a body, and, once Hold object or part uploads have passed, holds every
// later one until its client goes away (a run killed mid-upload). The Host header
// passes unchanged, so signatures stay valid.
type proxy struct {
	// URL is the proxy's endpoint, to use instead of the server's.
	URL string
	// Throttle, Cut and Corrupt are the misbehaviours left to perform;
	// Corrupt flips a byte in the body of that many uploaded parts.
	Throttle, Cut, Corrupt atomic.Int64
	// Hold is how many uploads (PUTs of an object or a part, bar those
	// under a .k3ckpt/ folder) pass before the rest are held (0: none).
	Hold atomic.Int64
	// Throttled, Cuts, Corrupted and Held count what was done; Puts counts
	// the uploads seen.
	Throttled, Cuts, Corrupted, Held, Puts atomic.Int64
}

// NewProxy starts a proxy to s, stopped at the end of the test.
func (s *Server) NewProxy(t testing.TB) *proxy {
	target, _ := url.Parse(s.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &proxy{}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.Throttle.Add(-1) >= 0 {
			p.Throttled.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
			return
		}
		isPart := r.Method == http.MethodPut && r.URL.Query().Has("partNumber")
		if r.Method == http.MethodPut && !strings.Contains(r.URL.Path, "/.k3ckpt/") {
			if n, hold := p.Puts.Add(1), p.Hold.Load(); hold > 0 && n > hold {
				p.Held.Add(1)
				io.Copy(io.Discard, r.Body) // then the server sees the client go
				select {
				case <-r.Context().Done():
				case <-release:
				}
				return
			}
		}
		if isPart && p.Corrupt.Add(-1) >= 0 {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if len(b) > 0 {
				b[len(b)/2] ^= 0x40
			}
			p.Corrupted.Add(1)
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		if r.Method == http.MethodGet && !r.URL.Query().Has("list-type") && p.Cut.Add(-1) >= 0 {
			p.Cuts.Add(1)
			rp.ServeHTTP(&cutWriter{ResponseWriter: w}, r)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handlers
	p.URL = srv.URL
	return p
}

// cutWriter passes the headers and half of the announced body, then aborts
// the connection.
type cutWriter struct {
	http.ResponseWriter
	limit, sent int64
}

func (c *cutWriter) WriteHeader(code int) {
	if n := c.Header().Get("Content-Length"); n != "" {
		v, _ := strconv.ParseInt(n, 10, 64)
		c.limit = v / 2
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if c.sent+int64(len(b)) > c.limit {
		n, _ := c.ResponseWriter.Write(b[:c.limit-c.sent])
		c.sent += int64(n)
		c.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	n, err := c.ResponseWriter.Write(b)
	c.sent += int64(n)
	return n, err
}

// Flush lets the reverse proxy flush through.
func (c *cutWriter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }
