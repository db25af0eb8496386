package remote

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// Defaults for Options fields left zero (see Options).
const (
	defaultRetries      = 8
	defaultRetryBase    = 500 * time.Millisecond
	defaultRetryMax     = 30 * time.Second
	defaultStallTimeout = 60 * time.Second
	// defaultMinRate: a 4 MiB request may take 4 minutes.
	defaultMinRate = 16 << 10
	// DefaultTimeLimit is the fixed part of a read's deadline: room for the
	// retries' backoff on top of the time its bytes take at the minimum rate.
	DefaultTimeLimit = 10 * time.Minute
	// maxRedirects bounds the redirects one request follows.
	maxRedirects = 10
)

// Options tune a Source. The zero value is ready to use.
type Options struct {
	// Client sends the requests (nil: one made by NewTransport). The Source
	// follows redirects itself, to keep the token on its own origin.
	Client *http.Client
	// Retries bounds the failed attempts one read retries, whether or not
	// they made progress.
	Retries int
	// RetryBase is the first backoff wait, doubled by each retry; RetryMax
	// caps every wait, including a server's Retry-After.
	RetryBase, RetryMax time.Duration
	// StallTimeout fails an attempt (retried and resumed) that gets no
	// response header for this long, or fewer body bytes than MinRate asks
	// for in any such window.
	StallTimeout time.Duration
	// MinRate is the least body throughput of an attempt, in bytes per second
	// (0: defaultMinRate; negative: none, only a byte per StallTimeout).
	MinRate int64
	// TimeLimit bounds every read with its retries: a read of n bytes fails
	// after TimeLimit plus n bytes' time at MinRate.
	TimeLimit time.Duration
	// Progress, if not nil, hears every body byte received and every failed
	// attempt about to be retried, from many goroutines at once: its methods
	// must be cheap (count, do not print).
	Progress interface {
		Fetched(n int64)
		Retry(ev RetryEvent)
	}
	// Warn, if not nil, hears once per source that a file's server offers
	// nothing to verify its content by (see File.Version).
	Warn func(msg string)
}

func (o Options) withDefaults() Options {
	if o.Client == nil {
		o.Client = &http.Client{Transport: NewTransport(0)}
	}
	c := *o.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Timeout = 0 // attempts are bounded by the stall timer and the caller's context
	o.Client = &c
	o.Retries = cmp.Or(max(o.Retries, 0), defaultRetries)
	o.RetryBase = cmp.Or(max(o.RetryBase, 0), defaultRetryBase)
	o.RetryMax = cmp.Or(max(o.RetryMax, 0), defaultRetryMax)
	o.StallTimeout = cmp.Or(max(o.StallTimeout, 0), defaultStallTimeout)
	o.MinRate = max(cmp.Or(o.MinRate, defaultMinRate), 0)
	o.TimeLimit = cmp.Or(max(o.TimeLimit, 0), DefaultTimeLimit)
	return o
}

// NewTransport returns a transport for conns parallel range requests per
// host (0: DefaultConnections): HTTP/1.1 only (a TCP connection each, not
// streams sharing one), no transparent compression (a gzip-encoded body
// would not match its Content-Range).
func NewTransport(conns int) *http.Transport {
	conns = cmp.Or(max(conns, 0), DefaultConnections)
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		DisableCompression:    true,
		MaxIdleConns:          4 * conns,
		MaxIdleConnsPerHost:   2 * conns,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Stats counts network traffic: a Source's (Fetched, Requests, Retries:
// redirects included), a Stream's, or a run's streams added up.
type Stats struct {
	// Needed is the bytes the ranges cover; Requested adds the gaps merged
	// over; Fetched is the body bytes received, failed attempts' included.
	Needed, Requested, Fetched int64
	// Requests is the requests sent (for a fetch: the range requests
	// planned, retries not counted); Retries the failed attempts retried.
	Requests, Retries int64
	// Unplanned is the bytes a stream's reader read outside its plan.
	Unplanned int64
}

// Add is the sum of two counts.
func (s Stats) Add(o Stats) Stats {
	return Stats{Needed: s.Needed + o.Needed, Requested: s.Requested + o.Requested, Fetched: s.Fetched + o.Fetched,
		Requests: s.Requests + o.Requests, Retries: s.Retries + o.Retries, Unplanned: s.Unplanned + o.Unplanned}
}

// Source is one resolved remote location. It is safe for concurrent use.
type Source struct {
	loc   location
	o     Options
	ctx   context.Context
	store store // nil: plain HTTP (see NewStoreSource)

	files sync.Map // name → *fileEntry

	commit atomic.Pointer[string] // the first X-Repo-Commit seen (hub sources)

	bytes, requests, retries atomic.Int64
	answered                 atomic.Bool // a server has responded: the location is right
	warnOnce                 sync.Once
}

func (s *Source) unverified(name string) {
	s.warnOnce.Do(func() {
		if s.o.Warn != nil {
			s.o.Warn(fmt.Sprintf("%s sends no ETag, Last-Modified or commit for %s (nor is the revision a commit): a file replaced on the server during the run with the same size cannot be detected; the output's manifest records its source as unverified",
				s.loc.Base, termtext.Name(name)))
		}
	})
}

type fileEntry struct {
	once sync.Once
	f    *File
	err  error
}

// NewSource prepares reads from loc. ctx bounds every request the source
// makes, including those of File.ReadAt (which has no context of its own).
func NewSource(ctx context.Context, loc location, o Options) (*Source, error) {
	if loc.Base == "" || !strings.HasSuffix(loc.Base, "/") {
		return nil, &Error{Kind: ErrSource, Detail: fmt.Sprintf("base %q is not a directory URL ending in '/'", loc.Base)}
	}
	if _, err := url.Parse(loc.Base); err != nil {
		return nil, &Error{Kind: ErrSource, Detail: err.Error()}
	}
	return &Source{loc: loc, o: o.withDefaults(), ctx: ctx}, nil
}

// url is the address of a file of the source (the name path-escaped).
func (s *Source) url(name string) string { return s.loc.Base + urlQuote(name, true) }

// Stats reports the traffic so far.
func (s *Source) Stats() Stats {
	return Stats{Fetched: s.bytes.Load(), Requests: s.requests.Load(), Retries: s.retries.Load()}
}

// repoCommit is the first X-Repo-Commit the hub reported ("": none).
func (s *Source) repoCommit() string {
	if c := s.commit.Load(); c != nil {
		return *c
	}
	return ""
}

// Retried counts a failed attempt about to be retried (by the Source, or by
// a store's own retries), in the source's Stats and its Progress.
func (s *Source) Retried(ev RetryEvent) {
	s.retries.Add(1)
	if s.o.Progress != nil {
		s.o.Progress.Retry(ev)
	}
}

// received counts body bytes in the Stats, the Progress and counter (if
// not nil).
func (s *Source) received(counter *atomic.Int64) func(int64) {
	return func(n int64) {
		s.bytes.Add(n)
		if s.o.Progress != nil {
			s.o.Progress.Fetched(n)
		}
		if counter != nil {
			counter.Add(n)
		}
	}
}

// checkCommit fails when the hub reports another commit for the revision
// than before: the branch moved during the run.
func (s *Source) checkCommit(name string, h http.Header) error {
	c := h.Get("X-Repo-Commit")
	if c == "" {
		return nil
	}
	if s.commit.CompareAndSwap(nil, &c) {
		return nil
	}
	if first := *s.commit.Load(); c != first {
		return &Error{File: name, Kind: ErrChanged, Detail: fmt.Sprintf("revision %s moved from commit %s to %s", s.loc.Revision, first, c)}
	}
	return nil
}

// do sends a GET for u and follows redirects itself: at most maxRedirects,
// never the same URL twice, only to http(s), with the token only to the
// token's origin. It returns the final response and the URL it came from.
func (s *Source) do(ctx context.Context, name, u string, hdr http.Header) (*http.Response, *url.URL, error) {
	seen := map[string]bool{}
	chain := []string{}
	for hops := 0; ; hops++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, nil, &Error{File: name, Kind: ErrSource, Detail: err.Error()}
		}
		maps.Copy(req.Header, hdr)
		req.Header.Set("User-Agent", "k3ckpt")
		req.Header.Set("Accept-Encoding", "identity")
		if s.loc.Token != "" && originOf(req.URL) == s.loc.TokenHost {
			req.Header.Set("Authorization", "Bearer "+s.loc.Token)
		}
		seen[u] = true
		chain = append(chain, req.URL.Host)
		s.requests.Add(1)
		resp, err := s.o.Client.Do(req)
		if err != nil {
			return nil, nil, netError(ctx, err, name, req.URL.Host, s.o.StallTimeout, "")
		}
		s.answered.Store(true)
		if err := s.checkCommit(name, resp.Header); err != nil {
			resp.Body.Close()
			return nil, nil, err
		}
		switch resp.StatusCode {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
			http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		default:
			return resp, req.URL, nil
		}
		loc := resp.Header.Get("Location")
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		bad := func(detail string) (*http.Response, *url.URL, error) {
			return nil, nil, &Error{File: name, Host: req.URL.Host, Status: resp.StatusCode, Kind: errRedirect, Detail: detail}
		}
		next, err := req.URL.Parse(loc)
		if loc == "" || err != nil || (next.Scheme != "http" && next.Scheme != "https") {
			return bad(fmt.Sprintf("unusable Location %q", loc))
		}
		u = next.String()
		if seen[u] {
			return bad("redirect loop through " + strings.Join(append(chain, next.Host), " -> "))
		}
		if hops+1 > maxRedirects {
			return bad(fmt.Sprintf("more than %d redirects", maxRedirects))
		}
	}
}

// statusError describes a final response that is not the one wanted.
func statusError(name string, resp *http.Response, host string, token bool) *Error {
	e := &Error{File: name, Host: host, Status: resp.StatusCode}
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusGone:
		e.Kind = ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		e.Kind = ErrAuth
		if !token {
			e.Detail = "no token was sent (set HF_TOKEN or log in with huggingface_hub)"
		} else {
			e.Detail = "the token was refused"
		}
	default:
		e.Kind = ErrStatus
		e.Detail = termtext.Name(resp.Status)
	}
	return e
}

// ReadSmall reads a whole small file (an index, config.json) of at most limit
// bytes, retrying transient failures. A missing file is ErrNotFound.
func (s *Source) ReadSmall(ctx context.Context, name string, limit int64) ([]byte, error) {
	if s.store != nil {
		ctx, stop := s.bound(ctx)
		defer stop()
		return s.store.ReadAll(ctx, name, limit)
	}
	return s.readURL(ctx, name, s.url(name), limit)
}

// readURL reads the whole answer to a GET of u (an API call or a file);
// name is what errors call it.
func (s *Source) readURL(ctx context.Context, name, u string, limit int64) ([]byte, error) {
	ctx, stop := s.bound(ctx)
	defer stop()
	ctx, cancel := s.readDeadline(ctx, name, -1, limit)
	defer cancel()
	fails := 0
	for attempt := 1; ; attempt++ {
		b, after, err := s.readSmallOnce(ctx, name, u, limit)
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		// Anything but an *Error, and a file over the limit, is final.
		e, ok := err.(*Error)
		if !ok || e.Kind == ErrProtocol {
			return nil, err
		}
		fails++
		if err := s.retryWait(ctx, name, e, attempt, fails, after, 0); err != nil {
			return nil, err
		}
	}
}

// readSmallOnce is one attempt of readURL; it returns the server's
// Retry-After with a failure.
func (s *Source) readSmallOnce(ctx context.Context, name, target string, limit int64) ([]byte, time.Duration, error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pace := newPacer(s.o.StallTimeout, s.o.MinRate, cancel)
	defer pace.t.Stop()
	resp, u, err := s.do(actx, name, target, nil)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e := statusError(name, resp, u.Host, s.loc.Token != "" && originOf(u) == s.loc.TokenHost)
		return nil, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), e
	}
	if resp.ContentLength > limit {
		return nil, 0, &Error{File: name, Host: u.Host, Kind: ErrProtocol,
			Detail: fmt.Sprintf("%d bytes is over the %d-byte limit", resp.ContentLength, limit)}
	}
	owed := limit + 1
	if resp.ContentLength >= 0 {
		owed = resp.ContentLength
	}
	body := pace.startBody(owed, io.LimitReader(resp.Body, limit+1), s.received(nil))
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, 0, netError(actx, err, name, u.Host, s.o.StallTimeout, "")
	}
	if int64(len(b)) > limit {
		return nil, 0, &Error{File: name, Host: u.Host, Kind: ErrProtocol,
			Detail: fmt.Sprintf("longer than the %d-byte limit", limit)}
	}
	if resp.ContentLength >= 0 && int64(len(b)) != resp.ContentLength {
		return nil, 0, &Error{File: name, Host: u.Host, Kind: ErrNetwork,
			Detail: fmt.Sprintf("body of %d bytes, Content-Length %d", len(b), resp.ContentLength)}
	}
	return b, 0, nil
}

// bound joins ctx with the source's own context.
func (s *Source) bound(ctx context.Context) (context.Context, func()) {
	if ctx == nil {
		ctx = context.Background()
	}
	if s.ctx == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	return ctx, func() { stop(); cancel(nil) }
}
