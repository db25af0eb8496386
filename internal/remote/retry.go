package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RetryEvent reports one failed attempt that will be retried.
type RetryEvent struct {
	File    string
	Attempt int           // the failed attempts of this read so far
	Wait    time.Duration // before the next request
	Resume  int64         // the absolute offset the next request starts at
	Err     error
}

// retryWait follows failed attempt number attempt of a read of name, its
// fails-th failure: it returns e, its Attempts set, when e is not worth
// retrying (not transient, the retries spent, or no host ever reached), else
// waits the backoff (at least the server's Retry-After) and returns nil.
func (s *Source) retryWait(ctx context.Context, name string, e *Error, attempt, fails int, after time.Duration, resume int64) error {
	if !transient(e) || fails > s.o.Retries || unreachable(e) && !s.answered.Load() {
		e.Attempts = attempt
		return e
	}
	wait := backoff(fails, s.o.RetryBase, s.o.RetryMax, after)
	s.Retried(RetryEvent{File: name, Attempt: fails, Wait: wait, Resume: resume, Err: e})
	return sleep(ctx, wait)
}

// transient reports whether a failure may go away on its own: connection
// failures, stalls, 408, 429 and 5xx (except 501 and 505, which will not).
func transient(e *Error) bool {
	switch {
	case errors.Is(e.Kind, ErrNetwork), errors.Is(e.Kind, errTimeout):
		return true
	case errors.Is(e.Kind, ErrStatus):
		s := e.Status
		return s == http.StatusRequestTimeout || s == http.StatusTooManyRequests ||
			(s >= 500 && s != http.StatusNotImplemented && s != http.StatusHTTPVersionNotSupported)
	}
	return false
}

// unreachable reports a failure to reach a host at all (connection refused,
// unknown host name): worth retrying once the source has had an answer (a
// server restarting mid-run), not before (a wrong URL).
func unreachable(e *Error) bool {
	var dns *net.DNSError
	return errors.Is(e, syscall.ECONNREFUSED) || errors.As(e, &dns) && dns.IsNotFound
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP-date; 0 when
// absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(min(max(n, 0), 1<<31)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// backoff is the wait before retry number n (1-based): base·2^(n-1) with
// jitter in [½, 1], at least what the server asked for, never over limit.
func backoff(n int, base, limit, asked time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = d/2 + rand.N(d/2+1)
	return min(max(d, asked), limit)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// netError turns a transport or body-read failure into an *Error. A stalled
// attempt (its context cancelled with errStall) is a timeout; any other
// cancellation is returned as is.
func netError(attemptCtx context.Context, err error, file, host string, stall time.Duration, after string) error {
	c := context.Cause(attemptCtx)
	if c != nil && !errors.Is(c, errStall) {
		return c
	}
	e := &Error{File: file, Host: host, Kind: ErrNetwork, cause: err}
	var ne net.Error
	var dns *net.DNSError
	switch {
	case c == errStall:
		e.Kind, e.Detail, e.cause = errTimeout, fmt.Sprintf("no data for %v", stall), nil
	case c != nil: // too slow: the cause says how
		e.Kind, e.Detail, e.cause = errTimeout, strings.TrimPrefix(c.Error(), errStall.Error()+": "), nil
	case errors.Is(err, syscall.ECONNREFUSED):
		e.Detail = "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		e.Detail = "connection reset"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		e.Detail = "connection closed early"
	case errors.As(err, &ne) && ne.Timeout():
		e.Kind, e.Detail = errTimeout, err.Error()
	case errors.As(err, &dns):
		e.Detail = "DNS: " + dns.Error()
	default:
		e.Detail = err.Error()
	}
	e.Detail += after
	return e
}
