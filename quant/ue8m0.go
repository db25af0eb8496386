package quant

import (
	"fmt"
	"math"
)

// UE8M0 scales for DeepGEMM on SM100 (transform_sf_into_required_layout and
// get_mn_major_tma_aligned_packed_ue8m0_tensor): a 128×128 block scale grid
// [⌈N/128⌉, ⌈K/128⌉] is broadcast to one row per output row [N, ⌈K/128⌉]; the
// exponent bytes of each row are packed four per int32 along K (byte j of word
// p is the scale of column block 4p+j, little-endian; missing slots are 0);
// the int32 matrix [N, ⌈⌈K/128⌉/4⌉] is stored MN-major, its MN stride padded
// to a multiple of 4 (16 bytes, the TMA alignment). The buffer these functions
// use is that storage: ⌈⌈K/128⌉/4⌉ rows of align(N, 4) words.

// ue8m0PerWord is the number of exponent bytes packed into one int32.
const ue8m0PerWord = 4

// PackedUE8M0Shape returns the storage shape of the packed scales of an N×K
// weight: words = ⌈⌈K/128⌉/4⌉ rows of stride = align(N, 4) int32.
func PackedUE8M0Shape(n, k int) (words, stride int) {
	return (NumBlocks(k) + ue8m0PerWord - 1) / ue8m0PerWord, (n + 3) &^ 3
}

func checkMatrix(n, k int) error {
	if n <= 0 || n > MaxK || k <= 0 || k > MaxK {
		return errorf(errShape, "matrix %d×%d outside [1, %d]²", n, k, MaxK)
	}
	return nil
}

// ue8m0Byte returns the exponent byte of a UE8M0 scale: a non-negative power
// of two (or zero) whose float32 mantissa and sign are 0 and exponent not 0xFF.
func ue8m0Byte(s float32) (uint8, bool) {
	b := math.Float32bits(s)
	return uint8(b >> 23), b&0x807FFFFF == 0 && b>>23 != 0xFF
}

// PackUE8M0 packs the block scales [⌈N/128⌉, ⌈K/128⌉] (row-major, each a
// power of two such as CeilUE8M0 makes) of an N×K weight into DeepGEMM's SM100
// layout (see PackedUE8M0Shape). The padding rows N..align(N, 4) are zero.
func PackUE8M0(scales []float32, n, k int) ([]int32, error) {
	if err := checkMatrix(n, k); err != nil {
		return nil, err
	}
	nb, kb := NumBlocks(n), NumBlocks(k)
	if len(scales) != nb*kb {
		return nil, errorf(errShape, "%d scales for a %d×%d weight, want %d×%d", len(scales), n, k, nb, kb)
	}
	words, stride := PackedUE8M0Shape(n, k)
	out := make([]int32, words*stride)
	row := make([]int32, words)
	for b := range nb {
		clear(row)
		for j := range kb {
			s := scales[b*kb+j]
			e, ok := ue8m0Byte(s)
			if !ok {
				return nil, errorf(ErrNotUE8M0, "scale (%d, %d) = %g (bits 0x%08x)", b, j, s, math.Float32bits(s))
			}
			row[j/ue8m0PerWord] |= int32(uint32(e) << (8 * (j % ue8m0PerWord)))
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

// UnpackUE8M0 is the inverse of PackUE8M0: it returns the block scales
// [⌈N/128⌉, ⌈K/128⌉] (exponent byte << 23 as float32). Every row of a 128-row
// block must carry the same words and unused K slots must be zero, else the
// buffer does not come from a block scale and the error wraps errInconsistent;
// an exponent byte 0xFF (E8M0 NaN) wraps ErrNonFinite. The padding rows are
// not read: DeepGEMM's CUDA packer leaves them unwritten.
func UnpackUE8M0(packed []int32, n, k int) ([]float32, error) {
	if err := checkMatrix(n, k); err != nil {
		return nil, err
	}
	words, stride := PackedUE8M0Shape(n, k)
	if len(packed) != words*stride {
		return nil, errorf(errShape, "packed UE8M0 scales of a %d×%d weight have %d int32, want %d×%d", n, k, len(packed), words, stride)
	}
	nb, kb := NumBlocks(n), NumBlocks(k)
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
				case e == E8M0NaN:
					return nil, errorf(ErrNonFinite, "scale (%d, %d) has exponent byte 0xff", b, col)
				default:
					out[b*kb+col] = math.Float32frombits(uint32(e) << 23)
				}
			}
		}
	}
	return out, nil
}

// GatherHeadsUE8M0 rebuilds the packed scales of a whole N×K weight from the
// packed scales of its row slices (rowsPerPart[i] rows each, in order; the
// DCP replicated-Q case: each rank holds its heads' rows of q_b_proj and every
// rank needs all of them). Concatenating packed buffers would interleave
// their padding and MN strides, so each part is unpacked (and checked), the
// block scales are gathered, and the whole is packed again; the result equals
// packing the full matrix's scales directly. Parts whose boundaries do not
// fall on multiples of 128 rows work only where the 128-row blocks of the
// whole they straddle get the same scales from each side (errInconsistent
// otherwise).
func GatherHeadsUE8M0(parts [][]int32, rowsPerPart []int, k int) ([]int32, error) {
	if len(parts) == 0 || len(parts) != len(rowsPerPart) {
		return nil, errorf(errShape, "%d parts with %d row counts", len(parts), len(rowsPerPart))
	}
	n := 0
	for i, r := range rowsPerPart {
		if r <= 0 || r > MaxK-n {
			return nil, errorf(errShape, "part %d has %d rows (after %d rows; at most %d in all)", i, r, n, MaxK)
		}
		n += r
	}
	if err := checkMatrix(n, k); err != nil {
		return nil, err
	}
	kb := NumBlocks(k)
	full := make([]float32, NumBlocks(n)*kb)
	set := make([]bool, NumBlocks(n)) // whole block row already taken from some part
	first := 0                        // first row of the current part in the whole
	for i, p := range parts {
		rows := rowsPerPart[i]
		s, err := UnpackUE8M0(p, rows, k)
		if err != nil {
			return nil, fmt.Errorf("part %d (rows %d..%d): %w", i, first, first+rows-1, err)
		}
		// Walk the part in runs of rows that share both a part block and a
		// whole block.
		for r := 0; r < rows; {
			pb, fb := r/BlockSize, (first+r)/BlockSize
			run := min(BlockSize-r%BlockSize, BlockSize-(first+r)%BlockSize, rows-r)
			src, dst := s[pb*kb:(pb+1)*kb], full[fb*kb:(fb+1)*kb]
			if !set[fb] {
				copy(dst, src)
				set[fb] = true
			} else {
				for j := range kb {
					if math.Float32bits(dst[j]) != math.Float32bits(src[j]) {
						return nil, errorf(errInconsistent, "rows %d..%d (part %d) and other rows of 128-row block %d have different scales in column block %d (%g vs %g): parts not split on 128-row boundaries must agree there",
							first+r, first+r+run-1, i, fb, j, src[j], dst[j])
					}
				}
			}
			r += run
		}
		first += rows
	}
	return PackUE8M0(full, n, k)
}
