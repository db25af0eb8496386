//go:build unix

package dirlock

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lock opens and flocks p. A run that released (and removed) the file
// between the open and the flock leaves an unlinked file locked: retry.
func lock(p string) (*os.File, error) {
	for range 16 {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", p, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return nil, fmt.Errorf("lock %s: not a regular file", p)
		}
		unix.SetNonblock(fd, false)
		f := os.NewFile(uintptr(fd), p)
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, inUse(p, "")
			}
			return nil, fmt.Errorf("lock %s: %w", p, err)
		}
		fi, err1 := f.Stat()
		pi, err2 := os.Lstat(p)
		if err1 == nil && err2 == nil && os.SameFile(fi, pi) {
			return f, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("lock %s: the lock file keeps being replaced", p)
}

// held probes p with a shared lock: refused while an exclusive one is held.
func held(p string) bool {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd) // closing drops the probe's lock
	for {
		err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return errors.Is(err, unix.EWOULDBLOCK)
		}
	}
}

// unlock removes the file while still holding the lock (lock checks that the
// path still names what it locked), then closes it, which drops the lock.
func unlock(f *os.File, p string) error {
	err := os.Remove(p)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
