//go:build !linux

package filewrite

import (
	"errors"
	"os"
)

var errInvalid = errors.New("direct I/O not supported")

// setDirect reports that direct writes are not available: every write goes
// through the page cache.
func setDirect(*os.File, bool) error { return errInvalid }
