package quant

import (
	"encoding/binary"
	"math"
)

// ErrStats is the error of a quantization against its source, summed in
// float64 over the elements of a tensor (or of many, with Add): x is the
// source value, x̂ the output as engines dequantize it (FP8: code × scale;
// MXFP4: code × 2^(e−127); NVFP4: code × float32(E4M3 scale ×
// weight_scale_2)). An element whose x̂ is NaN counts in NaN and in no sum.
//
// Sums are taken in a fixed order (element j of a row in lane j%8 for BF16 →
// FP8, else j%2; lanes added at the block's end; blocks in row-major order),
// so a tensor gives the same bits whatever the threading and kernels; Add in
// a fixed order too.
type ErrStats struct {
	// Blocks counts scale blocks: 128×128 FP8 tiles, 32-element MXFP4
	// groups, or the 32-element source blocks of the MXFP4 → NVFP4 cast.
	Blocks int64 `json:"blocks"`
	// LossyBlocks counts blocks with an x̂ ≠ x (±0 equal; NaN differs).
	LossyBlocks int64 `json:"lossy_blocks"`
	ZeroTiles   int64 `json:"zero_tiles"` // blocks of ±0 sources only
	// Saturated counts elements clipped to the format's largest magnitude
	// (448 for E4M3, 6 for E2M1): x̂ is that magnitude and |x| > |x̂|.
	Saturated int64   `json:"saturated"`
	NaN       int64   `json:"nan"`           // elements whose x̂ is NaN (ModelOpt's zero-scale tiles)
	MaxAbs    float64 `json:"max_abs_error"` // max |x − x̂|
	SumSq     float64 `json:"sum_sq"`        // Σx²
	SumSqErr  float64 `json:"sum_sq_error"`  // Σ(x − x̂)²
}

// Add adds t's counts and sums to s (s's sums first).
func (s *ErrStats) Add(t ErrStats) {
	s.Blocks += t.Blocks
	s.LossyBlocks += t.LossyBlocks
	s.ZeroTiles += t.ZeroTiles
	s.Saturated += t.Saturated
	s.NaN += t.NaN
	s.MaxAbs = max(s.MaxAbs, t.MaxAbs)
	s.SumSq += t.SumSq
	s.SumSqErr += t.SumSqErr
}

// blockErr is one block's partial sums in two lanes (even and odd elements
// of a row), so that neighbours' adds do not wait on each other.
type blockErr struct {
	sx0, sx1, se0, se1 float64
	maxBits            uint64 // of |x − x̂|: non-negative floats order like their bits
	sat, nan           int64
}

// addTo closes the block into s: the lanes are added (even lane first).
func (b *blockErr) addTo(s *ErrStats, zero bool) {
	s.Blocks++
	if zero {
		s.ZeroTiles++
	}
	if b.maxBits != 0 || b.nan > 0 {
		s.LossyBlocks++
	}
	s.Saturated += b.sat
	s.NaN += b.nan
	s.MaxAbs = max(s.MaxAbs, math.Float64frombits(b.maxBits))
	s.SumSq += b.sx0 + b.sx1
	s.SumSqErr += b.se0 + b.se1
}

// fp8Block adds one FP8 block of rows×cols codes (stride cstride) of sources
// src (stride sstride bytes) with scale sf; zero says the block's amax is 0.
func (s *ErrStats) fp8Block(in Elem, codes []byte, cstride int, src []byte, sstride, rows, cols int, sf float32, zero bool) {
	var b blockErr
	for r := range rows {
		row := src[r*sstride:]
		for i, code := range codes[r*cstride : r*cstride+cols] { // with a finite sf, x̂ is NaN exactly for NaN codes
			x := float64(in.widen(in.bits(row, i)))
			b.add(i%2, x, float64(float32(e4m3Table[code]*sf)), code&0x7F == 0x7E)
		}
	}
	b.addTo(s, zero)
}

// encodeFP8 encodes a window of BF16 sources (with modelOpt, as
// encodeModelOpt) and adds its error as encode then fp8Block would, reading
// each source once where the vector kernel runs. sf must satisfy lanesExact.
func (s *ErrStats) encodeFP8(codes []byte, cstride int, src []byte, sstride, rows, cols int, sf, amax float32, zero, modelOpt bool) {
	var l laneSums
	inv := 1 / sf
	encodeErr(&l, codes, cstride, src, sstride, rows, cols, inv, sf, satTop(sf, amax), modelOpt)
	// Codes grow with |x|, so a NaN code (whose lane sums are a stand-in)
	// shows in amax's.
	top := e4m3Select(amax * inv)
	if modelOpt {
		top = bf16ToE4M3()[F32ToBF16(amax*inv)]
	}
	if top&0x7F != 0x7F {
		l.addTo(s, zero)
		return
	}
	s.fp8Block(BF16, codes, cstride, src, sstride, rows, cols, sf, zero)
}

// lanesExact says whether the window kernels' float32 e = |x| − |x̂| is exact
// at scale sf (|x| ≤ 1.5·|x̂| or x̂ = 0, and x̂ normal).
func lanesExact(sf float32) bool { return sf >= 0x1p-100 && sf <= 0x1p100 }

// satTop is the |x| above which a window kernel counts an element saturated
// (code 448's value), +Inf when amax is not above it.
func satTop(sf, amax float32) float32 {
	top := float32(e4m3Table[0x7E] * sf)
	if amax <= top {
		return float32(math.Inf(1))
	}
	return top
}

// addTo closes a window's lanes into s as one block.
func (l *laneSums) addTo(s *ErrStats, zero bool) {
	b := blockErr{sx0: l.sx.sum(), se0: l.se.sum()}
	m := l.m[0]
	for k, v := range l.sat {
		m = max(m, l.m[k])
		b.sat += int64(v)
	}
	b.maxBits = math.Float64bits(float64(m))
	b.addTo(s, zero)
}

// laneSums are a window's partial sums in eight lanes (element j of a row in
// lane j%8), laid out as the vector kernels use them.
type laneSums struct {
	sx, se lanes      // Σx², Σ(x−x̂)²
	m      [8]float32 // max|x−x̂|
	sat    [8]int32   // elements with |x| above top
}

type lanes [8]float64

// sum adds the lanes pairwise: ((0+1)+(2+3))+((4+5)+(6+7)).
func (l *lanes) sum() float64 {
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

// errWindowGo adds columns [from, to) of a window of FP8 codes (scale sf) and
// their BF16 sources to the lanes as the vector kernels do: e = |x| − |x̂| in
// float32, squared in float64 (exactly, so an FMA gives the same sum).
func errWindowGo(l *laneSums, codes []byte, cstride int, src []byte, sstride, rows, from, to int, sf, top float32) {
	for r := range rows {
		c := codes[r*cstride+from : r*cstride+to]
		x16 := src[r*sstride+2*from : r*sstride+2*to]
		for j, code := range c {
			k := (from + j) & 7
			code &= 0x7F
			xh := float32(e4m3Table[code] * sf)
			x := BF16ToF32(binary.LittleEndian.Uint16(x16[2*j:]) & 0x7FFF)
			if x > top {
				l.sat[k]++
			}
			e := float32(x - xh)
			l.m[k] = max(l.m[k], float32(math.Abs(float64(e))))
			l.sx[k] += float64(float64(x) * float64(x))
			l.se[k] += float64(float64(e) * float64(e))
		}
	}
}

// e2m1Sq4 is the integer 4·(v_lo² + v_hi²) of a byte's two E2M1 codes: a
// block's sumSq4 (over its 16 bytes, ≤ 4608) gives Σx² = sumSq4·2^(2·kj−2).
var e2m1Sq4 = func() (t [256]uint16) {
	for b := range t {
		lo, hi := e2m1Values[b&7], e2m1Values[b>>4&7]
		t[b] = uint16(4*lo*lo + 4*hi*hi)
	}
	return t
}()

// sumSq4sGo writes sumSq4 of each 16-byte block of src to dst.
func sumSq4sGo(dst []uint16, src []byte) {
	for i := range len(src) / 16 {
		q := 0
		for _, v := range src[16*i : 16*i+16] {
			q += int(e2m1Sq4[v])
		}
		dst[i] = uint16(q)
	}
}

// nvfp4Exact adds a 32-element block of the MXFP4 → NVFP4 cast that kept
// every value (exponent kj, sumSq4 q), as blockErr.addTo with zero errors.
func (s *ErrStats) nvfp4Exact(q, kj int) {
	s.Blocks++
	if q == 0 {
		s.ZeroTiles++
		return
	}
	s.SumSq += float64(q) * pow2(2*kj-2)
}

// nvfp4Block adds a 32-element block of the MXFP4 → NVFP4 cast that changed
// values: src the MXFP4 codes (exponent kj), dst the NVFP4 ones (E4M3 scale
// e4); zero says every source code is ±0.
func (s *ErrStats) nvfp4Block(src *[16]byte, dst []byte, kj int, e4 uint8, scale2 float32, zero bool) {
	var b blockErr
	sc := float32(E4M3ToF32(e4) * scale2)
	p := pow2(kj) // x = code value × 2^kj, exact in float64
	for i, v := range src {
		w := dst[i]
		for h := range 2 {
			cx, cy := v>>(4*h)&0xF, w>>(4*h)&0xF
			b.add(h, float64(e2m1Table[cx])*p, float64(nvE2M1[cy]*sc), cy&7 == 7)
		}
	}
	b.addTo(s, zero)
}

// pow2 is 2^e for e in the normal float64 range.
func pow2(e int) float64 { return math.Float64frombits(uint64(1023+e) << 52) }

// add adds source x and output y to lane l; top says y has the format's
// largest magnitude.
func (b *blockErr) add(l int, x, y float64, top bool) {
	if y != y {
		b.nan++
		return
	}
	if top && math.Abs(x) > math.Abs(y) {
		b.sat++
	}
	d := x - y
	if l == 0 { // products converted: never fused into an FMA
		b.sx0 += float64(x * x)
		b.se0 += float64(d * d)
	} else {
		b.sx1 += float64(x * x)
		b.se1 += float64(d * d)
	}
	b.maxBits = max(b.maxBits, math.Float64bits(math.Abs(d)))
}
