package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/x448/float16"
)

// BlockSize is the edge of a 128×128 block-FP8 scale block and the most rows
// of a band.
const BlockSize = 128

// MaxK is the widest row accepted: far above any K3 matrix, low enough that a
// corrupt header's shape cannot make it allocate without bound.
const MaxK = 1 << 24

const (
	amaxFloor  float32 = 1e-4          // DeepGEMM's clamp of amax, so a zero block gets a non-zero scale
	invMaxE4M3 float32 = 1.0 / maxE4M3 // DeepGEMM's scale is amax times this on CUDA
)

// ScaleFmt is the form of the per-block scale.
type ScaleFmt uint8

const (
	// ScaleFP32 is sf = amax/448 as a float32 (DeepSeek-V3 weight_scale_inv).
	ScaleFP32 ScaleFmt = iota
	// ScaleUE8M0 is amax/448 rounded up to a power of two (ceil_to_ue8m0), as
	// DeepGEMM on SM100 requires; stored as a float32.
	ScaleUE8M0
)

var scaleFmtNames = [...]string{ScaleFP32: "fp32", ScaleUE8M0: "ue8m0"}

// String returns the name used in configs ("fp32" or "ue8m0").
func (f ScaleFmt) String() string {
	if int(f) >= len(scaleFmtNames) {
		return fmt.Sprintf("ScaleFmt(%d)", uint8(f))
	}
	return scaleFmtNames[f]
}

// numBlocks returns ⌈n/128⌉.
func numBlocks(n int) int { return (n + BlockSize - 1) / BlockSize }

// Quantizer block-quantizes bands of an N×K matrix to FP8 E4M3FN as DeepGEMM's
// per_block_cast_to_fp8 does. It is not safe for concurrent use.
type Quantizer struct {
	k   int
	in  Elem
	fmt ScaleFmt
	// cpuDiv rounds sf = amax/448 as torch on CPU (the correctly rounded
	// quotient), not as its CUDA kernel for a tensor divided by a Python
	// scalar (times float32(1/448)), the default since DeepGEMM runs on GPUs.
	cpuDiv bool
	err    error // set by NewQuantizer for arguments out of range
	nkb    int   // ⌈K/128⌉
	band   int   // the next band of the tests' quantizeNext
	// Numerics chooses whose quantizer it reproduces.
	Numerics Numerics
	// ZeroScaleBlocks counts the blocks given a zero scale (and NaN codes)
	// under ModelOpt numerics.
	ZeroScaleBlocks int64
	// Measure, when not nil, gets the error of every band quantized.
	Measure *ErrStats
}

// NewQuantizer returns a quantizer for rows of k elements of format in. Bad
// arguments are reported by the first QuantizeBandAt call.
func NewQuantizer(k int, in Elem, fmt ScaleFmt) *Quantizer {
	q := &Quantizer{k: k, in: in, fmt: fmt}
	switch {
	case k <= 0 || k > MaxK:
		q.err = errorf(errShape, "K = %d outside [1, %d]", k, MaxK)
	case !in.valid():
		q.err = errorf(errShape, "unsupported source format %s", in.name())
	case int(fmt) >= len(scaleFmtNames):
		q.err = errorf(errShape, "unsupported scale format %v", fmt)
	default:
		q.nkb = numBlocks(k)
	}
	return q
}

// QuantizeBandAt quantizes band number band: rows (1..128) rows of K
// little-endian source elements in src into rows×K FP8 bytes in dst and
// ⌈K/128⌉ block scales (dequant = fp8 × scale); a partial block gets the amax
// of its real elements. A refused block is a *BlockError (the band's first
// non-finite element, or a scale at which the block overflows), and dst is
// then useless.
func (q *Quantizer) QuantizeBandAt(band int, dst []byte, scales []float32, src []byte, rows int) (err error) {
	if m := q.Measure; m != nil {
		saved := *m
		defer func() {
			if err != nil {
				*m = saved
			}
		}()
	}
	if q.err != nil {
		return q.err
	}
	if err := q.numericsErr(); err != nil {
		return err
	}
	k, nkb, size := q.k, q.nkb, q.in.Size()
	switch {
	case rows < 1 || rows > BlockSize:
		return errorf(errShape, "band of %d rows, want 1..%d", rows, BlockSize)
	case len(src) < rows*k*size:
		return errorf(errShape, "source band has %d bytes, want %d (%d×%d %s)", len(src), rows*k*size, rows, k, q.in.name())
	case len(dst) < rows*k:
		return errorf(errShape, "FP8 band has %d bytes, want %d", len(dst), rows*k)
	case len(scales) < nkb:
		return errorf(errShape, "%d scales, want %d", len(scales), nkb)
	}
	// Block by block, so the encoding pass finds its rows still in cache.
	for kb := range nkb {
		c0, c1 := kb*BlockSize, min(kb*BlockSize+BlockSize, k)
		m := q.amaxBits(src, rows, c0, c1)
		if m >= elemFacts[q.in].inf {
			return q.nonFinite(band, src, rows, kb, c0, c1)
		}
		mo := q.Numerics == ModelOpt // a BF16 source (numericsErr)
		amax := q.in.widen(m)
		var sf float32
		if mo {
			if sf = modelOptScale(uint16(m)); sf == 0 {
				q.ZeroScaleBlocks++
			}
		} else if sf = q.scale(amax); math.IsInf(float64(E4M3ToF32(e4m3Select(amax*(1/sf)))*sf), 0) {
			return &BlockError{Err: ErrRange, Elem: q.in, Bits: m, Band: band, ColBlock: kb, Scale: sf}
		}
		scales[kb] = sf
		d, s := dst[c0:], src[size*c0:]
		if q.Measure != nil && q.in == BF16 && lanesExact(sf) {
			q.Measure.encodeFP8(d, k, s, 2*k, rows, c1-c0, sf, amax, m == 0, mo)
			continue
		}
		encodeWindow(q.in, d, k, s, size*k, rows, c1-c0, 1/sf, sf, mo)
		if q.Measure != nil {
			q.Measure.fp8Block(q.in, d, k, s, size*k, rows, c1-c0, sf, m == 0)
		}
	}
	return nil
}

// scale turns a block's amax into its scale: clamp, divide by 448, and for
// UE8M0 round up to a power of two.
func (q *Quantizer) scale(amax float32) float32 {
	amax = max(amax, amaxFloor)
	sf := amax * invMaxE4M3
	if q.cpuDiv {
		sf = amax / maxE4M3
	}
	if q.fmt == ScaleUE8M0 {
		sf = ceilUE8M0(sf)
	}
	return sf
}

// amaxBits returns the largest magnitude bit pattern of columns [c0, c1) of
// the band (magnitude bits order like magnitudes; Inf and NaN are above all).
func (q *Quantizer) amaxBits(src []byte, rows, c0, c1 int) uint32 {
	if q.in == F32 {
		return amax32(src[4*c0:], 4*q.k, rows, c1-c0)
	}
	return uint32(amax16(src[2*c0:], 2*q.k, rows, c1-c0))
}

// nonFinite reports the first non-finite element of column block kb.
func (q *Quantizer) nonFinite(band int, src []byte, rows, kb, c0, c1 int) error {
	inf, size := elemFacts[q.in].inf, q.in.Size()
	for r := range rows {
		for c := c0; c < c1; c++ {
			bits := q.in.bits(src, r*q.k+c)
			if bits&^(1<<(8*size-1)) >= inf { // the magnitude
				return &BlockError{Err: ErrNonFinite, Elem: q.in, Bits: bits, Band: band, Row: band*BlockSize + r, ColBlock: kb, Col: c}
			}
		}
	}
	return errorf(ErrNonFinite, "row band %d, column block %d", band, kb) // unreachable: amax saw one
}

// DequantizeBandBF16 widens a band of rows×k FP8 E4M3FN bytes times their
// column block's scale (⌈k/128⌉ scales) into rows×k little-endian BF16.
func DequantizeBandBF16(dst []byte, src []byte, scales []float32, rows, k int) error {
	if err := checkDequant(len(dst)/2, src, scales, rows, k); err != nil {
		return err
	}
	for r := range rows {
		out := dst[2*r*k:]
		for c, b := range src[r*k : (r+1)*k] {
			binary.LittleEndian.PutUint16(out[2*c:], F32ToBF16(e4m3Table[b]*scales[c/BlockSize]))
		}
	}
	return nil
}

func checkDequant(dstLen int, src []byte, scales []float32, rows, k int) error {
	switch {
	case k <= 0 || k > MaxK:
		return errorf(errShape, "K = %d outside [1, %d]", k, MaxK)
	case rows < 1 || rows > BlockSize:
		return errorf(errShape, "band of %d rows, want 1..%d", rows, BlockSize)
	case len(src) < rows*k:
		return errorf(errShape, "FP8 band has %d bytes, want %d", len(src), rows*k)
	case dstLen < rows*k:
		return errorf(errShape, "output holds %d elements, want %d", dstLen, rows*k)
	case len(scales) < numBlocks(k):
		return errorf(errShape, "%d scales, want %d", len(scales), numBlocks(k))
	}
	return nil
}

// errorf wraps a sentinel: "<sentinel>: <description>".
func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// Sentinel errors; every error this package returns wraps one of them.
var (
	// ErrNonFinite: an Inf or NaN where a finite value is required (an input
	// element, an E8M0 scale of 0xFF).
	ErrNonFinite = errors.New("non-finite value")
	errShape     = errors.New("bad shape")          // dimensions out of range, a buffer too short
	errNotUE8M0  = errors.New("scale is not UE8M0") // not zero or a power of two a UE8M0 byte holds
	// ErrRange: a scale outside what the operation accepts (an E8M0 exponent
	// above an MXFP4 → NVFP4 cast's K_max, a block scale at which the block's
	// codes dequantize to infinity).
	ErrRange = errors.New("scale out of range")
	// errInconsistent: packed UE8M0 rows of one 128-row block that disagree,
	// or padding slots that are not zero.
	errInconsistent = errors.New("inconsistent packed scales")
)

// BlockError locates what a block quantization refused: a non-finite source
// element (ErrNonFinite; Bits, Row and Col say which), or a block whose scale
// makes its largest code dequantize to infinity (ErrRange; Bits the largest
// magnitude: with UE8M0 an amax near the float32 maximum gets scale 2^120, and
// code 256 × 2^120 overflows).
type BlockError struct {
	Err      error   // ErrNonFinite or ErrRange, which Unwrap returns
	Elem     Elem    // source format
	Bits     uint32  // a bit pattern of Elem
	Band     int     // row band (rows Band*128 .. Band*128+127 of the matrix)
	Row      int     // row in the matrix (ErrNonFinite)
	ColBlock int     // column block (columns ColBlock*128 .. ColBlock*128+127)
	Col      int     // column in the matrix (ErrNonFinite)
	Scale    float32 // the block's scale (ErrRange)
}

func (e *BlockError) Error() string {
	if e.Err == ErrRange {
		return fmt.Sprintf("%v: the largest magnitude %s 0x%0*x of row band %d, column block %d gets the scale %g, at which it dequantizes to infinity",
			ErrRange, e.Elem.name(), 2*e.Elem.Size(), e.Bits, e.Band, e.ColBlock, e.Scale)
	}
	return fmt.Sprintf("%v: %s 0x%0*x at row %d, column %d (row band %d, column block %d)",
		e.Err, e.Elem.name(), 2*e.Elem.Size(), e.Bits, e.Row, e.Col, e.Band, e.ColBlock)
}

// Unwrap lets errors.Is match Err.
func (e *BlockError) Unwrap() error { return e.Err }

// Elem is the source element format of a band.
type Elem uint8

const (
	// BF16 is bfloat16, two little-endian bytes; the dtype of K3's BF16 weights.
	BF16 Elem = iota
	// F16 is IEEE half precision, two little-endian bytes.
	F16
	// F32 is IEEE single precision, four little-endian bytes.
	F32
)

var elemFacts = [...]struct {
	name string
	size int    // bytes per element
	inf  uint32 // magnitude bits of +Inf: magnitudes at or above it are Inf or NaN
}{
	BF16: {"BF16", 2, 0x7F80},
	F16:  {"F16", 2, 0x7C00},
	F32:  {"F32", 4, 0x7F800000},
}

func (e Elem) valid() bool { return int(e) < len(elemFacts) }

// name returns the safetensors dtype name of e.
func (e Elem) name() string {
	if !e.valid() {
		return fmt.Sprintf("Elem(%d)", uint8(e))
	}
	return elemFacts[e].name
}

// Size returns the number of bytes of one element (0 for an invalid Elem).
func (e Elem) Size() int {
	if !e.valid() {
		return 0
	}
	return elemFacts[e].size
}

// BF16ToF32 widens a bfloat16 exactly: bfloat16 is the top half of a float32.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds to the nearest bfloat16, ties to even, as torch's scalar
// cast (c10::detail::round_to_nearest_even) does; every NaN becomes 0x7FC0.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7FFFFFFF > 0x7F800000 {
		return 0x7FC0
	}
	// Adding 0x7FFF plus the lowest kept bit carries exactly when the dropped
	// half is above one half, or equal to it with an odd kept half.
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}

// bits returns element i of b.
func (e Elem) bits(b []byte, i int) uint32 {
	if e == F32 {
		return binary.LittleEndian.Uint32(b[4*i:])
	}
	return uint32(binary.LittleEndian.Uint16(b[2*i:]))
}

// widen converts a bit pattern of format e to float32 exactly.
func (e Elem) widen(bits uint32) float32 {
	switch e {
	case BF16:
		return BF16ToF32(uint16(bits))
	case F16:
		return float16.Frombits(uint16(bits)).Float32()
	}
	return math.Float32frombits(bits)
}
