//go:build !unix

package dirlock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// lock creates the file exclusively: its existence is the lock. Nothing
// removes it when a process dies, so the error tells the user how to clear
// a leftover.
func lock(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil, inUse(p, "; if no such run is alive, remove the lock file")
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return f, nil
}

// held: the file's existence is the lock.
func held(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func unlock(f *os.File, p string) error {
	err := f.Close()
	if rerr := os.Remove(p); err == nil {
		err = rerr
	}
	return err
}
