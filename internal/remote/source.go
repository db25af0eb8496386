package remote

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// Defaults for Options fields left zero.
const (
	// defaultRetries is how many failed attempts one read retries before it
	// fails.
	defaultRetries = 8
	// defaultRetryBase is the first backoff wait.
	defaultRetryBase = 500 * time.Millisecond
	// defaultRetryMax caps every wait, Retry-After included.
	defaultRetryMax = 30 * time.Second
	// defaultStallTimeout fails an attempt that receives nothing for this long.
	defaultStallTimeout = 60 * time.Second
	// defaultMinRate is the least body throughput of an attempt, in bytes per
	// second over every stall timeout: a 4 MiB request may take 4 minutes.
	defaultMinRate = 16 << 10
	// DefaultTimeLimit is the fixed part of a read's deadline: room for the
	// retries' backoff on top of the time its bytes take at the minimum rate.
	DefaultTimeLimit = 10 * time.Minute
	// defaultMaxRedirects bounds the redirects one request follows.
	defaultMaxRedirects = 10
)

// Options tune a Source. The zero value is ready to use.
type Options struct {
	// Client sends the requests; nil uses a client made for many parallel
	// range requests. Its redirect policy is replaced: the Source follows
	// redirects itself, to keep the token on its own origin.
	Client *http.Client
	// Retries bounds the failed attempts one read (a range request, a small
	// file) retries, whether or not they made progress: a server that sends a
	// little and then stalls on every attempt cannot hold a read for ever.
	Retries int
	// RetryBase is the first backoff wait; each retry doubles it.
	RetryBase time.Duration
	// RetryMax caps every wait, including a server's Retry-After.
	RetryMax time.Duration
	// StallTimeout fails an attempt that gets no response header for this
	// long, or fewer body bytes than MinRate asks for in any such window (a
	// transient failure: retried and resumed).
	StallTimeout time.Duration
	// MinRate is the least body throughput of an attempt, in bytes per second
	// (0: DefaultMinRate; negative: none, only a byte per StallTimeout).
	MinRate int64
	// TimeLimit bounds every read with its retries: a read of n bytes fails
	// after TimeLimit plus n bytes' time at MinRate (0: DefaultTimeLimit).
	TimeLimit time.Duration
	// MaxRedirects bounds the redirects one request follows.
	MaxRedirects int
	// Progress, if not nil, hears every byte received and every retry.
	Progress progress
	// UserAgent is sent with every request ("k3ckpt" when empty).
	UserAgent string
	// Warn, if not nil, hears once per source that a file was opened whose
	// server offers nothing to verify its content by (see File.Version).
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
	if o.Retries <= 0 {
		o.Retries = defaultRetries
	}
	if o.RetryBase <= 0 {
		o.RetryBase = defaultRetryBase
	}
	if o.RetryMax <= 0 {
		o.RetryMax = defaultRetryMax
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = defaultStallTimeout
	}
	if o.MinRate == 0 {
		o.MinRate = defaultMinRate
	}
	o.MinRate = max(o.MinRate, 0)
	if o.TimeLimit <= 0 {
		o.TimeLimit = DefaultTimeLimit
	}
	if o.MaxRedirects <= 0 {
		o.MaxRedirects = defaultMaxRedirects
	}
	if o.UserAgent == "" {
		o.UserAgent = "k3ckpt"
	}
	return o
}

// NewTransport returns a transport for parallel range requests: HTTP/1.1 only
// (so that each of a fetch's connections is its own TCP connection rather than
// a stream sharing one), no transparent compression (a gzip-encoded body
// would not match its Content-Range), and idle connections kept for conns
// parallel requests per host (0: DefaultConnections).
func NewTransport(conns int) *http.Transport {
	if conns <= 0 {
		conns = DefaultConnections
	}
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
// every body byte and HTTP request, redirects included), or a Stream's, or
// a run's streams added up (every field).
type Stats struct {
	// Needed is the bytes the ranges asked for cover.
	Needed int64
	// Requested is the bytes asked for: Needed plus the gaps merged over.
	Requested int64
	// Fetched is the body bytes received, those of failed attempts included.
	Fetched int64
	// Requests is the requests sent (for a fetch: the range requests
	// planned, retries not counted).
	Requests int64
	// Retries is the failed attempts that were retried.
	Retries int64
	// Unplanned is the bytes a stream's reader read by requests of their
	// own, outside its plan (0 when it read exactly what was planned).
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

	mu    sync.Mutex
	files map[string]*fileEntry

	commitMu sync.Mutex
	commit   string // the first X-Repo-Commit seen (hub sources)

	bytes, requests, retries atomic.Int64
	answered                 atomic.Bool // a server has responded: the location is right

	warnOnce sync.Once
}

// unverified warns, once, that a file's content cannot be verified.
func (s *Source) unverified(name string) {
	s.warnOnce.Do(func() {
		if s.o.Warn != nil {
			s.o.Warn(fmt.Sprintf("%s sends no ETag, Last-Modified or commit for %s (nor is the revision a commit): a file replaced on the server during the run with the same size cannot be detected; the output's manifest records its source as unverified",
				s.loc.Base, termtext.Name(name)))
		}
	})
}

// pinnedCommit reports whether a hub revision is a full commit hash, whose
// content cannot change.
func pinnedCommit(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	for i := 0; i < len(rev); i++ {
		if c := rev[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

type fileEntry struct {
	once sync.Once
	f    *File
	err  error
}

// NewSource prepares reads from loc. ctx bounds every request the source makes,
// including those of File.ReadAt (which has no context of its own): cancel
// it, or give it a deadline, to bound the whole operation.
func NewSource(ctx context.Context, loc location, o Options) (*Source, error) {
	if loc.Base == "" || !strings.HasSuffix(loc.Base, "/") {
		return nil, &Error{Kind: ErrSource, Detail: fmt.Sprintf("base %q is not a directory URL ending in '/'", loc.Base)}
	}
	if _, err := url.Parse(loc.Base); err != nil {
		return nil, &Error{Kind: ErrSource, Detail: err.Error()}
	}
	return &Source{loc: loc, o: o.withDefaults(), ctx: ctx, files: map[string]*fileEntry{}}, nil
}

// URL is the address of a file of the source (the name path-escaped).
func (s *Source) url(name string) string { return s.loc.Base + urlQuote(name, true) }

// Stats reports the traffic so far.
func (s *Source) Stats() Stats {
	return Stats{Fetched: s.bytes.Load(), Requests: s.requests.Load(), Retries: s.retries.Load()}
}

// repoCommit is the repository commit the hub reported (X-Repo-Commit), ""
// when none did.
func (s *Source) repoCommit() string {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.commit
}

// retry counts a failed attempt about to be retried, in the Stats and the
// Progress.
func (s *Source) retry(ev RetryEvent) {
	s.retries.Add(1)
	if s.o.Progress != nil {
		s.o.Progress.Retry(ev)
	}
}

func (s *Source) received(n int64) {
	s.bytes.Add(n)
	if s.o.Progress != nil {
		s.o.Progress.Fetched(n)
	}
}

// checkCommit fails when the hub reports a different commit for the revision
// than it did before: the branch moved during the run.
func (s *Source) checkCommit(name string, h http.Header) error {
	c := h.Get("X-Repo-Commit")
	if c == "" {
		return nil
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.commit == "" {
		s.commit = c
		return nil
	}
	if c != s.commit {
		return &Error{File: name, Kind: ErrChanged, Detail: fmt.Sprintf("revision %s moved from commit %s to %s", s.loc.Revision, s.commit, c)}
	}
	return nil
}

// do sends a GET for u with the given headers and follows redirects itself:
// at most MaxRedirects, never the same URL twice, only to http(s), and with
// the token only while the request goes to the token's origin. It returns the
// final response (its body to be closed by the caller) and the URL it came
// from.
func (s *Source) do(ctx context.Context, name, u string, hdr http.Header) (*http.Response, *url.URL, error) {
	seen := map[string]bool{}
	chain := []string{}
	for hops := 0; ; hops++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, nil, &Error{File: name, Kind: ErrSource, Detail: err.Error()}
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		req.Header.Set("User-Agent", s.o.UserAgent)
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
		next, err := req.URL.Parse(loc)
		if loc == "" || err != nil || (next.Scheme != "http" && next.Scheme != "https") {
			return nil, nil, &Error{File: name, Host: req.URL.Host, Status: resp.StatusCode, Kind: errRedirect,
				Detail: fmt.Sprintf("unusable Location %q", loc)}
		}
		u = next.String()
		if seen[u] {
			return nil, nil, &Error{File: name, Host: req.URL.Host, Status: resp.StatusCode, Kind: errRedirect,
				Detail: "redirect loop through " + strings.Join(append(chain, next.Host), " -> ")}
		}
		if hops+1 > s.o.MaxRedirects {
			return nil, nil, &Error{File: name, Host: req.URL.Host, Status: resp.StatusCode, Kind: errRedirect,
				Detail: fmt.Sprintf("more than %d redirects", s.o.MaxRedirects)}
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

// readURL reads the whole answer to a GET of u (an API call or a file of
// the source); name is what errors call it.
func (s *Source) readURL(ctx context.Context, name, u string, limit int64) ([]byte, error) {
	ctx, stop := s.bound(ctx)
	defer stop()
	ctx, cancel := s.readDeadline(ctx, name, -1, limit)
	defer cancel()
	fails := 0
	for attempt := 1; ; attempt++ {
		b, r := s.readSmallOnce(ctx, name, u, limit)
		if r == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if r.err == nil { // not retryable, already final
			return nil, r.final
		}
		fails++
		if !transient(r.err) || fails > s.o.Retries || unreachable(r.err) && !s.answered.Load() {
			r.err.Attempts = attempt
			return nil, r.err
		}
		wait := backoff(fails, s.o.RetryBase, s.o.RetryMax, r.after)
		s.retry(RetryEvent{File: name, Attempt: fails, Wait: wait, Err: r.err})
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// smallResult carries a failure: err when it is an *Error (maybe retryable),
// final for anything else.
type smallResult struct {
	retryable
	final error
}

func (s *Source) readSmallOnce(ctx context.Context, name, target string, limit int64) ([]byte, *smallResult) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pace := newPacer(s.o.StallTimeout, s.o.MinRate, cancel)
	defer pace.stop()
	resp, u, err := s.do(actx, name, target, nil)
	if err != nil {
		return nil, asResult(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e := statusError(name, resp, u.Host, s.loc.Token != "" && originOf(u) == s.loc.TokenHost)
		return nil, &smallResult{retryable: retryable{err: e, after: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}}
	}
	if resp.ContentLength > limit {
		return nil, &smallResult{final: &Error{File: name, Host: u.Host, Kind: ErrProtocol,
			Detail: fmt.Sprintf("%d bytes is over the %d-byte limit", resp.ContentLength, limit)}}
	}
	owed := limit + 1
	if resp.ContentLength >= 0 {
		owed = resp.ContentLength
	}
	pace.startBody(owed)
	body := pace.reader(io.LimitReader(resp.Body, limit+1), s.received)
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, asResult(netError(actx, err, name, u.Host, s.o.StallTimeout, ""))
	}
	if int64(len(b)) > limit {
		return nil, &smallResult{final: &Error{File: name, Host: u.Host, Kind: ErrProtocol,
			Detail: fmt.Sprintf("longer than the %d-byte limit", limit)}}
	}
	if resp.ContentLength >= 0 && int64(len(b)) != resp.ContentLength {
		return nil, &smallResult{retryable: retryable{err: &Error{File: name, Host: u.Host, Kind: ErrNetwork,
			Detail: fmt.Sprintf("body of %d bytes, Content-Length %d", len(b), resp.ContentLength)}}}
	}
	return b, nil
}

func asResult(err error) *smallResult {
	if e, ok := err.(*Error); ok {
		return &smallResult{retryable: retryable{err: e}}
	}
	return &smallResult{final: err}
}

// bound joins ctx with the source's own context: a request stops when
// either is done.
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
