// Package dirlock gives one run exclusive use of a directory (a command's
// output directory, DST): a second run on it fails at once with "DST … is in
// use by pid N" instead of deleting the first one's temporaries.
//
//	l, err := dirlock.Acquire(dst, dirlock.LockName) // before the first look at dst's contents
//	if err != nil {
//		return err // errors.Is(err, dirlock.ErrInUse) when another run holds it
//	}
//	defer l.Release()
//
// The lock is an exclusive, non-blocking flock(2) on the file LockName in the
// directory, which holds the holder's pid for the message. The kernel drops
// it when the process exits, however it exits, so a killed run never blocks
// the next. Where flock is not available the lock is the file's exclusive
// creation, and a killed run's leftover has to be removed by hand (the error
// says so). Listings of DST (stray-file checks, copies, cleanup) must skip
// LockName.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockName is the name of the lock file inside the locked directory.
const LockName = ".k3ckpt.lock"

// ErrInUse is wrapped by Acquire's error when another process holds the lock.
var ErrInUse = errors.New("directory is locked by another k3ckpt run")

// Lock is a held lock on a directory; Release gives it up.
type Lock struct {
	f    *os.File
	path string
}

// Acquire takes the lock file name in dir (which must exist) without
// waiting: LockName locks the whole directory, another name a part of it
// (one worker's slice of DST). It fails wrapping ErrInUse, naming the
// holder's pid, when another process (or another Lock in this one) holds it.
func Acquire(dir, name string) (*Lock, error) {
	p := filepath.Join(dir, name)
	f, err := lock(p)
	if err != nil {
		return nil, err
	}
	if err = f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		unlock(f, p)
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return &Lock{f: f, path: p}, nil
}

// Held reports whether a live process holds the lock file at p (false when
// there is no such file).
func Held(p string) bool { return held(p) }

// Release removes the lock file and drops the lock; later calls do nothing.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	return unlock(f, l.path)
}

// inUse is the error for a lock held by someone else, naming the pid the
// lock file holds when it can.
func inUse(p string, hint string) error {
	dir := filepath.Dir(p)
	b, _ := os.ReadFile(p) // a pid
	holder := "another process"
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:min(len(b), 32)]))); err == nil && pid > 0 {
		holder = "pid " + strconv.Itoa(pid)
	}
	return fmt.Errorf("DST %s is in use by %s (lock file %s%s): %w", dir, holder, p, hint, ErrInUse)
}
