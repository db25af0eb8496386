package quant

import "math"

// UE8M0 scales for DeepGEMM on SM100 (transform_sf_into_required_layout,
// get_mn_major_tma_aligned_packed_ue8m0_tensor): the [⌈N/128⌉, ⌈K/128⌉] block
// scales are broadcast to one row per output row, whose exponent bytes are
// packed four per int32 along K (byte j of word p is column block 4p+j;
// missing slots 0), stored MN-major with the MN stride padded to a multiple
// of 4 (the TMA alignment).
const ue8m0PerWord = 4

// PackedUE8M0Shape returns the storage shape of the packed scales of an N×K
// weight: words = ⌈⌈K/128⌉/4⌉ rows of stride = align(N, 4) int32.
func PackedUE8M0Shape(n, k int) (words, stride int) {
	return (numBlocks(k) + ue8m0PerWord - 1) / ue8m0PerWord, (n + 3) &^ 3
}

func checkMatrix(n, k int) error {
	if n <= 0 || n > MaxK || k <= 0 || k > MaxK {
		return errorf(errShape, "matrix %d×%d outside [1, %d]²", n, k, MaxK)
	}
	return nil
}

// PackUE8M0 packs the block scales [⌈N/128⌉, ⌈K/128⌉] (row-major, each a
// power of two) of an N×K weight into DeepGEMM's SM100 layout (see
// PackedUE8M0Shape). The padding rows N..align(N, 4) are zero.
func PackUE8M0(scales []float32, n, k int) ([]int32, error) {
	if err := checkMatrix(n, k); err != nil {
		return nil, err
	}
	nb, kb := numBlocks(n), numBlocks(k)
	if len(scales) != nb*kb {
		return nil, errorf(errShape, "%d scales for a %d×%d weight, want %d×%d", len(scales), n, k, nb, kb)
	}
	words, stride := PackedUE8M0Shape(n, k)
	out := make([]int32, words*stride)
	row := make([]int32, words)
	for b := range nb {
		clear(row)
		for j := range kb {
			// A power of two or zero: no sign or mantissa, exponent not 0xFF.
			s := math.Float32bits(scales[b*kb+j])
			if s&0x807FFFFF != 0 || s>>23 == 0xFF {
				return nil, errorf(errNotUE8M0, "scale (%d, %d) = %g (bits 0x%08x)", b, j, scales[b*kb+j], s)
			}
			row[j/ue8m0PerWord] |= int32(s >> 23 << (8 * (j % ue8m0PerWord)))
		}
		for p, w := range row {
			seg := out[p*stride+b*BlockSize : p*stride+min(b*BlockSize+BlockSize, n)]
			for i := range seg {
				seg[i] = w
			}
		}
	}
	return out, nil
}

// UnpackUE8M0 is the inverse of PackUE8M0. Every row of a 128-row block must
// carry the same words and unused K slots must be zero (else errInconsistent);
// an exponent byte 0xFF wraps ErrNonFinite. The padding rows are not read:
// DeepGEMM's CUDA packer leaves them unwritten.
func UnpackUE8M0(packed []int32, n, k int) ([]float32, error) {
	if err := checkMatrix(n, k); err != nil {
		return nil, err
	}
	words, stride := PackedUE8M0Shape(n, k)
	if len(packed) != words*stride {
		return nil, errorf(errShape, "packed UE8M0 scales of a %d×%d weight have %d int32, want %d×%d", n, k, len(packed), words, stride)
	}
	nb, kb := numBlocks(n), numBlocks(k)
	out := make([]float32, nb*kb)
	for b := range nb {
		r0, r1 := b*BlockSize, min(b*BlockSize+BlockSize, n)
		for p := range words {
			w := uint32(packed[p*stride+r0])
			for r := r0 + 1; r < r1; r++ {
				if v := uint32(packed[p*stride+r]); v != w {
					return nil, errorf(errInconsistent, "row %d word %d = 0x%08x, but row %d of the same 128-row block has 0x%08x", r, p, v, r0, w)
				}
			}
			for j := range ue8m0PerWord {
				col, e := p*ue8m0PerWord+j, uint8(w>>(8*j))
				switch {
				case col >= kb && e != 0:
					return nil, errorf(errInconsistent, "row %d word %d = 0x%08x: slot %d is past the %d column blocks but not zero", r0, p, w, j, kb)
				case col >= kb:
				case e == e8m0NaN:
					return nil, errorf(ErrNonFinite, "scale (%d, %d) has exponent byte 0xff", b, col)
				default:
					out[b*kb+col] = math.Float32frombits(uint32(e) << 23)
				}
			}
		}
	}
	return out, nil
}
