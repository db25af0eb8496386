// Package fsx opens the files a command reads from its user, each checked to
// be a regular file before a byte is read: a FIFO would block for ever, a
// character device such as /dev/zero would be read until memory runs out (its
// size is 0, so size checks pass), a directory or socket holds no data.
package fsx

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

var (
	// ErrNotRegular is wrapped by every refusal of a path that is not a
	// regular file; the message says what the path is instead.
	ErrNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("file over its size limit")
)

// Open opens path for reading, refusing anything that is not a regular file
// (after following symbolic links) without blocking on it. Errors are
// *fs.PathError values.
func Open(path string) (*os.File, error) {
	f, err := openRegular(path)
	if err != nil {
		// Name what it is (a socket cannot be opened at all: ENXIO).
		if st, serr := os.Stat(path); serr == nil && !st.Mode().IsRegular() {
			return nil, notRegular(path, st.Mode())
		}
		return nil, err
	}
	return f, nil
}

// ReadFile reads a whole regular file of at most limit bytes, even one that
// grows while it is read.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, tooLarge(path, st.Size(), limit)
	}
	// Sized from Stat: a large index is read without regrowing.
	b := make([]byte, 0, st.Size()+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, tooLarge(path, int64(len(b)), limit)
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
	}
}

func tooLarge(path string, size, limit int64) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %d bytes or more, the limit is %d", errTooLarge, size, limit)}
}

func notRegular(path string, m fs.FileMode) error {
	return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: it is %s", ErrNotRegular, Kind(m))}
}

// Kind names a file type in words, for errors.
func Kind(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t == 0:
		return "a regular file"
	default:
		return "an irregular file"
	}
}

// MkdirAll is os.MkdirAll for an output directory, with an error that says
// what is in the way: a dangling link (to MkdirAll "file exists") or a file.
func MkdirAll(dir string) error {
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		return nil
	}
	fi, lerr := os.Lstat(dir)
	switch {
	case lerr != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(dir)
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("create %s: it is a symbolic link to %s, which does not exist: create the target directory or remove the link", dir, target)
		}
		return fmt.Errorf("create %s: it is a symbolic link to %s, which is not a directory: %w", dir, target, err)
	case !fi.IsDir():
		return fmt.Errorf("create %s: it is %s, not a directory: move it away or choose another DST", dir, Kind(fi.Mode()))
	}
	return err
}

// FreeSpace is the space an unprivileged writer may still use on dir's
// filesystem; false when it cannot be known (as on systems without statfs).
func FreeSpace(dir string) (int64, bool, error) { return freeSpace(dir) }
