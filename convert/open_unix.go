//go:build unix

package convert

import (
	"os"
	"syscall"
)

// openFlags open without blocking, so a FIFO put where a file was planned
// fails the regular-file check instead of hanging in open.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK
