package sha256x

import (
	"crypto/sha256"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// lengths around the block and padding boundaries, and a few larger ones.
var lengths = []int{0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4096, 100003, 1 << 20}

func TestDigestMatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range lengths {
		b := randomBytes(r, n)
		for _, cut := range []int{0, 1, n / 3, n - 1} {
			if cut < 0 || cut > n {
				continue
			}
			d := New()
			d.Write(b[:cut])
			if got, want := d.Sum(), sha256.Sum256(b[:cut]); got != want {
				t.Errorf("%d bytes: %x, want %x", cut, got, want)
			}
			d.Write(b[cut:])
			if got, want := d.Sum(), sha256.Sum256(b); got != want {
				t.Errorf("%d bytes written as %d + %d: %x, want %x", n, cut, n-cut, got, want)
			}
		}
	}
}

func TestBlock2MatchesStdlib(t *testing.T) {
	if !hasSHA {
		t.Skip("no SHA instructions: Digests are crypto/sha256's")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, blocks := range []int{1, 2, 37} {
		a, b := randomBytes(r, 64*blocks), randomBytes(r, 64*blocks)
		pa, pb := &pending{d: New(), p: a}, &pending{d: New(), p: b}
		hashPair(pa, pb)
		if len(pa.p) != 0 || len(pb.p) != 0 {
			t.Fatalf("%d blocks: %d and %d bytes left", blocks, len(pa.p), len(pb.p))
		}
		if pa.d.Sum() != sha256.Sum256(a) || pb.d.Sum() != sha256.Sum256(b) {
			t.Errorf("%d blocks hashed in pairs: %x %x, want %x %x", blocks, pa.d.Sum(), pb.d.Sum(), sha256.Sum256(a), sha256.Sum256(b))
		}
	}
}

// TestHashPairPartial pairs streams that sit inside a block or end in one.
func TestHashPairPartial(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range [][4]int{{10, 1000, 0, 500}, {0, 30, 0, 4096}, {63, 1, 1, 200}, {0, 128, 64, 64}, {5, 0, 0, 70}} {
		a, b := randomBytes(r, c[0]+c[1]), randomBytes(r, c[2]+c[3])
		da, db := New(), New()
		da.Write(a[:c[0]])
		db.Write(b[:c[2]])
		pa, pb := &pending{d: da, p: a[c[0]:]}, &pending{d: db, p: b[c[2]:]}
		if len(pa.p) > 0 && len(pb.p) > 0 {
			hashPair(pa, pb)
			if len(pa.p) > 0 && len(pb.p) > 0 {
				t.Fatalf("%v: the call left %d and %d bytes", c, len(pa.p), len(pb.p))
			}
		}
		da.Write(pa.p)
		db.Write(pb.p)
		if da.Sum() != sha256.Sum256(a) || db.Sum() != sha256.Sum256(b) {
			t.Errorf("%v: wrong digests", c)
		}
	}
}

// TestPairerConcurrent hashes many streams from many goroutines through one
// Pairer in chunks of uneven sizes; each digest must be its stream's.
func TestPairerConcurrent(t *testing.T) {
	for _, linger := range []time.Duration{0, 50 * time.Microsecond, 5 * time.Millisecond} {
		t.Run(linger.String(), func(t *testing.T) { testPairer(t, &Pairer{Linger: linger}) })
	}
}

func testPairer(t *testing.T, pr *Pairer) {
	r := rand.New(rand.NewPCG(7, 8))
	const streams = 6
	data := make([][]byte, streams)
	cuts := make([][]int, streams)
	for i := range data {
		data[i] = randomBytes(r, 300_000+r.IntN(700_000))
		for at := 0; at < len(data[i]); {
			c := []int{1, 63, 64, 4096, alonePiece + 3, 200_000}[r.IntN(6)]
			at = min(at+c, len(data[i]))
			cuts[i] = append(cuts[i], at)
		}
	}
	var wg sync.WaitGroup
	got := make([][Size]byte, streams)
	for range streams {
		pr.Open()
	}
	for i := range streams {
		wg.Go(func() {
			defer pr.Close()
			d, at := New(), 0
			for _, end := range cuts[i] {
				pr.Write(d, data[i][at:end])
				at = end
			}
			got[i] = d.Sum()
		})
	}
	wg.Wait()
	for i := range streams {
		if want := sha256.Sum256(data[i]); got[i] != want {
			t.Errorf("stream %d: %x, want %x", i, got[i], want)
		}
	}
	if len(pr.parked) != 0 || pr.alone != 0 {
		t.Errorf("left %d parked, %d hashing alone", len(pr.parked), pr.alone)
	}
}

func FuzzDigest(f *testing.F) {
	f.Add([]byte("abc"), 1)
	f.Add(make([]byte, 200), 64)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		if cut < 0 || cut > len(b) {
			cut = len(b) / 2
		}
		d := New()
		d.Write(b[:cut])
		d.Write(b[cut:])
		if got, want := d.Sum(), sha256.Sum256(b); got != want {
			t.Fatalf("%x, want %x", got, want)
		}
	})
}

// TestPairerPairs checks that a stream waiting for a partner is hashed along
// with the next one: with a linger of an hour, the first Write returns only
// if the second takes its bytes (or wakes it to go on) instead of hashing
// alone.
func TestPairerPairs(t *testing.T) {
	if !hasSHA {
		t.Skip("no SHA instructions: a Write hashes alone, at once")
	}
	pr := &Pairer{Linger: time.Hour}
	pr.Open()
	pr.Open()
	r := rand.New(rand.NewPCG(9, 10))
	a, b := randomBytes(r, 1<<20), randomBytes(r, 1<<20)
	da, db := New(), New()
	done := make(chan struct{})
	go func() {
		pr.Write(da, a)
		close(done)
	}()
	for parked := 0; parked == 0; time.Sleep(time.Millisecond) {
		pr.mu.Lock()
		parked = len(pr.parked)
		pr.mu.Unlock()
	}
	doneB := make(chan struct{})
	go func() {
		pr.Write(db, b)
		close(doneB)
	}()
	deadline := time.After(10 * time.Second)
	for _, c := range []chan struct{}{done, doneB} {
		select {
		case <-c:
		case <-deadline:
			t.Fatal("the waiting stream was not taken along")
		}
	}
	pr.Close()
	pr.Close()
	if da.Sum() != sha256.Sum256(a) || db.Sum() != sha256.Sum256(b) {
		t.Error("wrong digests")
	}
}
