package convert

import (
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// fileStamp is what the filesystem says about a source file: a write to it
// (or a replacement under its name) changes the size, the modification or
// change time, or the inode. The executor compares a file's stamp before and
// after using it with the one taken at planning, so a source modified while
// the conversion runs fails instead of giving outputs whose recorded hashes
// describe bytes other than the written ones.
type fileStamp struct {
	known      bool
	size       int64
	mtime      int64 // ns
	ctime      int64 // ns, 0 where the platform has none
	dev, inode uint64
}

func stampInfo(fi fs.FileInfo) fileStamp {
	s := fsx.StampOf(fi)
	return fileStamp{known: true, size: s.Size, mtime: s.MTime, ctime: s.CTime, dev: s.Dev, inode: s.Inode}
}

// stampOf stamps the file a reader reads from; readers that are not local
// files (tests' in-memory sources) have no stamp and are not checked.
func stampOf(r io.ReaderAt) (fileStamp, error) {
	f, ok := r.(interface{ Stat() (fs.FileInfo, error) })
	if !ok {
		return fileStamp{}, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return fileStamp{}, err
	}
	return stampInfo(fi), nil
}

// check compares a fresh stamp with the planned one.
func (s fileStamp) check(now fileStamp, path string) error {
	if !s.known || !now.known || s == now {
		return nil
	}
	what := "modified"
	switch {
	case s.size != now.size:
		what = fmt.Sprintf("resized from %d to %d bytes", s.size, now.size)
	case s.inode != now.inode || s.dev != now.dev:
		what = "replaced by another file"
	case s.mtime != now.mtime:
		what = "modified at " + time.Unix(0, now.mtime).Format(time.RFC3339Nano)
	}
	return fmt.Errorf("%w: %s was %s while the conversion ran (planned from it as it was before); rerun once the source is stable", ErrChanged, path, what)
}
