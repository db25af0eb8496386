package layout

import "math"

// TODO(quant): replace with quant.PackUE8M0 / quant.UnpackUE8M0 once they land
// (CONTRACTS.md lists them); these follow SPEC §3 so the export can be tested now.

// packRowsUE8M0 packs per-row UE8M0 scales [n, kc] four exponent bytes per
// int32 along K, stored MN-major with the row stride padded to 4.
func packRowsUE8M0(v []float32, n, kc int) []int32 {
	stride := (n + 3) / 4 * 4
	out := make([]int32, (kc+3)/4*stride)
	for r := 0; r < n; r++ {
		for c := 0; c < kc; c++ {
			e := math.Float32bits(v[r*kc+c]) >> 23 & 0xFF
			out[(c/4)*stride+r] |= int32(e << (8 * (c % 4)))
		}
	}
	return out
}

// unpackRowsUE8M0 is the inverse: [n, kc] scales 2^(e−127).
func unpackRowsUE8M0(p []int32, n, kc int) []float32 {
	stride := (n + 3) / 4 * 4
	out := make([]float32, n*kc)
	for r := 0; r < n; r++ {
		for c := 0; c < kc; c++ {
			e := uint32(p[(c/4)*stride+r]) >> (8 * (c % 4)) & 0xFF
			out[r*kc+c] = math.Float32frombits(e << 23)
		}
	}
	return out
}
