//go:build linux

package safetensors

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copyRange moves a section of a local file into the tensor with
// copy_file_range. handled is false when the kernel refuses the pair of
// files before any byte moved (another filesystem, no support), so the
// caller falls back to a buffered copy.
func (tw *TensorWriter) copyRange(sr *io.SectionReader) (int64, error, bool) {
	src, base, n := sr.Outer()
	sf, ok := src.(*os.File)
	if !ok {
		return 0, nil, false
	}
	pos, err := sr.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, nil, false
	}
	remaining := n - pos
	if remaining > tw.Remaining() {
		return 0, tw.overflow(remaining - tw.Remaining()), true
	}
	roff := base + pos
	var total int64
	for remaining > 0 {
		chunk := min(remaining, 1<<30)
		woff := tw.off
		m, err := unix.CopyFileRange(int(sf.Fd()), &roff, int(tw.w.f.Fd()), &woff, int(chunk), 0)
		if m > 0 {
			tw.advance(int64(m))
			total += int64(m)
			remaining -= int64(m)
		}
		if err != nil {
			if total == 0 && (errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)) {
				return 0, nil, false // fall back to a buffered copy
			}
			return total, fmt.Errorf("file %s: %s: copy: %w", tw.w.Path(), tw.label(), err), true
		}
		if m == 0 {
			return total, fmt.Errorf("file %s: %s: copy: %w: source ended early", tw.w.Path(), tw.label(), io.ErrUnexpectedEOF), true
		}
	}
	sr.Seek(total, io.SeekCurrent)
	return total, nil, true
}
