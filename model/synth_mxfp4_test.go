package model

import (
	"bytes"
	"testing"

	"github.com/k3ckpt/k3ckpt/quant"
)

// TestMXFP4TablesMatchEncoder: the integer-domain MXFP4 path gives the
// bytes quant.EncodeMXFP4 gives for the same float32 values, for the
// distributions synth draws and for far narrower ones.
func TestMXFP4TablesMatchEncoder(t *testing.T) {
	t.Parallel()
	n := 1 << 18
	if testing.Short() {
		n = 1 << 15
	}
	for _, d := range []valueDist{defaultDist, {1.96, 0.7}, {-4, 1}, {0, 0.25}, {0.001, 1e-5}} {
		m := mxTablesFor(d)
		ref, fast := tensorStream(3, "x"), tensorStream(3, "x")
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = d.draw(&ref)
		}
		wantP, wantS := make([]byte, n/2), make([]byte, n/32)
		if err := quant.EncodeMXFP4(wantP, wantS, vals); err != nil {
			t.Fatal(err)
		}
		gotP, gotS := make([]byte, n/2), make([]byte, n/32)
		if err := m.encodeGroups(&fast, gotP, gotS); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gotP, wantP) || !bytes.Equal(gotS, wantS) {
			t.Errorf("dist %+v: codes or scales differ from quant.EncodeMXFP4", d)
		}
		if ref != fast {
			t.Errorf("dist %+v: the streams drew different counts", d)
		}
	}
}

// TestMXFP4TablesNarrowGroups: groups whose amax is far below the
// distribution's (every exponent down to where codes change within a
// bucket, and the fallback beyond) still match quant.EncodeMXFP4.
func TestMXFP4TablesNarrowGroups(t *testing.T) {
	t.Parallel()
	m := mxTablesFor(defaultDist)
	r := tensorStream(9, "narrow")
	for span := uint64(1 << 17); span >= 4; span /= 2 {
		for range 64 {
			var sums [quant.MXGroupSize]uint32
			vals := make([]float32, quant.MXGroupSize)
			for i := range sums {
				sums[i] = uint32(ihMax/2 - span/2 + r.next()%span)
				vals[i] = defaultDist.of(uint64(sums[i]))
			}
			var wantP, gotP [quant.MXGroupSize / 2]byte
			var wantS, gotS [1]byte
			if err := quant.EncodeMXFP4(wantP[:], wantS[:], vals); err != nil {
				t.Fatal(err)
			}
			if err := m.encodeGroup(&sums, gotP[:], gotS[:]); err != nil {
				t.Fatal(err)
			}
			if gotP != wantP || gotS != wantS {
				t.Fatalf("span %d: group %v: got %x/%x, want %x/%x", span, sums, gotP, gotS, wantP, wantS)
			}
		}
	}
}

// BenchmarkMXFP4Groups is the integer-domain path per value (SetBytes: the
// bytes written, 17 per 32 values).
func BenchmarkMXFP4Groups(b *testing.B) {
	m := mxTablesFor(defaultDist)
	r := tensorStream(0, "x")
	p, s := make([]byte, 1<<15), make([]byte, 1<<11)
	b.SetBytes(int64(len(p) + len(s)))
	for b.Loop() {
		if err := m.encodeGroups(&r, p, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMXFP4Float is the float path it replaced, for the ratio.
func BenchmarkMXFP4Float(b *testing.B) {
	r := tensorStream(0, "x")
	p, s := make([]byte, 1<<15), make([]byte, 1<<11)
	f := make([]float32, 1<<16)
	b.SetBytes(int64(len(p) + len(s)))
	for b.Loop() {
		for i := range f {
			f[i] = defaultDist.draw(&r)
		}
		if err := quant.EncodeMXFP4(p, s, f); err != nil {
			b.Fatal(err)
		}
	}
}
