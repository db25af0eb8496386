package filewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// pattern is n bytes that differ at every offset modulo a large prime, so a
// chunk written at the wrong offset cannot go unnoticed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range min(n, 251) {
		b[i] = byte(i) ^ seed
	}
	// The period repeats: copying doubles what is filled, a multiple of 251.
	for filled := 251; filled < n; filled *= 2 {
		copy(b[filled:], b[:filled])
	}
	return b
}

// align is a disk block: sizes around it and the buffer size are the edges
// of a file's chunks.
const align = 4096

// TestFileBytesAndHash writes files of sizes around the buffer and alignment
// boundaries, mixing Write and CopyFrom, and checks that the committed file
// holds exactly the bytes given, that SHA256 is the sha256 of the file on
// disk (computed here independently), and that the final name appears only
// at Commit.
func TestFileBytesAndHash(t *testing.T) {
	dir := t.TempDir()
	src := pattern(3*bufferSize+5000, 7)
	srcPath := filepath.Join(dir, "src")
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	pool := newPool(2)
	for _, size := range []int{0, 1, align - 1, align, align + 1, bufferSize - 1, bufferSize, bufferSize + 1, 2*bufferSize + align, 3*bufferSize + 17} {
		path := filepath.Join(dir, "out")
		os.Remove(path)
		f, err := Create(path, pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A header by Write, then the rest alternately copied and written.
		want := make([]byte, 0, size)
		head := min(size, 100)
		if _, err := f.Write(src[:head]); err != nil {
			t.Fatal(err)
		}
		want = append(want, src[:head]...)
		for off, step := head, 0; off < size; step++ {
			n := min(size-off, 1+(step*777777)%(bufferSize+3))
			if step%2 == 0 {
				if err := f.CopyFrom(in, int64(off), int64(n)); err != nil {
					t.Fatal(err)
				}
			} else if _, err := f.Write(src[off : off+n]); err != nil {
				t.Fatal(err)
			}
			want = append(want, src[off:off+n]...)
			off += n
		}
		if f.Offset() != int64(size) {
			t.Fatalf("size %d: offset %d", size, f.Offset())
		}
		f.Finish()
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("size %d: final name exists before Commit: %v", size, err)
		}
		sum := f.SHA256()
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		disk := sha256.Sum256(got)
		if !bytes.Equal(got, want) || sum != hex.EncodeToString(disk[:]) {
			t.Fatalf("size %d: file of %d bytes (equal %v), hash %s, file's %x", size, len(got), bytes.Equal(got, want), sum, disk)
		}
		// A deferred Abort after the commit keeps the file and its digest.
		f.Abort()
		if after := f.SHA256(); after != sum {
			t.Fatalf("size %d: sha256 after Commit and Abort %q, want %s", size, after, sum)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
			t.Errorf("size %d: mode %v", size, fi.Mode())
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("left %v", ents)
	}
}

// TestAbortRemovesTemporary: an aborted file leaves nothing, whether it was
// finished or not, and its pool buffers come back (a pool of 2 would
// otherwise block the next file).
func TestAbortRemovesTemporary(t *testing.T) {
	dir := t.TempDir()
	pool := newPool(2)
	for _, finish := range []bool{false, true, false, true} {
		f, err := Create(filepath.Join(dir, "x"), pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(pattern(2*bufferSize+3, 1)); err != nil {
			t.Fatal(err)
		}
		if finish {
			f.Finish()
		}
		if err := f.Abort(); err != nil {
			t.Fatal(err)
		}
		if sum := f.SHA256(); sum != "" {
			t.Errorf("an aborted file reports sha256 %s", sum)
		}
		if _, err := f.Write([]byte{1}); err == nil {
			t.Error("write after Abort accepted")
		}
		if err := f.Commit(); err == nil {
			t.Error("Commit after Abort succeeded")
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
}

// TestShortSource: copying past the end of the source is an error naming
// the offset, never a file padded with stale buffer bytes.
func TestShortSource(t *testing.T) {
	dir := t.TempDir()
	f, err := Create(filepath.Join(dir, "x"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	if err := f.CopyFrom(bytes.NewReader(make([]byte, 10)), 0, 11); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short source: %v", err)
	}
}

// TestWriteAfterFinish: a finished file accepts no more bytes.
func TestWriteAfterFinish(t *testing.T) {
	f, err := Create(filepath.Join(t.TempDir(), "x"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	f.Write([]byte("abc"))
	f.Finish()
	if _, err := f.Write([]byte("d")); !errors.Is(err, errFinished) {
		t.Errorf("write after Finish: %v", err)
	}
	if err := f.CopyFrom(bytes.NewReader([]byte("d")), 0, 1); !errors.Is(err, errFinished) {
		t.Errorf("copy after Finish: %v", err)
	}
}

// TestSharedPool: many files written at once through a pool smaller than
// their buffers in flight all complete with their own bytes (run with -race).
// Under -short 4 files of the 8.
func TestSharedPool(t *testing.T) {
	dir := t.TempDir()
	pool := newPool(3)
	files := 8
	if testing.Short() {
		files = 4 // still more files than buffers, half the bytes to disk
	}
	var wg sync.WaitGroup
	errs := make(chan error, files)
	for i := range files {
		wg.Go(func() {
			path := filepath.Join(dir, string(rune('a'+i)))
			f, err := Create(path, pool, nil)
			if err != nil {
				errs <- err
				return
			}
			data := pattern(bufferSize*2+i*align+i, byte(i))
			f.Write(data)
			if err := f.Commit(); err != nil {
				errs <- err
				return
			}
			got, _ := os.ReadFile(path)
			if !bytes.Equal(got, data) {
				errs <- errors.New(path + ": bytes differ")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestUnhashed: a file made by CreateUnhashed holds the same bytes as a
// hashed one and reports no digest.
func TestUnhashed(t *testing.T) {
	dir := t.TempDir()
	data := pattern(bufferSize+align+3, 5)
	path := filepath.Join(dir, "x")
	f, err := CreateUnhashed(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if f.SHA256() != "" {
		t.Errorf("unhashed file reports sha256 %s", f.SHA256())
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("file of %d bytes differs from the %d written", len(got), len(data))
	}
}

// TestConcurrentFilesHash writes files of one pool at once, so that their
// hashers run side by side, and checks each file's SHA256 against the
// sha256 of its bytes on disk.
func TestConcurrentFilesHash(t *testing.T) {
	dir := t.TempDir()
	pool := newPool(6)
	sizes := []int{2*bufferSize + 333, 3*bufferSize + 64, bufferSize - 1, 5*bufferSize/2 + 7}
	sums := make([]string, len(sizes))
	errs := make([]error, len(sizes))
	var wg sync.WaitGroup
	for i, size := range sizes {
		wg.Go(func() {
			f, err := Create(filepath.Join(dir, fmt.Sprint(i)), pool, nil)
			if err != nil {
				errs[i] = err
				return
			}
			data := pattern(size, byte(i))
			for len(data) > 0 { // uneven writes, so buffers fill at different times
				n := min(len(data), 1+(len(data)*7919)%(bufferSize/3))
				f.Write(data[:n])
				data = data[n:]
			}
			f.Finish()
			sums[i] = f.SHA256()
			errs[i] = f.Commit()
		})
	}
	wg.Wait()
	for i, size := range sizes {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		disk := sha256.Sum256(got)
		if !bytes.Equal(got, pattern(size, byte(i))) || sums[i] != hex.EncodeToString(disk[:]) {
			t.Errorf("file %d: %d bytes, hash %s, file's %x", i, len(got), sums[i], disk)
		}
	}
}
