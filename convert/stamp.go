package convert

import (
	"fmt"
	"io"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// The executor compares a source file's stamp (fsx.Stamp) before and after
// using it with the one taken at planning, so that a source modified while
// the conversion runs fails it.

// checkStamp compares a fresh stamp of path with the planned one.
func checkStamp(planned, now fsx.Stamp, path string) error {
	what := planned.Change(now)
	if what == "" {
		return nil
	}
	return fmt.Errorf("%w: %s was %s while the conversion ran (planned from it as it was before); rerun once the source is stable", errChanged, path, what)
}

// checkStampNow compares an open file's stamp with the planned one.
func checkStampNow(r io.ReaderAt, planned fsx.Stamp, path string) error {
	now, err := fsx.StampReader(r)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return checkStamp(planned, now, path)
}
