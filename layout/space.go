package layout

import (
	"errors"
	"fmt"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

var errNoSpace = errors.New("not enough free space")

// freeSpace is fsx.FreeSpace (a test stands in a full disk).
var freeSpace = fsx.FreeSpace

// checkSpace compares what this run still writes with the free space of
// dst's filesystem, before the first byte.
func checkSpace(dst string, dirs []outDir) error {
	var need int64
	for _, od := range dirs {
		s := od.state()
		if s.finished {
			continue
		}
		for _, of := range s.todo {
			need += of.lay.Size
		}
		want, err := s.d.memoryFiles(s.completion)
		if err != nil {
			return err
		}
		for _, b := range want {
			need += int64(len(b))
		}
	}
	free, ok, err := freeSpace(dst)
	if err != nil {
		return fmt.Errorf("free space of %s: %w", dst, err)
	}
	if ok && free < need {
		return fmt.Errorf("%w: %s has %.2f GiB (%d bytes) free, this run writes %.2f GiB (%d bytes) more; free space, or pass --no-space-check",
			errNoSpace, dst, float64(free)/(1<<30), free, float64(need)/(1<<30), need)
	}
	return nil
}
