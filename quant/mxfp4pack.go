package quant

import (
	"bytes"
	"encoding/binary"
	"math"
)

// PackStats counts what packing BF16 rows into MXFP4 could not keep.
type PackStats struct {
	Groups int64 // 32-element groups packed
	Lossy  int64 // groups with an MXFP4 value ≠ its BF16 value (±0 equal)
	// Saturated counts elements whose scaled magnitude exceeded 6 and was
	// clamped (the rule's scale can leave amax up to 7·2^e).
	Saturated  int64
	ZeroGroups int64 // all-zero groups (scale byte 0)
}

// Add returns the sum of two counts.
func (s PackStats) Add(t PackStats) PackStats {
	return PackStats{s.Groups + t.Groups, s.Lossy + t.Lossy, s.Saturated + t.Saturated, s.ZeroGroups + t.ZeroGroups}
}

// mxfp4ScaleByte is compressed-tensors' E8M0 scale byte for a group of BF16
// amax: generate_mx_scales(round_to_power_2(amax)); round_to_power_2 adds 1<<5
// to the bits and keeps sign and exponent E, and the byte is 127 + E − 2
// clamped to [0, 255]. ok is false when 2^E is Inf.
func mxfp4ScaleByte(amax uint16) (b uint8, ok bool) {
	r := (uint32(amax) + 1<<5) & 0xFF80
	e := int(r >> 7) // biased exponent of the power of two, 0 for zero
	if e == 0xFF {
		return 0, false
	}
	return uint8(max(e-2, 0)), true
}

// PackMXFP4Measured packs rows of k BF16 elements (k a multiple of 32) into
// MXFP4 as compressed-tensors' mxfp4-pack-quantized compressor does: scale
// byte mxfp4ScaleByte; each element divided by 2^(byte−127) in BF16, clamped
// to ±6, rounded with cast_to_fp4's thresholds, times torch.sign of the
// quotient (so a −0 quotient gives code 0). packed gets rows×k/2 bytes
// (element 2i in the low nibble), scales rows×k/32. A non-finite element or
// an overflowing scale wraps ErrNonFinite or ErrRange, naming row and group.
// Every group's error is added to es (when not nil; unchanged on error).
func PackMXFP4Measured(packed, scales, src []byte, rows, k int, es *ErrStats) (PackStats, error) {
	var st PackStats
	var acc ErrStats // es's sums continued block by block; stored on success
	if es != nil {
		acc = *es
	}
	switch {
	case k <= 0 || k%MXGroupSize != 0 || k > MaxK:
		return st, errorf(errShape, "MXFP4 rows of %d elements: K must be a positive multiple of %d (up to %d)", k, MXGroupSize, MaxK)
	case len(src) < 2*rows*k:
		return st, errorf(errShape, "%d BF16 bytes for %d rows of %d", len(src), rows, k)
	case len(packed) < rows*k/2 || len(scales) < rows*k/MXGroupSize:
		return st, errorf(errShape, "output of %d packed and %d scale bytes for %d rows of %d", len(packed), len(scales), rows, k)
	}
	var x [MXGroupSize]uint16
	for r := range rows {
		for g := range k / MXGroupSize {
			base := r*k + g*MXGroupSize
			var amax uint16
			for i := range x {
				x[i] = binary.LittleEndian.Uint16(src[2*(base+i):])
				a := x[i] & 0x7FFF
				if a >= 0x7F80 {
					return st, errorf(ErrNonFinite, "row %d, group %d (elements %d..%d): BF16 0x%04x", r, g, g*MXGroupSize, g*MXGroupSize+MXGroupSize-1, x[i])
				}
				amax = max(amax, a)
			}
			sb, ok := mxfp4ScaleByte(amax)
			if !ok {
				return st, errorf(ErrRange, "row %d, group %d: amax %g rounds to a power of two above E8M0's, which compressed-tensors' rule turns into an Inf scale", r, g, BF16ToF32(amax))
			}
			scales[r*k/MXGroupSize+g] = sb
			st.Groups++
			if amax == 0 {
				st.ZeroGroups++
			}
			s := e8M0ToF32(sb)
			lossy := false
			var b blockErr
			for i := 0; i < MXGroupSize; i += 2 {
				lo, l1, s1 := packCode(x[i], s)
				hi, l2, s2 := packCode(x[i+1], s)
				packed[(base+i)/2] = lo | hi<<4
				lossy = lossy || l1 || l2
				st.Saturated += int64(s1 + s2)
				if es != nil {
					b.add(0, float64(BF16ToF32(x[i])), float64(e2m1Table[lo]*s), lo&7 == 7)
					b.add(1, float64(BF16ToF32(x[i+1])), float64(e2m1Table[hi]*s), hi&7 == 7)
				}
			}
			if lossy {
				st.Lossy++
			}
			if es != nil {
				b.addTo(&acc, amax == 0)
			}
		}
	}
	if es != nil {
		*es = acc
	}
	return st, nil
}

// packCode is one element of PackMXFP4Measured: its E2M1 code, whether its
// value differs, and 1 if it saturated.
func packCode(x uint16, s float32) (code uint8, lossy bool, sat int) {
	v := BF16ToF32(x)
	q := BF16ToF32(F32ToBF16(v / s)) // torch divides BF16 by BF16: float32, rounded to BF16
	a := float32(math.Abs(float64(q)))
	if a > 6 {
		a, sat = 6, 1
	}
	c := e2m1Code(float64(a))
	if q < 0 { // cast_to_fp4's sign is torch.sign(q): 0 for −0
		c |= 8
	}
	return c, e2m1Table[c]*s != v, sat
}

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

// MXFP4ToBF16 decodes a row of MXFP4 (len(dst)/2 elements, a multiple of 32)
// to little-endian BF16 as torch dequantizes it: code value × float32
// 2^(byte−127) (exact), rounded to BF16. A 0xFF scale byte is E8M0's NaN and
// makes its 32 elements NaN, as in torch; it returns the number of such groups.
func MXFP4ToBF16(dst, packed, scales []byte) (nanGroups int, err error) {
	if err := fp4ToBF16("MXFP4", MXGroupSize, dst, packed, scales, e8M0ToF32); err != nil {
		return 0, err
	}
	return bytes.Count(scales[:len(dst)/2/MXGroupSize], []byte{e8m0NaN}), nil
}

// NVFP4ToBF16 decodes a row of NVFP4 (len(dst)/2 elements, a multiple of 16)
// to little-endian BF16 as ModelOpt's and vLLM's torch dequantization does:
// code value × (float32 block scale × weight_scale_2), rounded to BF16. NaN
// scales (E4M3 0x7F/0xFF) give NaN elements.
func NVFP4ToBF16(dst, packed, scales []byte, scale2 float32) error {
	return fp4ToBF16("NVFP4", NVFP4GroupSize, dst, packed, scales, func(b uint8) float32 { return E4M3ToF32(b) * scale2 })
}

// fp4ToBF16 decodes a row of E2M1 codes in groups of group elements, each
// scaled by scale of its scale byte.
func fp4ToBF16(format string, group int, dst, packed, scales []byte, scale func(uint8) float32) error {
	k := len(dst) / 2
	switch {
	case len(dst)%2 != 0 || k%group != 0:
		return errorf(errShape, "%s row of %d BF16 bytes, not 2×%d·n", format, len(dst), group)
	case len(packed) < k/2:
		return errorf(errShape, "%s row of %d elements has %d packed bytes, want %d", format, k, len(packed), k/2)
	case len(scales) < k/group:
		return errorf(errShape, "%s row of %d elements has %d scales, want %d", format, k, len(scales), k/group)
	}
	for g := range k / group {
		s, d := scale(scales[g]), dst[2*g*group:]
		for i, b := range packed[g*group/2 : (g+1)*group/2] {
			binary.LittleEndian.PutUint16(d[4*i:], F32ToBF16(e2m1Table[b&0xF]*s))
			binary.LittleEndian.PutUint16(d[4*i+2:], F32ToBF16(e2m1Table[b>>4]*s))
		}
	}
	return nil
}
