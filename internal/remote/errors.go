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
	// ErrChanged: a source file's size, ETag or revision changed during a run.
	ErrChanged = errors.New("source changed during the run")
	// ErrProtocol: a response that does not answer the request (no range
	// support, a wrong Content-Range, a body of the wrong length).
	ErrProtocol = errors.New("bad response")
	errRedirect = errors.New("bad redirect")
	// ErrStatus: an HTTP status that is neither success nor one of the above.
	ErrStatus = errors.New("unexpected HTTP status")
	// errTimeout: a stall, a body under the minimum rate, a read past its deadline.
	errTimeout = errors.New("timeout")
	// ErrNetwork: the connection failed (refused, reset, closed mid-body).
	ErrNetwork = errors.New("network error")
	errOffline = errors.New("offline mode (HF_HUB_OFFLINE) is enabled")
	// ErrSource: a location that cannot be parsed or resolved.
	ErrSource = errors.New("invalid remote source")
)

// Error describes one failed remote operation: which file, which host, what
// happened, and after how many attempts.
type Error struct {
	File     string // relative to the source ("" for the source itself)
	Host     string // host:port that answered or failed
	Status   int    // HTTP status, 0 when there was no response
	Attempts int    // requests made before giving up (0 or 1: no retry)
	Kind     error  // the sentinel this error wraps
	Detail   string // what happened, in words

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
	switch {
	case e.Status != 0 && e.Host != "":
		s += fmt.Sprintf(" (HTTP %d from %s)", e.Status, e.Host)
	case e.Status != 0:
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	case e.Host != "":
		s += " (" + e.Host + ")"
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts", e.Attempts)
	}
	return s
}

// Unwrap returns the sentinel and the transport's error, if any.
func (e *Error) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Kind, e.cause}
	}
	return []error{e.Kind}
}
