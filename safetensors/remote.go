package safetensors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// RemoteTimeout bounds each HTTP request of a remote checkpoint.
const RemoteTimeout = 60 * time.Second

// RemoteOpenTimeout bounds the whole opening of a remote checkpoint (index,
// every header, side-file probes) when the caller's context sets no deadline.
const RemoteOpenTimeout = 5 * time.Minute

// maxRedirects is how many redirects a request follows before the chain
// counts as a loop (net/http's default).
const maxRedirects = 10

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
	return newHTTPReaderAt(context.Background(), client, u, fetched)
}

func newHTTPReaderAt(ctx context.Context, client *http.Client, u string, fetched *atomic.Int64) (*HTTPReaderAt, error) {
	if fetched == nil {
		fetched = new(atomic.Int64)
	}
	r := &HTTPReaderAt{client: client, url: u, fetched: fetched, size: -1}
	var b [8]byte
	_, total, err := r.get(ctx, b[:], 0)
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
	n, _, err := r.get(context.Background(), want, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// get issues one range request for len(p) bytes at off and returns the bytes
// read and the total size from Content-Range.
func (r *HTTPReaderAt) get(ctx context.Context, p []byte, off int64) (int, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, RemoteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s: %w", ErrRemote, r.url, err)
	}
	end := off + int64(len(p)) - 1 // the server may hold fewer bytes: Content-Range says
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end))
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, 0, remoteError(r.url, err)
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
	default:
		return 0, 0, statusError(r.url, resp)
	}
	start, last, total, err := parseContentRange(resp.Header.Get("Content-Range"))
	if err != nil || start != off || last > end {
		return 0, 0, fmt.Errorf("%w: %s: bad Content-Range %q for bytes %d-%d", ErrRemote, r.url, resp.Header.Get("Content-Range"), off, end)
	}
	n, err := io.ReadFull(resp.Body, p[:last-start+1])
	r.fetched.Add(int64(n))
	if err != nil {
		return n, total, remoteError(r.url, err)
	}
	return n, total, nil
}

// errRedirectLoop marks a redirect chain that revisits a URL or runs past
// maxRedirects.
var errRedirectLoop = errors.New("redirect loop")

func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("%w: more than %d redirects", errRedirectLoop, maxRedirects)
	}
	for _, v := range via {
		if v.URL.String() == req.URL.String() {
			return fmt.Errorf("%w: %s redirects back to itself", errRedirectLoop, req.URL)
		}
	}
	return nil
}

// statusError says which status which host answered; a 404 or 410 also
// wraps ErrNotFound.
func statusError(u string, resp *http.Response) error {
	host := resp.Request.URL.Host
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone {
		return fmt.Errorf("%w: %s: HTTP %s from %s: %w", ErrRemote, u, resp.Status, host, ErrNotFound)
	}
	return fmt.Errorf("%w: %s: HTTP %s from %s", ErrRemote, u, resp.Status, host)
}

// remoteError names what went wrong with a request: refused connection,
// unknown host, timeout, cancellation, redirect loop, or the transport's own
// words. The cause stays wrapped (errors.Is works on context.DeadlineExceeded,
// syscall.ECONNREFUSED and the like).
func remoteError(u string, err error) error {
	what := ""
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(err, errRedirectLoop):
		what = "redirect loop"
	case errors.Is(err, syscall.ECONNREFUSED):
		what = "connection refused"
	case errors.As(err, &dns):
		what = "cannot resolve host " + dns.Name
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		what = "timed out"
		if !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
	case errors.Is(err, context.Canceled):
		what = "canceled"
	default:
		return fmt.Errorf("%w: %s: %w", ErrRemote, u, err)
	}
	return fmt.Errorf("%w: %s: %s: %w", ErrRemote, u, what, err)
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

func (h *httpSource) open(ctx context.Context, name string) (io.ReaderAt, int64, io.Closer, error) {
	r, err := newHTTPReaderAt(ctx, h.client, h.resolve(name), &h.fetched)
	if err != nil {
		return nil, 0, nil, err
	}
	return r, r.Size(), nil, nil
}

// readAux fetches a whole side file or index, never buffering more than
// limit bytes whatever the server announces or streams.
func (h *httpSource) readAux(ctx context.Context, name string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, RemoteTimeout)
	defer cancel()
	u := h.resolve(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRemote, u, err)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, remoteError(u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(u, resp)
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("%w: %s: %d bytes is over the %d-byte limit", ErrRemote, u, resp.ContentLength, limit)
	}
	var buf bytes.Buffer
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength)) // bounded by limit, checked above
	}
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, limit+1))
	h.fetched.Add(n)
	if err != nil {
		return nil, remoteError(u, err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: %s: body over the %d-byte limit", ErrRemote, u, limit)
	}
	return buf.Bytes(), nil
}

// exists asks whether name is there: false only on 404 or 410; any other
// failure is an error that says what happened.
func (h *httpSource) exists(ctx context.Context, name string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, RemoteTimeout)
	defer cancel()
	u := h.resolve(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrRemote, u, err)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return false, remoteError(u, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound, http.StatusGone:
		return false, nil
	}
	return false, statusError(u, resp)
}

// list cannot enumerate a web server's directory; remote checkpoints need an
// index (or a direct file URL).
func (h *httpSource) list() ([]string, error) {
	return nil, fmt.Errorf("%w: a remote directory cannot be listed; it needs %s", ErrNotFound, IndexName)
}

// DefaultHTTPClient is used for remote checkpoints. It reports a redirect
// loop as such (see remoteError).
var DefaultHTTPClient = &http.Client{Timeout: RemoteTimeout, CheckRedirect: checkRedirect}

// openRemote finds the shards of a URL (a directory with an index or a
// model.safetensors, an index, or a file); the caller bounds ctx.
func openRemote(ctx context.Context, raw string) (*Shards, error) {
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
	switch {
	case name == "":
		hasIndex, xerr := src.exists(ctx, IndexName)
		if xerr != nil {
			return nil, fmt.Errorf("open %s: %w", raw, xerr)
		}
		if hasIndex {
			return shardsWith(ctx, src, base.String(), IndexName)
		}
		single, xerr := src.exists(ctx, "model.safetensors")
		if xerr != nil {
			return nil, fmt.Errorf("open %s: %w", raw, xerr)
		}
		if !single {
			return nil, fmt.Errorf("open %s: %w: neither %s nor model.safetensors", raw, ErrNotFound, IndexName)
		}
		return shardsSingle(src, base.String(), "model.safetensors"), nil
	case strings.HasSuffix(name, ".json"):
		return shardsWith(ctx, src, base.String(), name)
	default:
		return shardsSingle(src, base.String(), name), nil
	}
}

// BytesFetched reports how many bytes a remote checkpoint has downloaded so far
// (0 for local ones).
func (c *Checkpoint) BytesFetched() int64 {
	if h, ok := c.src.(*httpSource); ok {
		return h.fetched.Load()
	}
	return 0
}
