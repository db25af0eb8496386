package convert

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
)

// spill holds a remote source's FP8 codes between their scale and code steps
// (Step.SpillCodes) in a temporary file beside the output shard: never synced,
// removed once the shard is written, or by the next run (as the shard's own
// temporary) if this one is killed.
type spill struct {
	f *os.File
	w *bufio.Writer
	n int64 // bytes written
}

func openSpill(out string) (*spill, error) {
	dir, base := filepath.Split(out)
	f, err := os.CreateTemp(dir, filewrite.TempPrefix+base+"-spill-*")
	if err != nil {
		return nil, err
	}
	return &spill{f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (s *spill) write(b []byte) error {
	n, err := s.w.Write(b)
	s.n += int64(n)
	return err
}

// reader makes everything written readable and returns the file.
func (s *spill) reader() (io.ReaderAt, error) { return s.f, s.w.Flush() }

// remove closes and deletes the file (nil does nothing).
func (s *spill) remove() error {
	if s == nil {
		return nil
	}
	return errors.Join(s.f.Close(), os.Remove(s.f.Name()))
}
