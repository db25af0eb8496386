//go:build linux

package filewrite

import "testing"

// TestMapBuffer checks that a mapped buffer has the size asked, starts on a
// huge-page boundary (so direct writes from it can use 2 MiB pages) and is
// writable through its whole length.
func TestMapBuffer(t *testing.T) {
	for _, n := range []int{align, hugePage, bufferSize, bufferSize + align} {
		b := mapBuffer(n)
		if b == nil {
			t.Fatalf("%d bytes: no mapping", n)
		}
		if len(b) != n || cap(b) != n || addr(b)%hugePage != 0 {
			t.Fatalf("%d bytes: len %d cap %d at %#x", n, len(b), cap(b), addr(b))
		}
		for i := range b {
			b[i] = byte(i)
		}
		for i := 0; i < n; i += 4093 {
			if b[i] != byte(i) {
				t.Fatalf("%d bytes: byte %d reads %d", n, i, b[i])
			}
		}
		unmapBuffer(b)
	}
}

// TestPoolClose checks that closing a pool unmaps the buffers it mapped and
// leaves it usable.
func TestPoolClose(t *testing.T) {
	p := newPool(3)
	bs := [][]byte{p.get(), p.get()}
	for _, b := range bs {
		b[0] = 1
		p.put(b)
	}
	if mappedCount(p) != 2 {
		t.Fatalf("%d buffers mapped, want 2", mappedCount(p))
	}
	p.Close()
	if mappedCount(p) != 0 {
		t.Fatalf("%d buffers still mapped after Close", mappedCount(p))
	}
	b := p.get()
	b[len(b)-1] = 2 // a new buffer, writable
	p.put(b)
	p.Close()
}
