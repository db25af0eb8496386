package sha256x

import (
	"crypto/sha256"
	"sync"
	"testing"
)

// Two streams of 4 MiB chunks, as two files written at once: crypto/sha256
// on a goroutine each, and through a Pairer. Compare ns/op (and the CPU
// time, e.g. with -cpu 1, where the paired hashing needs half).
func BenchmarkTwoStreams(b *testing.B) {
	buf := [2][]byte{make([]byte, 4<<20), make([]byte, 4<<20)}
	b.Run("stdlib", func(b *testing.B) {
		b.SetBytes(8 << 20)
		hs := [2]interface{ Write([]byte) (int, error) }{sha256.New(), sha256.New()}
		for b.Loop() {
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Go(func() { hs[i].Write(buf[i]) })
			}
			wg.Wait()
		}
	})
	b.Run("paired", func(b *testing.B) {
		b.SetBytes(8 << 20)
		var pr Pairer
		ds := [2]*Digest{New(), New()}
		for b.Loop() {
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Go(func() { pr.Write(ds[i], buf[i]) })
			}
			wg.Wait()
		}
	})
}
