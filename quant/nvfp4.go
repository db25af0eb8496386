package quant

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// NVFP4 is E2M1 codes packed like MXFP4, one FP8 E4M3FN scale per
// NVFP4GroupSize elements and one float32 weight_scale_2 per tensor: value =
// code × (scale × scale2). The MXFP4 → NVFP4 cast is Model-Optimizer's
// quantize_mxfp4_to_nvfp4_lossless, byte for byte:
//
//   - K_max is the largest e8m0 − 127 over a tensor's non-zero scale bytes
//     (0 when all are zero; w1 and w3 share the larger); scale2 = 2^(K_max − 8).
//   - A 32-block of exponent k_j with d = k_j − K_max + 8 ≥ −9 gets E4M3 scale
//     2^d and keeps every code, but −0 becomes 0.
//   - Otherwise the scale clamps to 2^-9 and each c·2^k_j is re-rounded onto
//     the E2M1 grid of step 2^(K_max − 17); a negative value rounding to zero
//     keeps its sign unless its float32 quotient underflows.
//   - For k_j ≥ 126 the float32 amax 6·2^k_j is Inf: the scale clamps to 448
//     and the codes are re-rounded against 448·2^(K_max−8).
//
// NVIDIA counts a block lossless when k_j ≥ K_max − 17 or its scale byte is 0
// (CastStats.OutOfRange is the complement); CastStats.Lossy counts the blocks
// whose values really changed.

// NVFP4GroupSize is the number of elements that share one E4M3 scale.
const NVFP4GroupSize = 16

// Exponent window of an E4M3FN power-of-two scale, and the per-tensor offset.
const (
	nvScaleKMax = 8  // 2^8 = 256 is the largest power of two in E4M3FN
	nvScaleKMin = -9 // 2^-9 is its smallest subnormal
	e8m0Bias    = 127
	maxKMax     = 0xFE - e8m0Bias // the exponent of scale byte 0xFE, the largest K_max
	e4m3Max     = 0x7E            // the E4M3FN code of 448
	hotK        = 126             // the smallest k_j whose closed-form amax 6·2^k_j is not a float32
)

// KMax accumulates K_max over the E8M0 scale bytes of one tensor, chunk by
// chunk. The zero value is ready to use.
type KMax struct {
	Value int   // K_max: the largest byte − 127 over non-zero bytes, or 0 (NVIDIA's rule)
	top   uint8 // largest byte seen
	seen  int64 // bytes seen, for error positions
}

// Add takes the next chunk of scale bytes. A NaN byte (0xFF) is an error
// wrapping ErrNonFinite naming its index; the accumulator is then unchanged.
func (m *KMax) Add(scales []byte) error {
	if i := bytes.IndexByte(scales, e8m0NaN); i >= 0 {
		return errorf(ErrNonFinite, "E8M0 scale byte %d is NaN (0xff)", m.seen+int64(i))
	}
	for _, b := range scales {
		m.top = max(m.top, b)
	}
	m.seen += int64(len(scales))
	if m.top != 0 {
		m.Value = int(m.top) - e8m0Bias
	}
	return nil
}

// CastStats counts the 32-element blocks of an MXFP4 → NVFP4 cast; the tags
// name what MarshalJSON writes.
type CastStats struct {
	// Blocks is the number of blocks cast (NVIDIA's cast_blocks_total).
	Blocks int64 `json:"blocks"`
	// OutOfRange counts blocks with a non-zero scale byte and k_j < K_max −
	// 17: NVIDIA reports Blocks − OutOfRange as lossless.
	OutOfRange int64 `json:"out_of_range"`
	// Lossy counts blocks with an NVFP4 value ≠ its MXFP4 value (±0 equal).
	Lossy int64 `json:"lossy"`
}

// MarshalJSON adds NVIDIA's lossless figure (Blocks − OutOfRange).
func (s CastStats) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"blocks":%d,"out_of_range":%d,"lossless":%d,"lossy":%d}`,
		s.Blocks, s.OutOfRange, s.Blocks-s.OutOfRange, s.Lossy), nil
}

// Add returns the sum of two counts (for w1 + w3, or a whole checkpoint).
func (s CastStats) Add(t CastStats) CastStats {
	return CastStats{s.Blocks + t.Blocks, s.OutOfRange + t.OutOfRange, s.Lossy + t.Lossy}
}

// nVFP4Cast casts the row bands of one MXFP4 tensor to NVFP4 with a K_max
// fixed up front. It is not safe for concurrent use.
type nVFP4Cast struct {
	k    int
	kmax int
	row  int64       // first row of the next band, for error positions
	sq   [256]uint16 // sumSq4 of the blocks from the last multiple of 256 on, when measured
	// Stats counts the bands cast so far.
	Stats CastStats
	// Scale2 is weight_scale_2 = 2^(K_max − 8), exact.
	Scale2 float32
	// Measure, when not nil, gets the error of every block cast (x the MXFP4
	// value, x̂ the NVFP4 one).
	Measure *ErrStats
}

// NewNVFP4Cast returns a cast for rows of k elements (a multiple of 32) and the
// tensor's (or the w1/w3 pair's) K_max, in [-126, 127] (scale bytes 0x01..0xFE).
func NewNVFP4Cast(k, kmax int) (*nVFP4Cast, error) {
	switch {
	case k <= 0 || k > MaxK || k%MXGroupSize != 0:
		return nil, errorf(errShape, "MXFP4 rows of %d elements: want a multiple of %d in [%d, %d]", k, MXGroupSize, MXGroupSize, MaxK)
	case kmax < 1-e8m0Bias || kmax > maxKMax:
		return nil, errorf(errShape, "K_max %d outside [%d, %d]", kmax, 1-e8m0Bias, maxKMax)
	}
	return &nVFP4Cast{k: k, kmax: kmax, Scale2: float32(math.Ldexp(1, kmax-nvScaleKMax))}, nil
}

// CastBand casts the next rows rows: rows×K/2 code bytes srcPacked and
// rows×K/32 E8M0 bytes srcScales into rows×K/2 NVFP4 code bytes dstPacked
// (which may be srcPacked) and rows×K/16 E4M3 bytes dstScales. A NaN scale
// byte, or one above K_max, is an error naming row and block; the outputs are
// then useless and the counts unchanged.
func (c *nVFP4Cast) CastBand(dstPacked, dstScales, srcPacked, srcScales []byte, rows int) error {
	k := c.k
	nb := k / MXGroupSize
	switch {
	case rows < 0:
		return errorf(errShape, "band of %d rows", rows)
	case len(srcPacked) < rows*k/2 || len(dstPacked) < rows*k/2:
		return errorf(errShape, "packed band has %d (source) and %d (output) bytes, want %d (%d×%d codes)", len(srcPacked), len(dstPacked), rows*k/2, rows, k)
	case len(srcScales) < rows*nb:
		return errorf(errShape, "E8M0 band has %d bytes, want %d", len(srcScales), rows*nb)
	case len(dstScales) < 2*rows*nb:
		return errorf(errShape, "E4M3 band has %d bytes, want %d", len(dstScales), 2*rows*nb)
	}
	top := uint8(c.kmax + e8m0Bias)
	for i, b := range srcScales[:rows*nb] {
		if b == e8m0NaN || b > top {
			sentinel, what := ErrNonFinite, "is NaN (0xff)"
			if b != e8m0NaN {
				sentinel, what = ErrRange, fmt.Sprintf("has exponent %d above K_max %d", int(b)-e8m0Bias, c.kmax)
			}
			return errorf(sentinel, "E8M0 scale 0x%02x of row %d, block %d (elements %d..%d) %s",
				b, c.row+int64(i/nb), i%nb, i%nb*MXGroupSize, i%nb*MXGroupSize+MXGroupSize-1, what)
		}
	}
	var st CastStats
	scale2 := c.Scale2
	for i, b := range srcScales[:rows*nb] {
		src := srcPacked[16*i : 16*i+16]
		dst := dstPacked[16*i : 16*i+16]
		if c.Measure == nil {
			c.castBlock(&st, dst, dstScales[2*i:2*i+2], src, b)
			continue
		}
		j := i % len(c.sq)
		if j == 0 { // before any of these blocks is cast: dst may be src
			sumSq4s(c.sq[:], srcPacked[16*i:16*min(i+len(c.sq), rows*nb)])
		}
		q, kj := int(c.sq[j]), int(b)-e8m0Bias
		orig := [16]byte(src)
		if c.castBlock(&st, dst, dstScales[2*i:2*i+2], src, b) {
			c.Measure.nvfp4Exact(q, kj)
		} else {
			c.Measure.nvfp4Block(&orig, dst, kj, dstScales[2*i], scale2, q == 0)
		}
	}
	st.Blocks = int64(rows * nb)
	c.Stats = c.Stats.Add(st)
	c.row += int64(rows)
	return nil
}

// castBlock casts a 32-element block of E8M0 scale byte b into dst and its
// two E4M3 scales, counting into st; it reports whether every value was kept.
func (c *nVFP4Cast) castBlock(st *CastStats, dst, scales, src []byte, b uint8) bool {
	kj := int(b) - e8m0Bias
	d := kj - c.kmax + nvScaleKMax
	if d >= nvScaleKMin {
		if kj >= hotK {
			scales[0], scales[1] = e4m3Max, e4m3Max
			if castHot(dst, src, kj, c.kmax) {
				st.Lossy++
			}
			return false
		}
		sc := pow2E4M3[d-nvScaleKMin]
		scales[0], scales[1] = sc, sc
		clearNegZero(dst, src)
		return true
	}
	scales[0], scales[1] = pow2E4M3[0], pow2E4M3[0]
	if b != 0 {
		st.OutOfRange++
	}
	t, lossy := oorTable(nvScaleKMin-d), false // elements ×2^-(−9−d)
	for i, b := range src[:16] {
		dst[i] = t.out[b]
		lossy = lossy || t.lossy[b]
	}
	if lossy {
		st.Lossy++
	}
	return false
}

// clearNegZero copies 16 code bytes, turning every −0 nibble (0x8) into 0x0.
func clearNegZero(dst, src []byte) {
	for o := 0; o < 16; o += 8 {
		w := binary.LittleEndian.Uint64(src[o:])
		sign := w & 0x8888888888888888
		// bit 3 of a nibble of low is set where the magnitude bits are non-zero
		low := ((w & 0x7777777777777777) + 0x7777777777777777) & 0x8888888888888888
		binary.LittleEndian.PutUint64(dst[o:], w&^(sign&^low))
	}
}

// byteTable maps a byte of two codes to its re-encoded byte and whether a
// value changed.
type byteTable struct {
	out   [256]uint8
	lossy [256]bool
}

// pow2E4M3[d+9] is the E4M3FN code of 2^d for d in [-9, 8].
var pow2E4M3 = func() (t [nvScaleKMax - nvScaleKMin + 1]uint8) {
	for i := range t {
		t[i] = e4m3Select(float32(math.Ldexp(1, i+nvScaleKMin)))
	}
	return t
}()

// oorTables re-round codes scaled by 2^-s as NVIDIA's _cast_fp4 does with the
// float32 quotient (its sign lost once that underflows to −0); shifts giving
// the same bytes share a table.
var oorTables = func() (t [10]byteTable) {
	for i, s := range [10]int{1, 2, 3, 4, 5, 149, 150, 151, 152, 153} {
		for b := range 256 {
			lo, llo := nvRecode(uint8(b)&0xF, s)
			hi, lhi := nvRecode(uint8(b)>>4, s)
			t[i].out[b] = lo | hi<<4
			t[i].lossy[b] = llo || lhi
		}
	}
	return t
}()

// oorTable returns the table for shift s ≥ 1: from 5 on every magnitude
// (at most 6·2^-5 < 0.25) rounds to zero, and the quotient is a non-zero
// float32 (keeping the sign) for every code up to 148 and for none from 153 on.
func oorTable(s int) *byteTable {
	switch {
	case s <= 5:
		return &oorTables[s-1]
	case s < 149:
		return &oorTables[4]
	default:
		return &oorTables[min(s, 153)-149+5]
	}
}

// nvRecode re-rounds code c scaled by 2^-s and reports whether its value changed.
func nvRecode(c uint8, s int) (uint8, bool) {
	v := math.Ldexp(float64(e2m1Values[c&7]), -s)
	x := float32(v) // the float32 quotient, rounded (to a subnormal or 0)
	out := e2m1Code(float64(x))
	lossy := float64(e2m1Values[out]) != v
	if c&8 != 0 && x != 0 {
		out |= 8
	}
	return out, lossy
}

// castHot casts a block with k_j ≥ hotK as NVIDIA does: E4M3 scale 448, and
// each c·2^k_j in float32 (Inf from 2^128 up) divided by 448·2^(K_max−8)
// (exact in float32) and re-rounded. It reports whether a value changed.
func castHot(dst, src []byte, kj, kmax int) bool {
	p := float32(math.Ldexp(1, kj)) // 2^126 or 2^127: a float32
	s := float32(maxE4M3) * float32(math.Ldexp(1, kmax-nvScaleKMax))
	lossy := false
	for i, b := range src[:16] {
		var out uint8
		for h := range 2 {
			c := b >> (4 * h) & 0xF
			x := float32(e2m1Values[c&7]*p) / s
			m := e2m1Code(float64(x)) // +Inf saturates to 7
			o := m
			if c&8 != 0 && c&7 != 0 {
				o |= 8
			}
			lossy = lossy || float64(e2m1Values[m])*float64(s) != math.Ldexp(float64(e2m1Values[c&7]), kj)
			out |= o << (4 * h)
		}
		dst[i] = out
	}
	return lossy
}

// nvE2M1 is the value table NVIDIA's NVFP4 dequantization indexes: code 8 is +0.
var nvE2M1 = func() [16]float32 {
	t := e2m1Table
	t[8] = 0
	return t
}()
