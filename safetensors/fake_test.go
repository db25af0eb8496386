package safetensors

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// fakeFile is a file of any claimed size whose bytes past the header read as
// zeros, for sizes no test should write.
type fakeFile struct {
	name, header string
	size         int64
}

func (f fakeFile) ReadAt(p []byte, off int64) (int, error) {
	var pre bytes.Buffer
	binary.Write(&pre, binary.LittleEndian, uint64(len(f.header)))
	pre.WriteString(f.header)
	clear(p)
	if off < int64(pre.Len()) {
		copy(p, pre.Bytes()[off:])
	}
	if off+int64(len(p)) > f.size {
		return int(max(0, f.size-off)), io.EOF
	}
	return len(p), nil
}

// fakeSource serves fake files and an index held in memory.
type fakeSource struct {
	files []fakeFile
	index string
}

func (s *fakeSource) open(_ context.Context, name string) (io.ReaderAt, int64, io.Closer, error) {
	for _, f := range s.files {
		if f.name == name {
			return f, f.size, nil, nil
		}
	}
	return nil, 0, nil, fmt.Errorf("%w: %s", ErrNotFound, name)
}

func (s *fakeSource) readAux(_ context.Context, name string, limit int64) ([]byte, error) {
	if name == IndexName {
		return []byte(s.index), nil
	}
	return nil, ErrNotFound
}

func (s *fakeSource) exists(_ context.Context, name string) (bool, error) {
	return name == IndexName, nil
}

func (s *fakeSource) list() ([]string, error) {
	var out []string
	for _, f := range s.files {
		out = append(out, f.name)
	}
	slices.Sort(out)
	return out, nil
}
