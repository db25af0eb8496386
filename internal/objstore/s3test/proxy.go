package s3test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// proxy is a loopback reverse proxy in front of a Server that misbehaves on
// purpose (see its fields). The Host header passes unchanged, so signatures
// stay valid.
type proxy struct {
	URL string // the endpoint to use instead of the server's
	// Throttle, Cut and Corrupt are the misbehaviours left to perform:
	// answer 503 SlowDown, cut a GET's connection halfway through its body,
	// flip a byte in an uploaded part's body.
	Throttle, Cut, Corrupt atomic.Int64
	// Hold is how many uploads (PUTs of an object or a part, bar those under
	// a .k3ckpt/ folder) pass before the rest are held until their client
	// goes away, as in a run killed mid-upload (0: none).
	Hold atomic.Int64
	// Throttled, Cuts, Corrupted and Held count what was done, Puts the
	// uploads seen, Requests those passed on, Received their body bytes.
	Throttled, Cuts, Corrupted, Held, Puts atomic.Int64
	Requests, Received                     atomic.Int64
	// Sizes, when set, makes listings, HEAD and a ranged GET's Content-Range
	// give these sizes (keyed bucket/key) whatever the server stores, which
	// must still hold every byte a client reads (e.g. a replica's headers).
	Sizes atomic.Pointer[map[string]int64]
}

// listedSizeRE matches an object's key and size in a ListObjectsV2 answer.
var listedSizeRE = regexp.MustCompile(`(?s)<Key>([^<]*)</Key>(.*?)<Size>[0-9]+</Size>`)

// cutKey marks, in a request's context, a response to cut halfway.
type cutKey struct{}

// errCut ends the body of a response cut halfway: the reverse proxy then
// aborts the connection (http.ErrAbortHandler) after what it has sent.
var errCut = errors.New("s3test: connection cut on purpose")

// rewrite is the ReverseProxy's ModifyResponse: Sizes, counting and cuts.
func (p *proxy) rewrite(resp *http.Response) error {
	p.Requests.Add(1)
	if m := p.Sizes.Load(); m != nil {
		sizes, r := *m, resp.Request
		name := strings.TrimPrefix(r.URL.Path, "/")
		bucket, _, _ := strings.Cut(name, "/")
		switch {
		case r.Method == http.MethodGet && r.URL.Query().Has("list-type"):
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			b = listedSizeRE.ReplaceAllFunc(b, func(m []byte) []byte {
				sub := listedSizeRE.FindSubmatch(m)
				if n, ok := sizes[bucket+"/"+string(sub[1])]; ok {
					return []byte("<Key>" + string(sub[1]) + "</Key>" + string(sub[2]) + "<Size>" + strconv.FormatInt(n, 10) + "</Size>")
				}
				return m
			})
			resp.Body = io.NopCloser(bytes.NewReader(b))
			resp.ContentLength = int64(len(b))
			resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		case r.Method == http.MethodHead:
			if n, ok := sizes[name]; ok && resp.StatusCode == http.StatusOK {
				resp.Header.Set("Content-Length", strconv.FormatInt(n, 10))
			}
		case r.Method == http.MethodGet:
			cr := resp.Header.Get("Content-Range")
			if n, ok := sizes[name]; ok && strings.Contains(cr, "/") {
				resp.Header.Set("Content-Range", cr[:strings.LastIndexByte(cr, '/')+1]+strconv.FormatInt(n, 10))
			}
		}
	}
	body := &countingBody{ReadCloser: resp.Body, n: &p.Received, left: -1}
	if resp.Request.Context().Value(cutKey{}) != nil {
		body.left = resp.ContentLength / 2
	}
	resp.Body = body
	return nil
}

// countingBody adds the bytes read through it to n and, with left not
// negative, fails with errCut once left bytes are read.
type countingBody struct {
	io.ReadCloser
	n    *atomic.Int64
	left int64
}

func (c *countingBody) Read(b []byte) (int, error) {
	if c.left == 0 {
		return 0, errCut
	}
	if c.left > 0 && int64(len(b)) > c.left {
		b = b[:c.left]
	}
	k, err := c.ReadCloser.Read(b)
	c.n.Add(int64(k))
	if c.left > 0 {
		c.left -= int64(k)
	}
	return k, err
}

// NewProxy starts a proxy to s, stopped at the end of the test.
func (s *Server) NewProxy(t testing.TB) *proxy {
	target, _ := url.Parse(s.Endpoint)
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &proxy{}
	rp.ModifyResponse = p.rewrite
	rp.ErrorLog = log.New(io.Discard, "", 0) // the cuts are on purpose
	// Each write goes out at once: a cut response's first half reaches the client.
	rp.FlushInterval = -1
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.Throttle.Add(-1) >= 0 {
			p.Throttled.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
			return
		}
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
		if r.Method == http.MethodPut && r.URL.Query().Has("partNumber") && p.Corrupt.Add(-1) >= 0 {
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
			r = r.WithContext(context.WithValue(r.Context(), cutKey{}, true))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handlers
	p.URL = srv.URL
	return p
}
