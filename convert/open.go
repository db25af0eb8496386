package convert

import (
	"fmt"
	"os"
)

// openRegular opens a file for reading and refuses anything but a regular
// file (a FIFO would block, a device would be read without end).
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, openFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	return f, fi, nil
}
