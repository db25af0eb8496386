package quant

import "encoding/binary"

// RepackStats counts the 32-element groups of MXFP4 decoded to BF16, and
// those PackMXFP4Measured would not give back (another scale byte than
// compressed-tensors' rule, or a −0 code).
type RepackStats struct {
	Groups, Changed int64
}

// Add returns the sum of two counts.
func (s RepackStats) Add(t RepackStats) RepackStats {
	return RepackStats{s.Groups + t.Groups, s.Changed + t.Changed}
}

// MXFP4Repack counts the groups of a row that MXFP4ToBF16 decoded from
// packed and scales into bf16, and those whose bytes would not come back.
func MXFP4Repack(bf16, packed, scales []byte) RepackStats {
	k := min(len(bf16)/2, 2*len(packed), MXGroupSize*len(scales)) / MXGroupSize * MXGroupSize
	st := RepackStats{Groups: int64(k / MXGroupSize)}
	for g := range k / MXGroupSize {
		var amax uint16
		for i := range MXGroupSize {
			amax = max(amax, binary.LittleEndian.Uint16(bf16[2*(g*MXGroupSize+i):])&0x7FFF)
		}
		b, ok := mxfp4ScaleByte(amax)
		changed := !ok || b != scales[g]
		for _, c := range packed[g*MXGroupSize/2 : (g+1)*MXGroupSize/2] {
			changed = changed || c&0xF == 8 || c>>4 == 8
		}
		if changed {
			st.Changed++
		}
	}
	return st
}
