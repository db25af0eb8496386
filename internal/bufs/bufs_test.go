package bufs

import "testing"

func TestGrow(t *testing.T) {
	b := make([]byte, 4, 16)
	g := Grow(b, 10)
	if len(g) != 10 || &g[0] != &b[0] {
		t.Fatal("did not reuse capacity")
	}
	h := Grow(b, 32)
	if len(h) != 32 || &h[0] == &b[0] {
		t.Fatal("did not allocate a larger slice")
	}
}
