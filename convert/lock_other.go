//go:build !linux && !darwin

package convert

import (
	"errors"
	"os"
)

// Without flock the lock is not enforced on this platform.
var errWouldBlock = errors.New("would block")

func lockFile(*os.File, bool) error { return nil }

func unlockFile(*os.File) {}
