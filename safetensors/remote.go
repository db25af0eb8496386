package safetensors

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// RemoteTimeout bounds each HTTP request of a remote checkpoint.
const RemoteTimeout = 60 * time.Second

// HTTPReaderAt reads a remote file with HTTP range requests, so headers (and
// any tensor) can be read without downloading the file.
type HTTPReaderAt struct {
	client  *http.Client
	url     string
	size    int64
	fetched *atomic.Int64
}

// NewHTTPReaderAt probes url with a range request for its first 8 bytes (the
// header length) to learn the size and to make sure the server honours ranges.
func NewHTTPReaderAt(client *http.Client, u string, fetched *atomic.Int64) (*HTTPReaderAt, error) {
	if fetched == nil {
		fetched = new(atomic.Int64)
	}
	r := &HTTPReaderAt{client: client, url: u, fetched: fetched, size: -1}
	var b [8]byte
	_, total, err := r.get(b[:], 0)
	if err != nil {
		return nil, err
	}
	r.size = total
	return r, nil
}

// Size is the remote file's length.
func (r *HTTPReaderAt) Size() int64 { return r.size }

// ReadAt fetches exactly the bytes [off, off+len(p)).
func (r *HTTPReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := p
	if off+int64(len(p)) > r.size {
		want = p[:r.size-off]
	}
	n, _, err := r.get(want, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// get issues one range request for len(p) bytes at off and returns the bytes
// read and the total size from Content-Range.
func (r *HTTPReaderAt) get(p []byte, off int64) (int, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), RemoteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return 0, 0, err
	}
	end := off + int64(len(p)) - 1 // the server may hold fewer bytes: Content-Range says
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end))
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrRemote, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK:
		return 0, 0, fmt.Errorf("%w: %s: server ignored the Range header (no range support)", ErrRemote, r.url)
	case http.StatusRequestedRangeNotSatisfiable:
		if r.size < 0 { // an empty file
			return 0, 0, nil
		}
		return 0, 0, fmt.Errorf("%w: %s: range %d-%d not satisfiable", ErrRemote, r.url, off, end)
	case http.StatusNotFound:
		return 0, 0, fmt.Errorf("%w: %s: %w", ErrRemote, r.url, ErrNotFound)
	default:
		return 0, 0, fmt.Errorf("%w: %s: HTTP %s", ErrRemote, r.url, resp.Status)
	}
	start, last, total, err := parseContentRange(resp.Header.Get("Content-Range"))
	if err != nil || start != off || last > end {
		return 0, 0, fmt.Errorf("%w: %s: bad Content-Range %q for bytes %d-%d", ErrRemote, r.url, resp.Header.Get("Content-Range"), off, end)
	}
	n, err := io.ReadFull(resp.Body, p[:last-start+1])
	r.fetched.Add(int64(n))
	if err != nil {
		return n, total, fmt.Errorf("%w: %s: %v", ErrRemote, r.url, err)
	}
	return n, total, nil
}

func parseContentRange(s string) (start, last, total int64, err error) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, 0, fmt.Errorf("no bytes unit")
	}
	rng, tot, ok := strings.Cut(rest, "/")
	a, b, ok2 := strings.Cut(rng, "-")
	if !ok || !ok2 {
		return 0, 0, 0, fmt.Errorf("malformed")
	}
	if start, err = strconv.ParseInt(a, 10, 64); err != nil {
		return
	}
	if last, err = strconv.ParseInt(b, 10, 64); err != nil {
		return
	}
	if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
		return
	}
	if start < 0 || last < start || total <= last {
		err = fmt.Errorf("inconsistent")
	}
	return
}

// httpSource serves a checkpoint whose root is a URL ending in '/'.
type httpSource struct {
	client  *http.Client
	base    *url.URL
	fetched atomic.Int64
}

func (h *httpSource) resolve(name string) string {
	ref := &url.URL{Path: name}
	return h.base.ResolveReference(ref).String()
}

func (h *httpSource) open(name string) (io.ReaderAt, int64, io.Closer, error) {
	r, err := NewHTTPReaderAt(h.client, h.resolve(name), &h.fetched)
	if err != nil {
		return nil, 0, nil, err
	}
	return r, r.Size(), nil, nil
}

func (h *httpSource) readAux(name string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), RemoteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.resolve(name), nil)
	if err != nil {
		return nil, err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRemote, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, ErrNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: HTTP %s", ErrRemote, resp.Status)
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("%w: %d bytes is over the %d-byte limit", ErrRemote, resp.ContentLength, limit)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	h.fetched.Add(int64(len(b)))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRemote, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: over the %d-byte limit", ErrRemote, limit)
	}
	return b, nil
}

func (h *httpSource) exists(name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), RemoteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, h.resolve(name), nil)
	if err != nil {
		return false
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// list cannot enumerate a web server's directory; remote checkpoints need an
// index (or a direct file URL).
func (h *httpSource) list() ([]string, error) {
	return nil, fmt.Errorf("%w: a remote directory cannot be listed; it needs %s", ErrNotFound, IndexName)
}

// DefaultHTTPClient is used for remote checkpoints.
var DefaultHTTPClient = &http.Client{Timeout: RemoteTimeout}

func openRemote(raw string) (*Checkpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w: %v", raw, ErrRemote, err)
	}
	base := *u
	name := ""
	if !strings.HasSuffix(u.Path, "/") {
		i := strings.LastIndex(u.Path, "/")
		name = u.Path[i+1:]
		base.Path = u.Path[:i+1]
	}
	src := &httpSource{client: DefaultHTTPClient, base: &base}
	var c *Checkpoint
	switch {
	case name == "" || strings.HasSuffix(name, ".json"):
		if name == "" && !src.exists(IndexName) {
			if !src.exists("model.safetensors") {
				return nil, fmt.Errorf("open %s: %w: neither %s nor model.safetensors", raw, ErrNotFound, IndexName)
			}
			c, err = openSingle(src, base.String(), "model.safetensors")
		} else {
			c, err = openWith(src, base.String(), name)
		}
	default:
		c, err = openSingle(src, base.String(), name)
	}
	if err != nil {
		return nil, err
	}
	c.HeaderBytesRead = src.fetched.Load()
	return c, nil
}

// BytesFetched reports how many bytes a remote checkpoint has downloaded so far
// (0 for local ones).
func (c *Checkpoint) BytesFetched() int64 {
	if h, ok := c.src.(*httpSource); ok {
		return h.fetched.Load()
	}
	return 0
}
