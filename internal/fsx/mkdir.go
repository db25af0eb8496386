package fsx

import (
	"fmt"
	"io/fs"
	"os"
)

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
