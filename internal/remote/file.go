package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// probeLen is what opening a file reads and keeps: a safetensors file's
// 8-byte header length.
const probeLen = 8

// File is one remote file read with range requests. Every response must
// report the size and ETag learnt at its opening, or the read fails with
// ErrChanged. It is safe for concurrent use.
type File struct {
	// Name is the file's name relative to its source.
	Name string

	src     *Source
	origin  string
	size    int64
	etag    string
	lastMod string // Last-Modified, checked on every response when there is no ETag
	prefix  []byte
	loc     atomic.Pointer[string] // the redirect target last served from
}

// Open probes a file (one small range request) for its size and ETag, once
// per name: later calls return the same *File.
func (s *Source) Open(ctx context.Context, name string) (*File, error) {
	v, _ := s.files.LoadOrStore(name, &fileEntry{})
	e := v.(*fileEntry)
	e.once.Do(func() {
		f := &File{Name: name, src: s, origin: s.url(name), size: -1, prefix: make([]byte, probeLen)}
		n, err := f.read(ctx, f.prefix, 0, nil)
		if err != nil {
			e.err = err
			return
		}
		f.prefix, e.f = f.prefix[:n], f
		if f.Version() == "" {
			s.unverified(name)
		}
	})
	if e.err != nil {
		s.files.CompareAndDelete(name, e) // let a later call try again
	}
	return e.f, e.err
}

// Size is the file's length.
func (f *File) Size() int64 { return f.size }

// Version identifies the file's content between runs and requests: its ETag,
// else its Last-Modified date, else the commit its revision is pinned to or
// the hub reported; "" when the server offered nothing.
func (f *File) Version() string {
	switch {
	case f.etag != "":
		return f.etag
	case f.lastMod != "":
		return "last-modified " + f.lastMod
	case commitRE.MatchString(f.src.loc.Revision): // a commit's content cannot change
		return "commit " + f.src.loc.Revision
	case f.src.repoCommit() != "":
		return "commit " + f.src.repoCommit()
	}
	return ""
}

// ReadAt reads len(p) bytes at off (fewer, with io.EOF, at the end of the
// file), bounded by the source's context.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &Error{File: f.Name, Kind: ErrSource, Detail: fmt.Sprintf("negative offset %d", off)}
	}
	if off >= f.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := p
	if int64(len(p)) > f.size-off {
		want = p[:f.size-off]
	}
	if err := f.readRange(context.Background(), want, off, nil); err != nil {
		return 0, err
	}
	if len(want) < len(p) {
		return len(want), io.EOF
	}
	return len(p), nil
}

// readRange fills p with the bytes at off, which the callers have checked
// lie inside the file, retrying (see read). counter, if not nil, also counts
// the bytes received.
func (f *File) readRange(ctx context.Context, p []byte, off int64, counter *atomic.Int64) error {
	if len(p) == 0 {
		return nil
	}
	if off+int64(len(p)) <= int64(len(f.prefix)) {
		copy(p, f.prefix[off:])
		return nil
	}
	_, err := f.read(ctx, p, off, counter)
	return err
}

// read is the retry loop: transient failures are retried with backoff, each
// resuming at the first byte not yet received, within the read's bounds (see
// Options). With f.size unknown (the probe) it accepts a file shorter than p
// and returns how much there was.
func (f *File) read(ctx context.Context, p []byte, off int64, counter *atomic.Int64) (int, error) {
	s := f.src
	if s.store != nil {
		return f.readStore(ctx, p, off, counter)
	}
	ctx, stop := s.bound(ctx)
	defer stop()
	ctx, cancel := s.readDeadline(ctx, f.Name, off, int64(len(p)))
	defer cancel()
	got, fails, refreshed := 0, 0, false
	for attempt := 1; ; attempt++ {
		n, after, err := f.attempt(ctx, p[got:], off+int64(got), counter)
		got += n
		if err == nil {
			return got, nil
		}
		if ctx.Err() != nil { // not this read's error to annotate
			return got, context.Cause(ctx)
		}
		var e *Error
		if !errors.As(err, &e) {
			return got, err
		}
		if errors.Is(err, errRefused) && !refreshed { // a CDN's signed URL expired: ask the origin again
			refreshed = true
			f.loc.Store(nil)
			continue
		}
		if errors.Is(err, errRefused) {
			e = e.cause.(*Error)
		}
		fails++
		if err := s.retryWait(ctx, f.Name, e, attempt, fails, after, off+int64(got)); err != nil {
			return got, err
		}
	}
}

// errRefused is the Kind of a refusal by a cached redirect target; its
// cause is the error to report if asking the origin again does not help.
var errRefused = errors.New("redirect target refused the request")

// attempt makes one request for p at off. It returns the bytes stored (fewer
// only when the probe finds a short file), the server's Retry-After, and
// what failed.
func (f *File) attempt(ctx context.Context, p []byte, off int64, counter *atomic.Int64) (int, time.Duration, error) {
	s := f.src
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pace := newPacer(s.o.StallTimeout, s.o.MinRate, cancel)
	defer pace.t.Stop()

	end := off + int64(len(p)) - 1
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", off, end)}}
	target, cached := f.origin, false
	if l := f.loc.Load(); l != nil {
		target, cached = *l, true
	}
	resp, u, err := s.do(actx, f.Name, target, hdr)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	host := u.Host
	after := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	fail := func(kind error, format string, a ...any) (int, time.Duration, error) {
		return 0, after, &Error{File: f.Name, Host: host, Status: resp.StatusCode, Kind: kind, Detail: fmt.Sprintf(format, a...)}
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK:
		return fail(ErrProtocol, "the server ignored the Range header (it must support byte ranges)")
	case http.StatusRequestedRangeNotSatisfiable:
		_, _, total, crErr := parseContentRange(resp.Header.Get("Content-Range"))
		if f.size < 0 && off == 0 && crErr == nil && total == 0 {
			f.size, f.etag, f.lastMod = 0, resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
			return 0, 0, nil // an empty file
		}
		return fail(ErrChanged, "bytes %d-%d are no longer there; the file had %d bytes", off, end, f.size)
	default:
		e := statusError(f.Name, resp, host, s.loc.Token != "" && originOf(u) == s.loc.TokenHost)
		if cached && (e.Kind == ErrNotFound || e.Kind == ErrAuth || resp.StatusCode == http.StatusBadRequest) {
			return 0, after, &Error{File: f.Name, Host: host, Status: resp.StatusCode, Kind: errRefused, cause: e}
		}
		return 0, after, e
	}
	if u.String() != f.origin {
		us := u.String()
		f.loc.Store(&us)
	}
	cr := resp.Header.Get("Content-Range")
	start, last, total, err := parseContentRange(cr)
	if err != nil {
		return fail(ErrProtocol, "Content-Range %q: %v", cr, err)
	}
	etag := resp.Header.Get("ETag")
	if f.size < 0 { // the probe learns the size and ETag
		if start != off || last > end || (last < end && total != last+1) {
			return fail(ErrProtocol, "Content-Range %q does not answer bytes=%d-%d", cr, off, end)
		}
		f.size, f.etag, f.lastMod = total, etag, resp.Header.Get("Last-Modified")
	} else {
		if total != f.size {
			return fail(ErrChanged, "its size was %d bytes, now Content-Range %q says %d", f.size, cr, total)
		}
		if etag != f.etag {
			return fail(ErrChanged, "its ETag was %s, now %s", showETag(f.etag), showETag(etag))
		}
		if lm := resp.Header.Get("Last-Modified"); f.etag == "" && lm != f.lastMod {
			return fail(ErrChanged, "its Last-Modified was %s, now %s", showETag(f.lastMod), showETag(lm))
		}
		if start != off || last != end {
			return fail(ErrProtocol, "Content-Range %q does not answer bytes=%d-%d", cr, off, end)
		}
	}
	want := last - start + 1
	if resp.ContentLength >= 0 && resp.ContentLength != want {
		return fail(ErrProtocol, "Content-Length %d for Content-Range %q", resp.ContentLength, cr)
	}
	body := pace.startBody(want, resp.Body, s.received(counter))
	n, err := io.ReadFull(body, p[:want])
	if err != nil {
		return n, after, netError(actx, err, f.Name, host, s.o.StallTimeout,
			fmt.Sprintf(" after %d of %d bytes at offset %d", n, want, off))
	}
	var extra [1]byte
	if m, _ := body.Read(extra[:]); m > 0 {
		return fail(ErrProtocol, "the body is longer than Content-Range %q", cr)
	}
	return n, 0, nil
}

// parseContentRange reads "bytes first-last/total", or "bytes */total" with
// last -1.
func parseContentRange(s string) (start, last, total int64, err error) {
	bad := errors.New(`not "bytes first-last/total" with first <= last < total`)
	rest, ok := strings.CutPrefix(s, "bytes ")
	rng, tot, hasTotal := strings.Cut(rest, "/")
	if total, err = strconv.ParseInt(tot, 10, 64); !ok || !hasTotal || err != nil || total < 0 {
		return 0, 0, 0, bad
	}
	if rng == "*" {
		return 0, -1, total, nil
	}
	a, b, ok := strings.Cut(rng, "-")
	start, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || start < 0 || last < start || total <= last {
		return 0, 0, 0, bad
	}
	return start, last, total, nil
}

func showETag(e string) string {
	if e == "" {
		return "(none)"
	}
	// ETags are quoted strings: print them as sent unless the rest needs escaping.
	if bare := strings.ReplaceAll(e, `"`, ""); termtext.Name(bare) == bare {
		return e
	}
	return termtext.Name(e)
}
