package safetensors

import (
	"math/rand/v2"
	"testing"
)

// TestCleanMatchesBytewise checks the word-at-a-time scan against the plain
// definition (no byte below 0x20, no backslash) on every single-byte string
// at every offset of a 20-byte span, and on random strings.
func TestCleanMatchesBytewise(t *testing.T) {
	want := func(b []byte) bool {
		for _, c := range b {
			if c < 0x20 || c == '\\' {
				return false
			}
		}
		return true
	}
	for c := range 256 {
		for pos := range 20 {
			b := []byte("language_model.model")
			b[pos] = byte(c)
			for n := pos + 1; n <= len(b); n++ {
				if got := clean(b[:n]); got != want(b[:n]) {
					t.Fatalf("clean(%q) = %v", b[:n], got)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(0x1c + r.IntN(0x90)) // mostly printable, some controls, '\\' and high bytes
		}
		if got := clean(b); got != want(b) {
			t.Fatalf("clean(%q) = %v", b, got)
		}
	}
}
