package convert

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

type countingReaderAt struct {
	r     io.ReaderAt
	reads atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads.Add(1)
	return c.r.ReadAt(p, off)
}

// TestReadAhead: reads through the windows give the file's bytes wherever
// they fall (across windows, at the end, past it), and interleaved
// sequential streams cost one read of the file per window, not one each.
func TestReadAhead(t *testing.T) {
	t.Parallel()
	data := make([]byte, 3*readAheadSize+12345)
	rand.NewChaCha8([32]byte{1, 2}).Read(data)
	c := &countingReaderAt{r: bytes.NewReader(data)}
	ra := newReadAhead(c, int64(len(data)))
	// Three streams, 128 bytes at a time, interleaved.
	starts := []int64{0, readAheadSize + 7, 2*readAheadSize + 99}
	buf := make([]byte, 128)
	for step := int64(0); step < 4096; step++ {
		for _, s := range starts {
			off := s + step*128
			if _, err := ra.ReadAt(buf, off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, data[off:off+128]) {
				t.Fatalf("bytes at %d differ", off)
			}
		}
	}
	if n := c.reads.Load(); n > 6 {
		t.Errorf("%d reads of the file for three sequential streams of 512 KiB", n)
	}
	for _, off := range []int64{readAheadSize - 5, int64(len(data)) - 128, 17} {
		got := make([]byte, 128)
		if _, err := ra.ReadAt(got, off); err != nil || !bytes.Equal(got, data[off:off+128]) {
			t.Errorf("read at %d: %v", off, err)
		}
	}
	if n, err := ra.ReadAt(buf, int64(len(data))-10); n != 10 || !errors.Is(err, io.EOF) {
		t.Errorf("read over the end: %d, %v", n, err)
	}
}
