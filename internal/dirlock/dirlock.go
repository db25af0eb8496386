// Package dirlock gives one run exclusive use of a directory (a command's
// output directory, DST): a second run on the same directory fails at once
// with "DST … is in use by pid N" instead of deleting the first one's
// temporaries or racing it through the "another conversion" checks.
//
// Use:
//
//	l, err := dirlock.Acquire(dst, dirlock.LockName) // before the first look at dst's contents
//	if err != nil {
//		return err // errors.Is(err, dirlock.ErrInUse) when another run holds it
//	}
//	defer l.Release()
//
// The lock is an exclusive, non-blocking flock(2) on the file LockName inside
// the directory, which holds the holder's pid for the error message. The
// kernel drops it when the process exits, however it exits, so a killed run
// never leaves a lock that blocks the next one (its file is reused). Where
// flock is not available the lock is the file's exclusive creation, and a
// killed run's leftover file has to be removed by hand (the error says so).
//
// Lock files are part of no output: listings of DST (stray-file checks,
// side-file copies, cleanup) must skip LockName.
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
// (one worker's slice of DST). It fails with an error wrapping ErrInUse,
// naming the holder's pid, when another process (or another Lock in this
// one) holds it. The lock is dropped when the process dies; Release removes
// the file.
func Acquire(dir, name string) (*Lock, error) {
	p := filepath.Join(dir, name)
	f, err := lock(p)
	if err != nil {
		return nil, err
	}
	// The pid is for the message of whoever finds the lock taken.
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

// Release removes the lock file and drops the lock. It is safe to call more
// than once (later calls do nothing), so it can be deferred.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	return unlock(f, l.path)
}

// inUse builds the error for a lock held by someone else, reading the
// holder's pid from the lock file when it can.
func inUse(p string, hint string) error {
	dir := filepath.Dir(p)
	b, _ := os.ReadFile(p) // small: a pid; the file is ours by name only, read at most once
	if len(b) > 32 {
		b = b[:32]
	}
	holder := "another process"
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
		holder = "pid " + strconv.Itoa(pid)
	}
	return fmt.Errorf("DST %s is in use by %s (lock file %s%s): %w", dir, holder, p, hint, ErrInUse)
}
