package filewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// writeOne writes data through a fresh file of pool and returns what the
// file on disk holds and whether the file ended in direct mode.
func writeOne(t *testing.T, pool *Pool, data []byte) (disk []byte, direct bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out")
	f, err := Create(path, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Finish()
	sum := f.SHA256()
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	disk, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); sum != hex.EncodeToString(want[:]) {
		t.Errorf("sha256 %s, want %x", sum, want)
	}
	return disk, f.direct // the writer has ended: Commit waited for it
}

// TestHeapBuffers: where no huge-page mapping can be made, a pool's buffers
// come from Go's heap, aligned for direct writes, and files are written
// exactly.
func TestHeapBuffers(t *testing.T) {
	defer func(m func(int) []byte) { mapHuge = m }(mapHuge)
	mapHuge = func(int) []byte { return nil }
	pool := newPool(2)
	b := pool.get()
	if len(b) != bufferSize || addr(b)%align != 0 {
		t.Fatalf("heap buffer of %d bytes at %#x, want %d aligned to %d", len(b), addr(b), bufferSize, align)
	}
	pool.put(b)
	data := pattern(3*bufferSize+align+11, 3)
	if disk, _ := writeOne(t, pool, data); !bytes.Equal(disk, data) {
		t.Fatalf("file of %d bytes differs from the %d written", len(disk), len(data))
	}
	if n := mappedCount(pool); n != 0 {
		t.Errorf("%d buffers mapped with mapping refused", n)
	}
}

// TestDirectRefusedAtOpen: a file whose O_DIRECT switch is refused is
// written through the page cache, exactly.
func TestDirectRefusedAtOpen(t *testing.T) {
	defer func(d func(*os.File, bool) error) { directOn = d }(directOn)
	directOn = func(*os.File, bool) error { return errInvalid }
	data := pattern(2*bufferSize+align+5, 4)
	disk, direct := writeOne(t, newPool(2), data)
	if !bytes.Equal(disk, data) || direct {
		t.Fatalf("file of %d bytes (equal %v) from %d written, direct %v", len(disk), bytes.Equal(disk, data), len(data), direct)
	}
}

// TestDirectRefusedAtWrite: a filesystem that takes O_DIRECT but refuses a
// direct write (here: from a buffer not aligned as direct I/O needs) gets
// that write and every later one through the page cache, and the file is
// exact.
func TestDirectRefusedAtWrite(t *testing.T) {
	defer func(m func(int) []byte) { mapHuge = m }(mapHuge)
	mapHuge = func(n int) []byte { return make([]byte, n+align)[1 : 1+n] }
	probe, err := Create(filepath.Join(t.TempDir(), "probe"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	took := probe.direct
	probe.Abort()
	if !took {
		t.Skip("this filesystem refuses O_DIRECT at open (TestDirectRefusedAtOpen covers that)")
	}
	data := pattern(3*bufferSize+7, 5)
	disk, direct := writeOne(t, newPool(2), data)
	if !bytes.Equal(disk, data) {
		t.Fatalf("file of %d bytes differs from the %d written", len(disk), len(data))
	}
	if direct {
		t.Skip("this filesystem accepted direct writes from unaligned buffers")
	}
}

// addr is the address of b's first byte.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// mappedCount is how many of p's buffers are mapped now.
func mappedCount(p *Pool) int {
	n := 0
	p.mapped.Range(func(any, any) bool { n++; return true })
	return n
}
