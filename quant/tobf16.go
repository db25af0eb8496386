package quant

import "encoding/binary"

// MXFP4ToBF16 decodes a row of MXFP4 (len(dst)/2 elements, a multiple of 32)
// to little-endian BF16 as torch dequantizes it: code value × float32
// 2^(byte−127) (exact), rounded to BF16. A 0xFF scale byte is E8M0's NaN and
// makes its 32 elements NaN, as in torch; it returns the number of such groups.
func MXFP4ToBF16(dst, packed, scales []byte) (nanGroups int, err error) {
	if err := fp4ToBF16("MXFP4", MXGroupSize, dst, packed, scales, e8M0ToF32); err != nil {
		return 0, err
	}
	for _, b := range scales[:len(dst)/2/MXGroupSize] {
		if b == e8m0NaN {
			nanGroups++
		}
	}
	return nanGroups, nil
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
