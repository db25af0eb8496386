package quant

import "encoding/binary"

// bf16NaN is the NaN F32ToBF16 writes (torch's scalar cast).
const bf16NaN = 0x7FC0

// MXFP4ToBF16 decodes one row of MXFP4 (len(dst)/2 elements, a multiple of
// 32) to little-endian BF16 the way torch dequantizes it: code value × float32
// 2^(byte−127), one rounding to BF16 (every product is exact). A 0xFF scale
// byte is E8M0's NaN, so its 32 elements are NaN, as in torch; it returns the
// number of such groups so that a converter can refuse or report them.
func MXFP4ToBF16(dst, packed, scales []byte) (nanGroups int, err error) {
	k := len(dst) / 2
	switch {
	case len(dst)%2 != 0 || k%MXGroupSize != 0:
		return 0, errorf(errShape, "MXFP4 row of %d BF16 bytes, not 2×32·n", len(dst))
	case len(packed) < k/2:
		return 0, errorf(errShape, "MXFP4 row of %d elements has %d packed bytes, want %d", k, len(packed), k/2)
	case len(scales) < k/MXGroupSize:
		return 0, errorf(errShape, "MXFP4 row of %d elements has %d scales, want %d", k, len(scales), k/MXGroupSize)
	}
	for g := range k / MXGroupSize {
		d := dst[2*g*MXGroupSize : 2*(g+1)*MXGroupSize]
		p := packed[g*MXGroupSize/2 : (g+1)*MXGroupSize/2]
		if scales[g] == e8m0NaN {
			nanGroups++
			for i := 0; i < len(d); i += 2 {
				binary.LittleEndian.PutUint16(d[i:], bf16NaN)
			}
			continue
		}
		s := e8M0ToF32(scales[g])
		for i, b := range p {
			binary.LittleEndian.PutUint16(d[4*i:], F32ToBF16(e2m1Table[b&0xF]*s))
			binary.LittleEndian.PutUint16(d[4*i+2:], F32ToBF16(e2m1Table[b>>4]*s))
		}
	}
	return nanGroups, nil
}

// NVFP4ToBF16 decodes one row of NVFP4 (len(dst)/2 elements, a multiple of
// 16) to little-endian BF16 as ModelOpt's and vLLM's reference dequantization
// computes it in torch: the block scale widened to float32 and multiplied by
// weight_scale_2 (float32), the code value times that, one rounding to BF16.
// NaN scales (E4M3 0x7F/0xFF) give NaN elements, as in torch.
func NVFP4ToBF16(dst, packed, scales []byte, scale2 float32) error {
	k := len(dst) / 2
	switch {
	case len(dst)%2 != 0 || k%NVFP4GroupSize != 0:
		return errorf(errShape, "NVFP4 row of %d BF16 bytes, not 2×16·n", len(dst))
	case len(packed) < k/2:
		return errorf(errShape, "NVFP4 row of %d elements has %d packed bytes, want %d", k, len(packed), k/2)
	case len(scales) < k/NVFP4GroupSize:
		return errorf(errShape, "NVFP4 row of %d elements has %d scales, want %d", k, len(scales), k/NVFP4GroupSize)
	}
	for g := range k / NVFP4GroupSize {
		s := E4M3ToF32(scales[g]) * scale2
		d := dst[2*g*NVFP4GroupSize : 2*(g+1)*NVFP4GroupSize]
		p := packed[g*NVFP4GroupSize/2 : (g+1)*NVFP4GroupSize/2]
		for i, b := range p {
			binary.LittleEndian.PutUint16(d[4*i:], F32ToBF16(e2m1Table[b&0xF]*s))
			binary.LittleEndian.PutUint16(d[4*i+2:], F32ToBF16(e2m1Table[b>>4]*s))
		}
	}
	return nil
}
