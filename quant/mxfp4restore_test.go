package quant

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestMXFP4RepackCountsWhatPackingChanges: MXFP4Repack counts exactly the
// groups whose bytes PackMXFP4 of the decoded values does not give back.
// Codes and scale bytes are random, and the scale bytes are often one off
// the rule's, so both kinds of change occur.
func TestMXFP4RepackCountsWhatPackingChanges(t *testing.T) {
	const k, rows = 256, 64
	r := rand.New(rand.NewPCG(1, 2))
	var changed, groups int64
	var got RepackStats
	for range rows {
		packed := make([]byte, k/2)
		scales := make([]byte, k/MXGroupSize)
		for i := range packed {
			packed[i] = byte(r.IntN(256))
			if r.IntN(4) > 0 { // fewer −0 codes, so that most groups keep their scale's fate
				packed[i] &^= 0x88
				if r.IntN(2) == 0 {
					packed[i] |= 0x80
				}
			}
		}
		for g := range scales {
			scales[g] = byte(100 + r.IntN(50))
			if g%3 == 0 { // a group whose largest code is 6 (code 7): the rule picks this byte
				packed[g*MXGroupSize/2] = packed[g*MXGroupSize/2]&0xF0 | 7
			}
		}
		bf := make([]byte, 2*k)
		if _, err := MXFP4ToBF16(bf, packed, scales); err != nil {
			t.Fatal(err)
		}
		got = got.Add(MXFP4Repack(bf, packed, scales))
		p2, s2 := make([]byte, k/2), make([]byte, k/MXGroupSize)
		if _, err := PackMXFP4(p2, s2, bf, 1, k); err != nil {
			t.Fatal(err)
		}
		for g := range scales {
			groups++
			lo, hi := g*MXGroupSize/2, (g+1)*MXGroupSize/2
			if s2[g] != scales[g] || !bytes.Equal(p2[lo:hi], packed[lo:hi]) {
				changed++
			}
		}
	}
	if got.Groups != groups || got.Changed != changed {
		t.Fatalf("counted %d of %d groups changed; packing changed %d of %d", got.Changed, got.Groups, changed, groups)
	}
	if changed == 0 || changed == groups {
		t.Fatalf("%d of %d groups changed: the test proves nothing", changed, groups)
	}
}
