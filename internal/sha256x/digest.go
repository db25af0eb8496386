// Package sha256x computes SHA-256 digests of several streams at once. On a
// CPU with the x86 SHA instructions one message's rounds form a single chain
// of dependent instructions, which leaves the unit half idle; a Pairer runs
// the rounds of two streams interleaved on one core, hashing both in the
// time of one. Elsewhere a Digest is crypto/sha256's.
package sha256x

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// Size is the length of a digest in bytes.
const Size = sha256.Size

const blockSize = 64

//go:generate go run gen.go

var initState = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// Digest is a running SHA-256. It implements io.Writer; a Digest is not safe
// for concurrent use, except through a Pairer.
type Digest struct {
	h   [8]uint32
	x   [blockSize]byte // a partial block
	nx  int
	len uint64
	std hash.Hash // crypto/sha256's, on a CPU without the SHA instructions
}

// New returns a digest of nothing yet.
func New() *Digest {
	if !hasSHA {
		return &Digest{std: sha256.New()}
	}
	return &Digest{h: initState}
}

// Write adds p; it never fails.
func (d *Digest) Write(p []byte) (int, error) {
	if d.std != nil {
		return d.std.Write(p)
	}
	n := len(p)
	if p = d.fillPartial(p); d.nx > 0 {
		return n, nil // all of p went into the partial block
	}
	if w := len(p) &^ (blockSize - 1); w > 0 {
		block1(&d.h, &p[0], w/blockSize)
		d.len += uint64(w)
		p = p[w:]
	}
	d.nx = copy(d.x[:], p)
	d.len += uint64(d.nx)
	return n, nil
}

// fillPartial moves the head of p into a partial block, hashing the block
// once complete, and returns the rest of p (which then starts a block).
func (d *Digest) fillPartial(p []byte) []byte {
	if d.nx == 0 {
		return p
	}
	c := copy(d.x[d.nx:], p)
	d.nx += c
	d.len += uint64(c)
	if d.nx == blockSize {
		block1(&d.h, &d.x[0], 1)
		d.nx = 0
	}
	return p[c:]
}

// Sum returns the digest of the bytes written so far; d is unchanged.
func (d *Digest) Sum() [Size]byte {
	var s [Size]byte
	if d.std != nil {
		d.std.Sum(s[:0])
		return s
	}
	c := *d
	var pad [blockSize + 8]byte
	pad[0] = 0x80
	n := blockSize - (c.nx+8)%blockSize // the 0x80 byte and the zeros before the length
	binary.BigEndian.PutUint64(pad[n:], c.len<<3)
	c.Write(pad[:n+8])
	for i, v := range c.h {
		binary.BigEndian.PutUint32(s[4*i:], v)
	}
	return s
}
