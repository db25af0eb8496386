//go:build amd64

#include "textflag.h"

// Broadcast a 32-bit constant into all lanes of a Y register.
#define BCAST(c, y, x) MOVL $c, AX; VMOVD AX, x; VPBROADCASTD x, y

// VEC32 is a read-only 32-byte vector of eight copies of the dword v.
#define VEC32(name, v) \
	DATA name<>+0(SB)/4, $v  \
	DATA name<>+4(SB)/4, $v  \
	DATA name<>+8(SB)/4, $v  \
	DATA name<>+12(SB)/4, $v \
	DATA name<>+16(SB)/4, $v \
	DATA name<>+20(SB)/4, $v \
	DATA name<>+24(SB)/4, $v \
	DATA name<>+28(SB)/4, $v \
	GLOBL name<>(SB), RODATA|NOPTR, $32

// 120<<23: rebias an E4M3 exponent to float32
VEC32(errRebias, 0x3C000000)

// 1: the lowest kept mantissa bit
VEC32(fxOne, 0x00000001)

// 0x7FFFF − (120<<23): round half to even, rebias to E4M3
VEC32(fxRound, 0xC407FFFF)

// the NaN code (E4M3FN), the largest magnitude code
VEC32(fxNaN, 0x0000007F)

// just below 2^-6, the smallest normal E4M3 value
VEC32(fxNormMin, 0x3C7FFFFF)

// FXBODY encodes 8 BF16 sources at (SI)(AX*2) times inv (Y15) to 8 E4M3FN
// codes at (DI)(AX*1), as ENC8 does (but for the NaN code: from a ≥ 464
// the normal path's code is at least 0x7F, which VPMINUD keeps, where ENC8
// blends 0x7F in from 480: the same bytes, since 464 < a < 480 rounds to
// 0x7F too). It leaves |x| in Y5 and e = |x| − |x̂| in Y2, x̂ the code's
// value times sf (Y12): for a normal code its bits shifted into place and
// rebiased, for a subnormal (a + 2^14) − 2^14, exactly its m·2^-9 (no
// float32 subnormal is ever an operand but y itself, as in ENC8).
#define FXBODY \
	FXLOAD                    \
	FXCODE

// FXBODYBF is FXBODY with y rounded to BF16 before it is encoded
// (ModelOpt's cast).
#define FXBODYBF \
	FXLOAD                    \
	BF16RNE(Y0, Y1, fxOne<>(SB)) \
	FXCODE

// FXLOAD loads 8 BF16 x, leaving |x| in Y5 and y = x·inv in Y0.
#define FXLOAD \
	VPMOVZXWD (SI)(AX*2), Y0  \
	VPSLLD $16, Y0, Y0        /* x */ \
	VPAND Y14, Y0, Y5         /* |x| */ \
	VMULPS Y15, Y0, Y0        /* y */

// FXCODE is the rest of FXBODY from y.
#define FXCODE \
	VPAND Y14, Y0, Y1         /* a = |y| */ \
	VPXOR Y1, Y0, Y0          \
	VPSRLD $24, Y0, Y0        /* sign: 0x80 or 0 */ \
	VPSRLD $20, Y1, Y2        \
	VPAND fxOne<>(SB), Y2, Y2 \
	VPADDD Y1, Y2, Y2         \
	VPADDD fxRound<>(SB), Y2, Y2 \
	VPSRLD $20, Y2, Y2        \
	VPMINUD fxNaN<>(SB), Y2, Y2 /* normal code */ \
	VADDPS Y13, Y1, Y3        /* a + 2^14 */ \
	VPSUBD Y13, Y3, Y4        /* subnormal code */ \
	VSUBPS Y13, Y3, Y3        /* its value */ \
	VPCMPGTD fxNormMin<>(SB), Y1, Y1 /* a ≥ 2^-6: normal */ \
	VPBLENDVB Y1, Y2, Y4, Y4  \
	VPOR Y4, Y0, Y0           /* the codes */ \
	VEXTRACTI128 $1, Y0, X4   \
	VPACKUSDW X4, X0, X0      \
	VPACKUSWB X0, X0, X0      \
	VMOVQ X0, (DI)(AX*1)      \
	VPSLLD $20, Y2, Y2        \
	VPADDD errRebias<>(SB), Y2, Y2 /* a normal code's value */ \
	VPBLENDVB Y1, Y2, Y3, Y2  \
	VMULPS Y12, Y2, Y2        /* |x̂| */ \
	VSUBPS Y2, Y5, Y2         /* e */ \
	VANDPS Y14, Y2, Y3        \
	VMAXPS Y3, Y6, Y6

// FXSAT counts the elements with |x| > top (at 64(SP)) in Y7.
#define FXSAT \
	VCMPPS $0x1E, 64(SP), Y5, Y3 \
	VPSUBD Y3, Y7, Y7

// FXSUMS adds x² and e² to the float64 lanes Y8..Y11 (fused multiply-adds:
// x² and e² are exact in float64, so each add rounds once, as a multiply
// then an add would). The float32 values are widened from memory: a
// register's upper half would need a shuffle, and shuffles share one port
// with the conversions on Intel cores.
#define FXSUMS \
	VMOVUPS Y5, 0(SP)         \
	VMOVUPS Y2, 32(SP)        \
	VCVTPS2PD 0(SP), Y3       \
	VFMADD231PD Y3, Y3, Y8    \
	VCVTPS2PD 16(SP), Y4      \
	VFMADD231PD Y4, Y4, Y9    \
	VCVTPS2PD 32(SP), Y3      \
	VFMADD231PD Y3, Y3, Y10   \
	VCVTPS2PD 48(SP), Y4      \
	VFMADD231PD Y4, Y4, Y11

// ERRARGS loads the pointer, stride and size arguments of the
// encode-and-measure kernels.
#define ERRARGS \
	MOVQ acc+0(FP), R10       \
	MOVQ dst+8(FP), DI        \
	MOVQ dstStride+16(FP), R8 \
	MOVQ src+24(FP), SI       \
	MOVQ srcStride+32(FP), R9 \
	MOVQ rows+40(FP), CX      \
	MOVQ cols+48(FP), DX

// ERRPICK jumps to bf (the ModelOpt loops) when modelOpt is set, else to
// none (the loop without the saturation count) when top is +Inf; it leaves
// top's bits in R11 for bf's own test.
#define ERRPICK(bf, none) \
	MOVL top+64(FP), R11      \
	MOVBLZX modelOpt+68(FP), R12 \
	TESTL R12, R12            \
	JNZ bf                    \
	CMPL R11, $0x7F800000     /* top = +Inf: nothing saturated, nothing to count */ \
	JEQ none

// WINLOOP runs body b over the window, step elements at a time.
#define WINLOOP(row, col, step, b) \
row:                          \
	XORQ AX, AX               \
col:                          \
	b                         \
	ADDQ $step, AX            \
	CMPQ AX, DX               \
	JB col                    \
	ADDQ R8, DI               \
	ADDQ R9, SI               \
	DECQ CX                   \
	JNZ row

// func amax16AVX2(src *byte, stride, rows, cols int) uint16
TEXT ·amax16AVX2(SB), NOSPLIT, $0-34
	MOVQ src+0(FP), SI
	MOVQ stride+8(FP), BX
	MOVQ rows+16(FP), CX
	MOVQ cols+24(FP), DX
	SHLQ $1, DX                  // bytes per row
	VPCMPEQD Y15, Y15, Y15
	VPSRLW $1, Y15, Y15          // 0x7FFF in every word
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
a16row:
	XORQ AX, AX
a16col:
	VPAND (SI)(AX*1), Y15, Y2
	VPMAXUW Y2, Y0, Y0
	ADDQ $32, AX
	CMPQ AX, DX
	JB a16col
	ADDQ BX, SI
	DECQ CX
	JNZ a16row
	VEXTRACTI128 $1, Y0, X1
	VPMAXUW X1, X0, X0
	VPSHUFD $0x4E, X0, X1
	VPMAXUW X1, X0, X0
	VPSHUFD $0xB1, X0, X1
	VPMAXUW X1, X0, X0
	VPSRLD $16, X0, X1
	VPMAXUW X1, X0, X0
	VMOVD X0, AX
	MOVW AX, ret+32(FP)
	VZEROUPPER
	RET

// func amax32AVX2(src *byte, stride, rows, cols int) uint32
TEXT ·amax32AVX2(SB), NOSPLIT, $0-36
	MOVQ src+0(FP), SI
	MOVQ stride+8(FP), BX
	MOVQ rows+16(FP), CX
	MOVQ cols+24(FP), DX
	SHLQ $2, DX                  // bytes per row
	VPCMPEQD Y15, Y15, Y15
	VPSRLD $1, Y15, Y15          // 0x7FFFFFFF in every dword
	VPXOR Y0, Y0, Y0
a32row:
	XORQ AX, AX
a32col:
	VPAND (SI)(AX*1), Y15, Y2
	VPMAXUD Y2, Y0, Y0
	ADDQ $32, AX
	CMPQ AX, DX
	JB a32col
	ADDQ BX, SI
	DECQ CX
	JNZ a32row
	VEXTRACTI128 $1, Y0, X1
	VPMAXUD X1, X0, X0
	VPSHUFD $0x4E, X0, X1
	VPMAXUD X1, X0, X0
	VPSHUFD $0xB1, X0, X1
	VPMAXUD X1, X0, X0
	VMOVD X0, AX
	MOVL AX, ret+32(FP)
	VZEROUPPER
	RET

// ENCCONST loads the constants of ENC8 (see E4M3FromF32 in fp8.go).
#define ENCCONST \
	BCAST(0x7FFFFFFF, Y14, X14) /* |x| mask */ \
	BCAST(1, Y13, X13)          \
	BCAST(0xC407FFFF, Y12, X12) /* 0x7FFFF - (120<<23): round half up, rebias */ \
	BCAST(0x46800000, Y11, X11) /* 2^14 (and its bit pattern) */ \
	BCAST(0x3C800000, Y10, X10) /* 2^-6, the smallest normal */ \
	BCAST(0x43EFFFFF, Y9, X9)   /* just below 480 */ \
	BCAST(0x7F, Y8, X8)           // NaN code

// ENC8 turns 8 float32 x in register v into 8 dword E4M3FN codes of x·inv
// (inv in Y15), computing the normal and subnormal results and blending.
#define ENC8(v) \
	VMULPS Y15, v, v       \
	ENCY(v)

// ENCBF8 is ENC8 with the product rounded to BF16 first (ModelOpt's cast).
#define ENCBF8(v) \
	VMULPS Y15, v, v       \
	BF16RNE(v, Y7, Y13)    \
	ENCY(v)

// BF16RNE rounds the float32 in v to BF16 (to nearest, ties to even; no
// NaN is ever an operand), as F32ToBF16 does: add 0x7FFF plus the
// lowest kept bit, clear the dropped half. t is a scratch register, one a
// register of dword ones.
#define BF16RNE(v, t, one) \
	VPSRLD $16, v, t       \
	VPAND one, t, t        \
	VPADDD t, v, v         \
	VPADDD bfHalf<>(SB), v, v \
	VPAND bfHigh<>(SB), v, v

// ENCY turns the 8 float32 y of v into their E4M3FN codes.
#define ENCY(v) \
	VPAND Y14, v, Y1       /* a = |y| */ \
	VPXOR Y1, v, v         /* the sign bit alone */ \
	VPSRLD $24, v, v       /* 0x80 or 0 */ \
	VPSRLD $20, Y1, Y2     \
	VPAND Y13, Y2, Y2      /* lowest kept mantissa bit */ \
	VPADDD Y1, Y2, Y2      \
	VPADDD Y12, Y2, Y2     \
	VPSRLD $20, Y2, Y2     /* normal code */ \
	VADDPS Y11, Y1, Y3     \
	VPSUBD Y11, Y3, Y3     /* subnormal code: bits(a + 2^14) - bits(2^14) */ \
	VPCMPGTD Y1, Y10, Y4   /* a < 2^-6 */ \
	VPBLENDVB Y4, Y3, Y2, Y2 \
	VPCMPGTD Y9, Y1, Y4    /* a >= 480 (or Inf/NaN) */ \
	VPBLENDVB Y4, Y8, Y2, Y2 \
	VPOR Y2, v, v

// STORE16 packs the dword codes of Y5 (elements 0..7) and Y6 (8..15) into 16
// bytes at (DI)(AX*1).
#define STORE16 \
	VPACKUSDW Y6, Y5, Y5      /* lane-wise: [Y5 lo, Y6 lo | Y5 hi, Y6 hi] */ \
	VPERMQ $0xD8, Y5, Y5      /* [Y5 lo, Y5 hi | Y6 lo, Y6 hi] */ \
	VEXTRACTI128 $1, Y5, X6   \
	VPACKUSWB X6, X5, X5      \
	VMOVDQU X5, (DI)(AX*1)

// bfHalf, bfHigh: BF16RNE's 0x7FFF and its mask of the kept half
VEC32(bfHalf, 0x00007FFF)

VEC32(bfHigh, 0xFFFF0000)

// func encodeModelOptAVX2(dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv float32)
// Writes e4m3(bf16(x·inv)) for a window of BF16 elements (cols a positive
// multiple of 16), encodeModelOpt's bytes for a normal scale.
TEXT ·encodeModelOptAVX2(SB), NOSPLIT, $0-52
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ srcStride+24(FP), R9
	MOVQ rows+32(FP), CX
	MOVQ cols+40(FP), DX
	VBROADCASTSS inv+48(FP), Y15
	ENCCONST
morow:
	XORQ AX, AX
mocol:
	VPMOVZXWD (SI)(AX*2), Y5
	VPMOVZXWD 16(SI)(AX*2), Y6
	VPSLLD $16, Y5, Y5
	VPSLLD $16, Y6, Y6
	ENCBF8(Y5)
	ENCBF8(Y6)
	STORE16
	ADDQ $16, AX
	CMPQ AX, DX
	JB mocol
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ CX
	JNZ morow
	VZEROUPPER
	RET

// func encodeBF16AVX2(dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv float32)
TEXT ·encodeBF16AVX2(SB), NOSPLIT, $0-52
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ srcStride+24(FP), R9
	MOVQ rows+32(FP), CX
	MOVQ cols+40(FP), DX
	VBROADCASTSS inv+48(FP), Y15
	ENCCONST
ebrow:
	XORQ AX, AX
ebcol:
	VPMOVZXWD (SI)(AX*2), Y5
	VPMOVZXWD 16(SI)(AX*2), Y6
	VPSLLD $16, Y5, Y5
	VPSLLD $16, Y6, Y6
	ENC8(Y5)
	ENC8(Y6)
	STORE16
	ADDQ $16, AX
	CMPQ AX, DX
	JB ebcol
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ CX
	JNZ ebrow
	VZEROUPPER
	RET

// func encodeF32AVX2(dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv float32)
TEXT ·encodeF32AVX2(SB), NOSPLIT, $0-52
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ srcStride+24(FP), R9
	MOVQ rows+32(FP), CX
	MOVQ cols+40(FP), DX
	VBROADCASTSS inv+48(FP), Y15
	ENCCONST
efrow:
	XORQ AX, AX
efcol:
	VMOVDQU (SI)(AX*4), Y5
	VMOVDQU 32(SI)(AX*4), Y6
	ENC8(Y5)
	ENC8(Y6)
	STORE16
	ADDQ $16, AX
	CMPQ AX, DX
	JB efcol
	ADDQ R8, DI
	ADDQ R9, SI
	DECQ CX
	JNZ efrow
	VZEROUPPER
	RET

// func encodeErrBF16AVX2(acc *laneSums, dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv, sf, top float32, modelOpt bool)
// Is encodeBF16AVX2 (encodeModelOptAVX2 if modelOpt) then errWindowGo
// over the codes it wrote, in one pass (cols a positive multiple of 8): the
// same codes, and the same sums, maxima and counts in the lanes of acc.
TEXT ·encodeErrBF16AVX2(SB), NOSPLIT, $96-69
	ERRARGS
	VBROADCASTSS inv+56(FP), Y15
	VBROADCASTSS sf+60(FP), Y12
	VBROADCASTSS top+64(FP), Y0
	VMOVUPS Y0, 64(SP)
	BCAST(0x7FFFFFFF, Y14, X14)
	BCAST(0x46800000, Y13, X13)  // 2^14
	VMOVUPD 0(R10), Y8
	VMOVUPD 32(R10), Y9
	VMOVUPD 64(R10), Y10
	VMOVUPD 96(R10), Y11
	VMOVUPS 128(R10), Y6
	VMOVDQU 160(R10), Y7
	ERRPICK(fbstart, fnrow)
	WINLOOP(fsrow, fscol, 8, FXBODY; FXSAT; FXSUMS)
	JMP fxdone
	WINLOOP(fnrow, fncol, 8, FXBODY; FXSUMS)
	JMP fxdone
fbstart:
	CMPL R11, $0x7F800000
	JEQ fbnrow
	WINLOOP(fbsrow, fbscol, 8, FXBODYBF; FXSAT; FXSUMS)
	JMP fxdone
	WINLOOP(fbnrow, fbncol, 8, FXBODYBF; FXSUMS)
fxdone:
	VMOVUPD Y8, 0(R10)
	VMOVUPD Y9, 32(R10)
	VMOVUPD Y10, 64(R10)
	VMOVUPD Y11, 96(R10)
	VMOVUPS Y6, 128(R10)
	VMOVDQU Y7, 160(R10)
	VZEROUPPER
	RET

// ZXBODY is FXBODY for 16 BF16 sources at (SI)(AX*2) in Z registers (see
// encodeErrBF16AVX512 for the constants): it writes their 16 codes at
// (DI)(AX*1) and leaves |x| in Z5 and e = |x| − |x̂| in Z3, with max|e|
// taken into Z10. ZXLOAD and ZXCODE are its halves, ZXBF16 the ModelOpt
// rounding of y between them (BF16RNE).
#define ZXLOAD \
	VPMOVZXWD (SI)(AX*2), Z0  \
	VPSLLD $16, Z0, Z0        /* x */ \
	VPANDD Z28, Z0, Z5        /* |x| */ \
	VMULPS Z31, Z0, Z0        /* y */

#define ZXBF16 \
	VPSRLD $16, Z0, Z1        \
	VPANDD Z26, Z1, Z1        \
	VPADDD Z1, Z0, Z0         \
	VPADDD Z21, Z0, Z0        \
	VPANDD Z20, Z0, Z0

#define ZXCODE \
	VPANDD Z28, Z0, Z1        /* a = |y| */ \
	VPSRLD $24, Z0, Z0        /* the sign in bit 7 */ \
	VPSRLD $20, Z1, Z2        \
	VPANDD Z26, Z2, Z2        \
	VPADDD Z1, Z2, Z2         \
	VPADDD Z25, Z2, Z2        \
	VPSRLD $20, Z2, Z2        /* normal code, before the NaN clamp */ \
	VADDPS Z27, Z1, Z3        /* a + 2^14 */ \
	VPSUBD Z27, Z3, Z4        /* subnormal code */ \
	VSUBPS Z27, Z3, Z3        /* its value */ \
	VPCMPGTD Z23, Z1, K1      /* a ≥ 2^-6: normal */ \
	VPMINUD Z24, Z2, K1, Z4   /* the magnitude codes */ \
	VPTERNLOGD $0xF8, Z19, Z0, Z4 /* | sign & 0x80: the codes */ \
	VPMOVDB Z4, (DI)(AX*1)    \
	VPSLLD $20, Z2, Z2        \
	VPADDD Z22, Z2, K1, Z3    /* a normal code's value */ \
	VMULPS Z30, Z3, Z3        /* |x̂| */ \
	VSUBPS Z3, Z5, Z3         /* e */ \
	VPANDD Z28, Z3, Z4        \
	VMAXPS Z4, Z10, Z10

// ZXSAT counts the elements with |x| > top (Z29) in Z11.
#define ZXSAT \
	VCMPPS $0x1E, Z29, Z5, K2 \
	VPADDD Z26, Z11, K2, Z11

// ZXSUMS adds x² and e² of the 16 elements to the eight float64 lanes of
// Z8 and Z9: elements 0..7 first, then 8..15, so lane j%8 takes a row's
// elements in order, as errWindowGo adds them.
#define ZXSUMS \
	VCVTPS2PD Y5, Z6          \
	VEXTRACTF64X4 $1, Z5, Y7  \
	VCVTPS2PD Y7, Z7          \
	VFMADD231PD Z6, Z6, Z8    \
	VFMADD231PD Z7, Z7, Z8    \
	VCVTPS2PD Y3, Z6          \
	VEXTRACTF64X4 $1, Z3, Y7  \
	VCVTPS2PD Y7, Z7          \
	VFMADD231PD Z6, Z6, Z9    \
	VFMADD231PD Z7, Z7, Z9

// func encodeErrBF16AVX512(acc *laneSums, dst *byte, dstStride int, src *byte, srcStride, rows, cols int, inv, sf, top float32, modelOpt bool)
// Is encodeErrBF16AVX2 sixteen elements at a time (cols a positive multiple
// of 16): the same codes, and the same sums, maxima and counts in the lanes
// of acc, bit for bit. A Z register holds all eight float64 lanes, so the
// two halves of 16 elements are added one after the other, as a row's
// elements come.
TEXT ·encodeErrBF16AVX512(SB), NOSPLIT, $0-69
	ERRARGS
	VBROADCASTSS inv+56(FP), Z31
	VBROADCASTSS sf+60(FP), Z30
	VBROADCASTSS top+64(FP), Z29
	MOVL $0x7FFFFFFF, AX
	VPBROADCASTD AX, Z28
	MOVL $0x46800000, AX         // 2^14
	VPBROADCASTD AX, Z27
	MOVL $1, AX
	VPBROADCASTD AX, Z26
	MOVL $0xC407FFFF, AX         // 0x7FFFF − (120<<23): round half to even, rebias
	VPBROADCASTD AX, Z25
	MOVL $0x7F, AX               // the NaN code
	VPBROADCASTD AX, Z24
	MOVL $0x3C7FFFFF, AX         // just below 2^-6
	VPBROADCASTD AX, Z23
	MOVL $0x3C000000, AX         // 120<<23
	VPBROADCASTD AX, Z22
	MOVL $0x7FFF, AX
	VPBROADCASTD AX, Z21
	MOVL $0xFFFF0000, AX
	VPBROADCASTD AX, Z20
	MOVL $0x80, AX
	VPBROADCASTD AX, Z19
	VMOVUPD 0(R10), Z8           // Σx², lanes 0..7
	VMOVUPD 64(R10), Z9          // Σe²
	VMOVUPS 128(R10), Y10        // max|e|; the upper eight start at +0
	VMOVDQU 160(R10), Y11        // saturated counts; the upper eight start at 0
	ERRPICK(zbstart, zfnrow)
	WINLOOP(zfsrow, zfscol, 16, ZXLOAD; ZXCODE; ZXSAT; ZXSUMS)
	JMP zxdone
	WINLOOP(zfnrow, zfncol, 16, ZXLOAD; ZXCODE; ZXSUMS)
	JMP zxdone
zbstart:
	CMPL R11, $0x7F800000
	JEQ zbnrow
	WINLOOP(zbsrow, zbscol, 16, ZXLOAD; ZXBF16; ZXCODE; ZXSAT; ZXSUMS)
	JMP zxdone
	WINLOOP(zbnrow, zbncol, 16, ZXLOAD; ZXBF16; ZXCODE; ZXSUMS)
zxdone:
	VEXTRACTF64X4 $1, Z10, Y12
	VMAXPS Y12, Y10, Y10
	VEXTRACTI64X4 $1, Z11, Y12
	VPADDD Y12, Y11, Y11
	VMOVUPD Z8, 0(R10)
	VMOVUPD Z9, 64(R10)
	VMOVUPS Y10, 128(R10)
	VMOVDQU Y11, 160(R10)
	VZEROUPPER
	RET

// 4·v² of the E2M1 magnitude codes 0..7, twice (bit 3, the sign, is masked off)
DATA sq4Table<>+0(SB)/8, $0x9040241009040100
DATA sq4Table<>+8(SB)/8, $0x9040241009040100
GLOBL sq4Table<>(SB), RODATA|NOPTR, $16

// func sumSq4AVX2(dst *uint16, src *byte, n int)
// Writes sumSq4 of each of n 16-byte blocks of E2M1 code pairs: the 32
// nibbles' 4·v² looked up with VPSHUFB (each at most 144, a byte) and summed
// with VPSADBW.
TEXT ·sumSq4AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ $0x0707070707070707, AX
	MOVQ AX, X7
	VPBROADCASTQ X7, X7          // magnitude bits of each nibble
	VMOVDQU sq4Table<>(SB), X6
	VPXOR X5, X5, X5
sqblock:
	VMOVDQU (SI), X0
	VPSRLW $4, X0, X1
	VPAND X7, X0, X0             // low nibbles
	VPAND X7, X1, X1             // high nibbles
	VPSHUFB X0, X6, X0
	VPSHUFB X1, X6, X1
	VPSADBW X5, X0, X0           // two sums of eight bytes
	VPSADBW X5, X1, X1
	VPADDQ X1, X0, X0
	VPSHUFD $0x4E, X0, X1
	VPADDQ X1, X0, X0
	VMOVQ X0, AX
	MOVW AX, (DI)
	ADDQ $16, SI
	ADDQ $2, DI
	DECQ CX
	JNZ sqblock
	RET
