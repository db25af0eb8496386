package layout

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// openRegular opens path for reading after checking, without blocking, that
// it is a regular file: a FIFO would block open forever and a device would
// be read without end.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%w: %s is a %s", ErrNotRegular, path, st.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fst, err := f.Stat()
	if err == nil && !os.SameFile(st, fst) {
		err = fmt.Errorf("%w: %s changed while being opened", ErrNotRegular, path)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fst, nil
}

// readRegular reads a regular file of at most limit bytes whole.
func readRegular(path string, limit int64) ([]byte, error) {
	f, st, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes (limit %d)", path, st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", path, limit)
	}
	return b, nil
}

// within reports whether path, with every link resolved, lies inside root
// (itself resolved).
func within(root, path string) (bool, error) {
	r, err := filepath.EvalSymlinks(root)
	if err != nil {
		return false, err
	}
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false, err
	}
	rel, err := filepath.Rel(r, p)
	if err != nil {
		return false, nil
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)), nil
}
