package sha256x

import (
	"slices"
	"sync"
	"time"
)

// alonePiece is how much a stream hashes by itself before it looks again
// for a partner: about 40 µs, so that a stream that arrives meanwhile waits
// little, and few enough lock round trips not to matter.
const alonePiece = 64 << 10

// A Pairer lets goroutines that each hash their own stream pair up: one
// that finds another stream waiting hashes both at once, one that finds
// nobody to pair with hashes alone, in short pieces, looking for a partner
// after each, and one that finds a goroutine hashing alone waits to be
// taken along by it. No goroutine waits for a partner that may never come.
// It is safe for concurrent use; its zero value is ready.
type Pairer struct {
	// Linger is how long a stream that finds nobody to pair with waits for
	// a partner before it hashes alone (0: it never waits), while another
	// stream is open (see Open). Waiting costs no CPU, and streams whose
	// data arrives in bursts (a file's buffers as they fill) otherwise
	// seldom meet.
	Linger time.Duration

	mu     sync.Mutex
	open   int        // streams between Open and Close
	parked []*pending // streams waiting to be hashed along with another
	alone  int        // goroutines hashing a piece alone (each takes a parked stream next)
}

// pending is a stream in a Write: the bytes it still has to hash.
type pending struct {
	d         *Digest
	p         []byte
	wake      chan struct{}
	lingering bool // parked with a timer of its own
}

// Write adds p to d, hashed together with another goroutine's Write when
// there is one to pair with, and returns once all of p is in d. A Digest
// must be written by one goroutine at a time.
func (pr *Pairer) Write(d *Digest, p []byte) {
	if d.std != nil {
		d.std.Write(p)
		return
	}
	me := &pending{d: d, p: p, wake: make(chan struct{}, 1)}
	lingered := false // once per Write: a stream waits for a partner at most Linger
	pr.mu.Lock()
	for len(me.p) > 0 {
		if len(pr.parked) > 0 {
			other := pr.pop()
			pr.spread()
			pr.mu.Unlock()
			hashPair(me, other)
			other.wake <- struct{}{} // done, or back to look for a partner itself
			pr.mu.Lock()
			continue
		}
		if pr.alone > 0 {
			// A goroutine hashing alone takes this stream along after
			// its current piece.
			pr.parked = append(pr.parked, me)
			pr.mu.Unlock()
			<-me.wake
			pr.mu.Lock()
			continue
		}
		if pr.Linger > 0 && !lingered && pr.open > 1 {
			lingered = true
			me.lingering = true
			pr.parked = append(pr.parked, me)
			pr.mu.Unlock()
			ok := pr.linger(me)
			me.lingering = false
			if ok {
				continue // taken along by another stream, or woken to go on
			}
			// Nobody came: it is out of parked, and the lock is held.
		}
		pr.alone++
		pr.mu.Unlock()
		c := min(len(me.p), alonePiece)
		me.d.Write(me.p[:c])
		me.p = me.p[c:]
		pr.mu.Lock()
		pr.alone--
	}
	pr.spread()
	pr.mu.Unlock()
}

// Open counts a stream that will be written: a Write lingers for a
// partner only while another stream is open. Each Open needs a Close.
func (pr *Pairer) Open() {
	pr.mu.Lock()
	pr.open++
	pr.mu.Unlock()
}

// Close ends a stream counted by Open.
func (pr *Pairer) Close() {
	pr.mu.Lock()
	pr.open--
	pr.mu.Unlock()
}

// linger waits up to Linger for me, parked, to be taken. It reports whether
// it was (with the lock held again); if not, it has taken me out of parked
// and holds the lock.
func (pr *Pairer) linger(me *pending) bool {
	t := time.NewTimer(pr.Linger)
	defer t.Stop()
	select {
	case <-me.wake:
		pr.mu.Lock()
		return true
	case <-t.C:
	}
	pr.mu.Lock()
	if i := slices.Index(pr.parked, me); i >= 0 {
		pr.parked = slices.Delete(pr.parked, i, i+1)
		return false
	}
	// Taken meanwhile: the wake is on its way.
	pr.mu.Unlock()
	<-me.wake
	pr.mu.Lock()
	return true
}

// pop takes the latest parked stream.
func (pr *Pairer) pop() *pending {
	n := len(pr.parked)
	w := pr.parked[n-1]
	pr.parked[n-1] = nil
	pr.parked = pr.parked[:n-1]
	return w
}

// spread wakes a parked stream that no goroutine hashing alone is left to
// take along; it goes on by itself (and takes the next ones along). A
// lingering stream is left to its timer.
func (pr *Pairer) spread() {
	if pr.alone > 0 {
		return
	}
	for i := len(pr.parked) - 1; i >= 0; i-- {
		if w := pr.parked[i]; !w.lingering {
			pr.parked = slices.Delete(pr.parked, i, i+1)
			w.wake <- struct{}{}
			return
		}
	}
}

// hashPair hashes the whole blocks that a and b have in common at once,
// after completing any partial block each has, then buffers a tail shorter
// than a block; so each call finishes at least one of the two, and what is
// left of the other stays in its p.
func hashPair(a, b *pending) {
	if a.d.std != nil || b.d.std != nil { // no paired rounds on this CPU
		a.d.Write(a.p)
		b.d.Write(b.p)
		a.p, b.p = nil, nil
		return
	}
	a.p = a.d.fillPartial(a.p) // if a.p is left non-empty, a is at a block boundary
	b.p = b.d.fillPartial(b.p)
	if n := min(len(a.p), len(b.p)) &^ (blockSize - 1); n > 0 {
		block2(&a.d.h, &b.d.h, &a.p[0], &b.p[0], n/blockSize)
		a.d.len += uint64(n)
		b.d.len += uint64(n)
		a.p, b.p = a.p[n:], b.p[n:]
	}
	for _, s := range [2]*pending{a, b} {
		if len(s.p) < blockSize {
			s.d.Write(s.p)
			s.p = nil
		}
	}
}
