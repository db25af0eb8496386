package quant

import "encoding/binary"

// region is one rectangle of a golden input matrix, filled by the generator
// that gen_goldens.py implements identically (see its docstring).
type region struct {
	R0, R1, C0, C1 int
	Seed           uint64
	ELo, EHi       uint32 // biased exponent range [ELo, EHi]
}

const splitmixGamma = 0x9E3779B97F4A7C15

func splitmix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// genFill writes region g of a row-major matrix with k columns: element at
// (r, c) is drawn from counter i = (r-R0)*(C1-C0) + (c-C0).
func genFill(dst []byte, e Elem, k int, g region) {
	w := g.C1 - g.C0
	span := uint64(g.EHi - g.ELo + 1)
	for r := g.R0; r < g.R1; r++ {
		for c := g.C0; c < g.C1; c++ {
			i := uint64((r-g.R0)*w + (c - g.C0))
			u := splitmix(g.Seed + (i+1)*splitmixGamma)
			sign := uint32(u >> 63)
			exp := g.ELo + uint32((u&0xFFFFFFFF)%span)
			man := uint32(u >> 32)
			p := r*k + c
			switch e {
			case BF16:
				binary.LittleEndian.PutUint16(dst[2*p:], uint16(sign<<15|exp<<7|man&0x7F))
			case F16:
				binary.LittleEndian.PutUint16(dst[2*p:], uint16(sign<<15|exp<<10|man&0x3FF))
			case F32:
				binary.LittleEndian.PutUint32(dst[4*p:], sign<<31|exp<<23|man&0x7FFFFF)
			}
		}
	}
}
