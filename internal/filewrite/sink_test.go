package filewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// memSink records what a File hands its sink.
type memSink struct {
	data               bytes.Buffer
	committed, aborted int
	failAt             int64 // WriteAt at or past this offset fails (0: never)
	outOfOrder         bool
}

func (s *memSink) WriteAt(p []byte, off int64) (int, error) {
	if off != int64(s.data.Len()) {
		s.outOfOrder = true
	}
	if s.failAt > 0 && off+int64(len(p)) > s.failAt {
		return 0, errors.New("store refused the part")
	}
	return s.data.Write(p)
}
func (s *memSink) Commit() error { s.committed++; return nil }
func (s *memSink) Abort() error  { s.aborted++; return nil }

func TestSink(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), (3*bufferSize+1234)/16)
	s := &memSink{}
	f := CreateSink(s, "s3://b/k", nil, nil)
	for off := 0; off < len(data); off += 100000 {
		f.Write(data[off:min(off+100000, len(data))])
	}
	f.Finish()
	sum := f.SHA256()
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort() // deferred by callers: a no-op after Commit
	want := sha256.Sum256(data)
	if sum != hex.EncodeToString(want[:]) || !bytes.Equal(s.data.Bytes(), data) || s.outOfOrder {
		t.Errorf("the sink got %d bytes (in order: %v), sha256 %s; want %d bytes, %x", s.data.Len(), !s.outOfOrder, sum, len(data), want)
	}
	if s.committed != 1 || s.aborted != 0 {
		t.Errorf("committed %d, aborted %d; want 1 and 0", s.committed, s.aborted)
	}

	bad := &memSink{failAt: bufferSize + 1}
	f = CreateSink(bad, "s3://b/k", nil, nil)
	f.Write(data)
	err := f.Commit()
	if err == nil || !strings.Contains(err.Error(), "s3://b/k") || bad.committed != 0 || bad.aborted != 1 {
		t.Errorf("a failing sink: %v, committed %d, aborted %d; want an error naming s3://b/k, 0 and 1", err, bad.committed, bad.aborted)
	}
}
