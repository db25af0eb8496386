package model

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/k3ckpt/k3ckpt/quant"
)

// The MXFP4 experts are most of a replica's bytes, and encoding their
// normals one float at a time cost more than drawing them, so their codes
// are found from the integers behind the values, giving the bytes
// quant.EncodeMXFP4 gives (every table entry is read off it):
//   - a value is valueDist.of(s) of an Irwin–Hall sum s in [0, ihMax],
//     nondecreasing in s, so a group's scale exponent is the larger of its
//     smallest and largest sums' (a table holds each sum's exponent);
//   - under one exponent the E2M1 code is a step function of s: a table of
//     buckets of sums holds each bucket's code and where in it the code
//     changes, if once; a group with a sum in a bucket where it changes more
//     than once (only groups of tiny amax) takes quant.EncodeMXFP4.

// ihMax is the largest Irwin–Hall sum of twelve 16-bit lanes.
const ihMax = 12 * 65535

const (
	mxBucketBits = 8 // the code tables' resolution: buckets of 256 sums
	mxBuckets    = ihMax>>mxBucketBits + 1
	mxUntabled   = 0xff // marks a bucket whose code changes more than once
)

// mxCodeTable maps a sum to its E2M1 code under one scale exponent.
type mxCodeTable struct {
	lo, hi [mxBuckets]uint8  // the code at the bucket's start, and from split on
	split  [mxBuckets]uint32 // the first sum coded hi (0: the code does not change)
}

// mxTables are the tables of one value distribution: read-only once built,
// shared by every worker.
type mxTables struct {
	dist valueDist
	// exp is each sum's scale byte in a group of that one value.
	exp   []uint8
	byExp [256]atomic.Pointer[mxCodeTable] // by scale byte, built on first use
}

var (
	mxTablesMu sync.Mutex
	mxTablesOf = map[valueDist]*mxTables{}
)

// mxTablesFor returns the shared tables of d, building the exponent table
// on first use.
func mxTablesFor(d valueDist) *mxTables {
	mxTablesMu.Lock()
	defer mxTablesMu.Unlock()
	if m := mxTablesOf[d]; m != nil {
		return m
	}
	m := &mxTables{dist: d, exp: make([]uint8, ihMax+1)}
	// |value| is monotone on each side of the sign change, and so is the
	// exponent: a bucket of one sign whose ends agree is constant; any
	// other bucket is read sum by sum.
	for b := range mxBuckets {
		s0 := b << mxBucketBits
		s1 := min(s0+(1<<mxBucketBits)-1, ihMax)
		e0, e1 := m.expOf(uint64(s0)), m.expOf(uint64(s1))
		v0, v1 := d.of(uint64(s0)), d.of(uint64(s1))
		if e0 == e1 && (v0 >= 0) == (v1 >= 0) {
			for s := s0; s <= s1; s++ {
				m.exp[s] = e0
			}
			continue
		}
		for s := s0; s <= s1; s++ {
			m.exp[s] = m.expOf(uint64(s))
		}
	}
	mxTablesOf[d] = m
	return m
}

// expOf is the scale byte quant.EncodeMXFP4 gives a group holding only the
// value of sum s (0xff, never tabled, when it refuses the value).
func (m *mxTables) expOf(s uint64) uint8 {
	var probe [quant.MXGroupSize]float32
	var codes [quant.MXGroupSize / 2]byte
	var sc [1]byte
	probe[0] = m.dist.of(s)
	if err := quant.EncodeMXFP4(codes[:], sc[:], probe[:]); err != nil {
		return 0xff
	}
	return sc[0]
}

// code is quant.EncodeMXFP4's code of sum s in a group of scale byte sb:
// the group holds the value and 6·2^e, whose scale is sb. A value above
// 6·2^e (never in such a group) is given the saturated code, which keeps
// the codes ordered in s.
func (m *mxTables) code(s uint64, sb uint8) uint8 {
	var probe [quant.MXGroupSize]float32
	var codes [quant.MXGroupSize / 2]byte
	var sc [1]byte
	top := float32(6 * math.Ldexp(1, int(sb)-127))
	v := m.dist.of(s)
	switch {
	case v > top:
		return 7
	case v < -top:
		return 15
	}
	probe[0], probe[1] = v, top
	if err := quant.EncodeMXFP4(codes[:], sc[:], probe[:]); err != nil || sc[0] != sb {
		return mxUntabled
	}
	return codes[0] & 0xf
}

// table returns the code table of scale byte sb, or nil when 6·2^e is not
// a normal float32 (such groups take the fallback).
func (m *mxTables) table(sb uint8) *mxCodeTable {
	if sb < 10 || sb > 250 {
		return nil
	}
	if t := m.byExp[sb].Load(); t != nil {
		return t
	}
	t := &mxCodeTable{}
	for b := range mxBuckets {
		s0 := uint64(b) << mxBucketBits
		s1 := min(s0+(1<<mxBucketBits)-1, ihMax)
		c0 := m.code(s0, sb)
		t.lo[b] = c0
		if c0 == m.code(s1, sb) && c0 != mxUntabled {
			continue // codes are ordered in s: one code throughout
		}
		// Read every sum of the bucket: one change is tabled, more are not.
		for s := s0 + 1; s <= s1; s++ {
			c := m.code(s, sb)
			switch {
			case c == t.lo[b] && t.split[b] == 0:
			case t.split[b] == 0 && c != mxUntabled:
				t.hi[b], t.split[b] = c, uint32(s)
			case t.split[b] != 0 && c == t.hi[b]:
			default:
				t.lo[b], t.split[b] = mxUntabled, 0
				s = s1
			}
		}
	}
	m.byExp[sb].CompareAndSwap(nil, t)
	return m.byExp[sb].Load()
}

// encodeGroups draws len(scales) groups of 32 values from r into packed
// and scales: the bytes quant.EncodeMXFP4 gives for the same values.
func (m *mxTables) encodeGroups(r *splitmix, packed, scales []byte) error {
	var sums [quant.MXGroupSize]uint32
	for g := range scales {
		for i := range sums {
			sums[i] = uint32(r.sum12())
		}
		if err := m.encodeGroup(&sums, packed[g*quant.MXGroupSize/2:(g+1)*quant.MXGroupSize/2], scales[g:g+1]); err != nil {
			return err
		}
	}
	return nil
}

// encodeGroup encodes the values of one group's sums.
func (m *mxTables) encodeGroup(sums *[quant.MXGroupSize]uint32, out, scale []byte) error {
	smin, smax := uint32(ihMax), uint32(0)
	for _, s := range sums {
		smin, smax = min(smin, s), max(smax, s)
	}
	sb := max(m.exp[smin], m.exp[smax])
	if t := m.table(sb); t != nil && t.groupCodes(sums, out) {
		scale[0] = sb
		return nil
	}
	var vals [quant.MXGroupSize]float32
	for i, s := range sums {
		vals[i] = m.dist.of(uint64(s))
	}
	return quant.EncodeMXFP4(out, scale, vals[:])
}

// groupCodes packs the codes of one group's sums; false when one falls in
// an untabled bucket.
func (t *mxCodeTable) groupCodes(sums *[quant.MXGroupSize]uint32, out []byte) bool {
	var c [quant.MXGroupSize]uint8
	for i, s := range sums {
		b := s >> mxBucketBits
		k := t.lo[b]
		if sp := t.split[b]; sp != 0 && s >= sp {
			k = t.hi[b]
		}
		c[i] = k
	}
	for i := range out {
		if c[2*i] == mxUntabled || c[2*i+1] == mxUntabled {
			return false
		}
		out[i] = c[2*i] | c[2*i+1]<<4
	}
	return true
}
