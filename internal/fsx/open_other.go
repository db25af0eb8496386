//go:build !unix

package fsx

import "os"

// openRegular checks the type before opening (where FIFOs are not files a
// path open can block on, the check-then-open window only risks a clear
// error) and again on the open file.
func openRegular(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(path, st.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if st, err = f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, err
		}
		return nil, notRegular(path, st.Mode())
	}
	return f, nil
}
