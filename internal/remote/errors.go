package remote

import (
	"errors"
	"fmt"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// Sentinel errors, one per class of failure, wrapped by every *Error.
var (
	// ErrNotFound: the server answered 404 (or 410) for the file.
	ErrNotFound = errors.New("not found")
	// ErrAuth: the server refused the request (401 or 403).
	ErrAuth = errors.New("access refused")
	// ErrChanged: a source file changed while a run used it: here, its size,
	// ETag or revision differs between requests. convert's and layout's
	// ErrChanged are this error, so errors.Is on any one matches them all.
	ErrChanged = errors.New("source changed during the run")
	// ErrProtocol: a response that does not answer the request (no range
	// support, a wrong Content-Range, a body of the wrong length).
	ErrProtocol = errors.New("bad response")
	// errRedirect: too many redirects, a redirect loop, or a bad Location.
	errRedirect = errors.New("bad redirect")
	// ErrStatus: an HTTP status that is neither success nor one of the above.
	ErrStatus = errors.New("unexpected HTTP status")
	// errTimeout: no response within the stall timeout, a body slower than the
	// minimum rate, or a read past its deadline.
	errTimeout = errors.New("timeout")
	// ErrNetwork: the connection failed (refused, reset, closed mid-body).
	ErrNetwork = errors.New("network error")
	// errOffline: HF_HUB_OFFLINE is set and the file is not in the local cache.
	errOffline = errors.New("offline mode (HF_HUB_OFFLINE) is enabled")
	// ErrSource: a location that cannot be parsed or resolved.
	ErrSource = errors.New("invalid remote source")
)

// Error describes one failed remote operation: which file, which host, what
// happened, and after how many attempts.
type Error struct {
	// File is the file name relative to the source ("" for the source itself).
	File string
	// Host is the host (host:port) that answered or failed.
	Host string
	// Status is the HTTP status code, 0 when there was no response.
	Status int
	// Attempts is how many requests were made before giving up (0 or 1: no retry).
	Attempts int
	// Kind is the sentinel this error wraps.
	Kind error
	// Detail says what happened, in words.
	Detail string

	cause error // the transport's own error, kept for errors.Is (syscall.ECONNREFUSED…)
}

func (e *Error) Error() string {
	s := "remote"
	if e.File != "" {
		s += " " + termtext.Name(e.File) // names come from an index: escape what a terminal would act on
	}
	s += ": " + e.Kind.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d", e.Status)
		if e.Host != "" {
			s += " from " + e.Host
		}
		s += ")"
	} else if e.Host != "" {
		s += " (" + e.Host + ")"
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", e.Attempts)
	}
	return s
}

// Unwrap returns the sentinel, so errors.Is(err, ErrNotFound) and the like
// work, and the transport's error when there was one.
func (e *Error) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Kind, e.cause}
	}
	return []error{e.Kind}
}
