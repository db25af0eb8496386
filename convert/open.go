package convert

import (
	"os"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// openRegular opens a file for reading through fsx.Open (a regular file, or
// an error without blocking) and returns its info for the stamp checks.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := fsx.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}
