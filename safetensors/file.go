package safetensors

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// File is the validated, immutable header of one safetensors file and the
// reader its data is served from.
type File struct {
	// Path names the file: as opened, or relative to its checkpoint's root.
	Path string
	// Size is the file's length in bytes.
	Size int64
	// DataStart is 8 + the JSON header's length: the data buffer's offset.
	DataStart int64
	// Metadata is the optional __metadata__ map (nil when absent).
	Metadata map[string]string
	// Tensors lists the tensors in data-offset order.
	Tensors []TensorInfo

	index  map[string]int32
	raw    []byte             // the header as read (names alias it), nil once compacted
	rawSum *[sha256.Size]byte // HeaderSum of a compacted header
	ra     io.ReaderAt
	closer io.Closer
}

// OpenFile opens a local file and reads its header. Anything other than a
// regular file (a FIFO, a device, a directory) is refused before it is read.
func OpenFile(path string) (*File, error) {
	fh, err := fsx.Open(path)
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", path, err)
	}
	return FromFile(fh, path)
}

// FromFile reads the header of a file the caller has already opened and
// checked, so that what was checked is what is read. The File owns fh from
// then on (a failure here closes it too); path names the file.
func FromFile(fh *os.File, path string) (*File, error) {
	st, err := fh.Stat()
	var f *File
	switch {
	case err != nil:
		err = fmt.Errorf("file %s: %w", path, err)
	case !st.Mode().IsRegular():
		err = fmt.Errorf("file %s: %w: it is %s", path, fsx.ErrNotRegular, fsx.Kind(st.Mode()))
	default:
		f, err = ReadHeader(fh, st.Size(), path)
	}
	if err != nil {
		fh.Close()
		return nil, err
	}
	f.closer = fh
	return f, nil
}

// Lookup finds a tensor by name.
func (f *File) Lookup(name string) (TensorInfo, bool) {
	i, ok := f.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// Section returns a reader over exactly the tensor's bytes; sections of one
// file can be read concurrently.
func (f *File) Section(t TensorInfo) *io.SectionReader {
	return io.NewSectionReader(f.ra, f.DataStart+t.Begin, t.End-t.Begin)
}

// ReaderAt is the source the file's bytes are read from.
func (f *File) ReaderAt() io.ReaderAt { return f.ra }

// Close releases the underlying file when this File opened it.
func (f *File) Close() error {
	c := f.closer
	if c == nil {
		return nil
	}
	f.closer = nil
	return c.Close()
}
