package quant

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// goldenDir holds the PyTorch goldens (quant/testdata/torch/gen_goldens.py made them).
var goldenDir = filepath.Join("testdata", "torch")

type goldenCase struct {
	Name     string     `json:"name"`
	Elem     string     `json:"elem"`
	N        int        `json:"n"`
	K        int        `json:"k"`
	Regions  []gRegion  `json:"regions"`
	Patches  [][3]int64 `json:"patches"`
	InputSHA string     `json:"input_sha256"`

	CPUEqualsCUDAFP32  bool     `json:"cpu_equals_cuda_fp32"`
	CPUEqualsCUDAUE8M0 bool     `json:"cpu_equals_cuda_ue8m0"`
	CPUSHAFP32         string   `json:"cpu_fp8_sha256_fp32"`
	CPUSHAUE8M0        string   `json:"cpu_fp8_sha256_ue8m0"`
	BandSHAFP32        []string `json:"band_sha256_fp32"`
	BandSHAUE8M0       []string `json:"band_sha256_ue8m0"`
	DeqF32FP32         string   `json:"dequant_f32_sha256_fp32"`
	DeqF32UE8M0        string   `json:"dequant_f32_sha256_ue8m0"`
	DeqBF16FP32        string   `json:"dequant_bf16_sha256_fp32"`
	DeqBF16UE8M0       string   `json:"dequant_bf16_sha256_ue8m0"`
}

type gRegion struct {
	R0, R1, C0, C1 int
	Seed           uint64
	ELo, EHi       uint32
	Kind           string
	Bits           uint32
}

type goldenManifest struct {
	Torch  string            `json:"torch"`
	Device string            `json:"device"`
	Errors map[string]string `json:"errors"`
	Cases  []goldenCase      `json:"cases"`
	DCP    struct {
		N, K, Ranks int
		FullSHA     string   `json:"full_sha256"`
		PartSHA     []string `json:"part_sha256"`
	} `json:"dcp"`
	MXDecode struct{ Rows, K int } `json:"mxfp4_decode"`
	MXEncode struct{ K int }       `json:"mxfp4_encode"`

	BF16ToE4M3CPUEqualsCUDA bool   `json:"bf16_to_e4m3_cpu_equals_cuda"`
	F32ToE4M3SHA            string `json:"f32_to_e4m3_sha256"`
	F32ToE4M3Mismatches     int    `json:"f32_to_e4m3_cpu_cuda_mismatches"`
	F32ToBF16SHA            string `json:"f32_to_bf16_nan_canonical_sha256"`

	Sections []struct {
		Name           string
		Offset, Length int
	} `json:"sections"`
}

type goldens struct {
	goldenManifest
	blob []byte
}

var loadGoldens = sync.OnceValues(func() (*goldens, error) {
	m, err := os.ReadFile(filepath.Join(goldenDir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	g := &goldens{}
	if err := json.Unmarshal(m, &g.goldenManifest); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(goldenDir, "goldens.bin.gz"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	g.blob, err = io.ReadAll(zr)
	return g, err
})

func golden(t testing.TB) *goldens {
	t.Helper()
	g, err := loadGoldens()
	if err != nil {
		t.Fatalf("goldens: %v", err)
	}
	if len(g.Errors) != 0 {
		t.Fatalf("golden generator reported errors: %v", g.Errors)
	}
	return g
}

// section returns a named section of the golden blob (nil if absent).
func (g *goldens) section(name string) []byte {
	for _, s := range g.Sections {
		if s.Name == name {
			return g.blob[s.Offset : s.Offset+s.Length]
		}
	}
	return nil
}

func (g *goldens) mustSection(t testing.TB, name string) []byte {
	t.Helper()
	b := g.section(name)
	if b == nil {
		t.Fatalf("golden section %q missing", name)
	}
	return b
}

func shaHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// input regenerates a case's source matrix from its generator description.
func (c *goldenCase) input(t testing.TB) ([]byte, Elem) {
	t.Helper()
	e := map[string]Elem{"BF16": BF16, "F16": F16, "F32": F32}[c.Elem]
	src := make([]byte, c.N*c.K*e.Size())
	for _, r := range c.Regions {
		if r.Kind == "const" {
			for row := r.R0; row < r.R1; row++ {
				for col := r.C0; col < r.C1; col++ {
					putElem(src, e, row*c.K+col, r.Bits)
				}
			}
			continue
		}
		genFill(src, e, c.K, region{r.R0, r.R1, r.C0, r.C1, r.Seed, r.ELo, r.EHi})
	}
	for _, p := range c.Patches {
		putElem(src, e, int(p[0])*c.K+int(p[1]), uint32(p[2]))
	}
	if got := shaHex(src); got != c.InputSHA {
		t.Fatalf("%s: regenerated input sha256 %s, generator made %s", c.Name, got, c.InputSHA)
	}
	return src, e
}

func putElem(dst []byte, e Elem, i int, bits uint32) {
	if e.Size() == 4 {
		dst[4*i], dst[4*i+1], dst[4*i+2], dst[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
		return
	}
	dst[2*i], dst[2*i+1] = byte(bits), byte(bits>>8)
}

func u32At(b []byte, i int) uint32 {
	return uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
}

// e4M3FromF32 is e4m3Select written case by case, as c10's
// fp8e4m3fn_from_fp32_value is: the reference the tests hold the kernel to.
func e4M3FromF32(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7FFFFFFF
	switch {
	case a >= f32Bits480:
		return sign | e4M3NaN
	case a < f32BitsMinNorm:
		// The subnormal step is 2^-9: adding 2^14 in float32 leaves
		// round-to-nearest-even(|x|·2^9) in the low mantissa bits.
		s := math.Float32bits(math.Float32frombits(a)+float32(1<<14)) - f32Bits2p14
		return sign | uint8(s)
	default:
		// Keep 3 mantissa bits, rounding to nearest even, and rebias.
		return sign | uint8((a-f32BiasShift+0x7FFFF+(a>>20)&1)>>20)
	}
}

func TestE4M3FromBF16AllGolden(t *testing.T) {
	g := golden(t)
	want := g.mustSection(t, "casts/bf16_to_e4m3")
	if !g.BF16ToE4M3CPUEqualsCUDA {
		t.Errorf("golden generator saw torch's CPU and CUDA casts differ")
	}
	for b := range 1 << 16 {
		f := BF16ToF32(uint16(b))
		if got := e4M3FromF32(f); got != want[b] {
			t.Errorf("E4M3FromF32(bf16 0x%04x = %g) = 0x%02x, torch 0x%02x", b, f, got, want[b])
		}
		if got := e4m3Select(f); got != want[b] {
			t.Errorf("e4m3Select(bf16 0x%04x = %g) = 0x%02x, torch 0x%02x", b, f, got, want[b])
		}
	}
}

func TestE4M3ToF32Golden(t *testing.T) {
	want := golden(t).mustSection(t, "casts/e4m3_to_f32")
	for c := range 256 {
		if got := math.Float32bits(E4M3ToF32(uint8(c))); got != u32At(want, c) {
			t.Errorf("E4M3ToF32(0x%02x) bits 0x%08x, torch 0x%08x", c, got, u32At(want, c))
		}
	}
}

func TestF16ToF32Golden(t *testing.T) {
	want := golden(t).mustSection(t, "casts/f16_to_f32")
	for h := range 1 << 16 {
		if h&0x7C00 == 0x7C00 && h&0x3FF != 0 {
			// NaN payloads are not part of the contract: torch's CUDA cast
			// returns 0x7FFFFFFF, its CPU scalar cast and x448 keep the payload.
			if got := F16.widen(uint32(h)); got == got {
				t.Errorf("F16.widen(0x%04x) = %g, want NaN", h, got)
			}
			continue
		}
		if got := math.Float32bits(F16.widen(uint32(h))); got != u32At(want, h) {
			t.Errorf("F16.widen(0x%04x) bits 0x%08x, torch 0x%08x", h, got, u32At(want, h))
		}
	}
}

func TestE8M0ToF32Golden(t *testing.T) {
	want := golden(t).mustSection(t, "casts/e8m0_to_f32")
	for b := range 256 {
		if got := math.Float32bits(e8M0ToF32(uint8(b))); got != u32At(want, b) {
			t.Errorf("E8M0ToF32(0x%02x) bits 0x%08x, torch 0x%08x", b, got, u32At(want, b))
		}
	}
}

// exhaustiveEnv, set to 1, makes the 2^32-input tests check all 256 chunks;
// by default they check the chunks where the conversion does more than map
// everything to one value (about a tenth of the work: CI shares two cores).
const exhaustiveEnv = "K3CKPT_EXHAUSTIVE"

// exhaustiveF32 checks a conversion of all 2^32 float32 bit patterns against
// torch the way gen_goldens.py hashed it: 256 chunks of 2^24 inputs in bit
// order, sha256 per chunk, sha256 of the chunk digests. chunk fills out with
// the conversion of inputs c<<24 .. c<<24 | 0xFFFFFF (out has width bytes per
// input; in is scratch for the inputs as little-endian float32). Both cores work.
func exhaustiveF32(t *testing.T, golden []byte, width int, needIn bool, interesting func(c uint32) bool, chunk func(t *testing.T, c uint32, in, out []byte)) string {
	t.Helper()
	all := os.Getenv(exhaustiveEnv) == "1"
	digests := make([][32]byte, 256)
	next := make(chan uint32, 256)
	for c := range uint32(256) {
		if all || interesting(c) {
			next <- c
		} else {
			copy(digests[c][:], golden[32*c:])
		}
	}
	close(next)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			var in []byte
			if needIn {
				in = make([]byte, 4<<24)
			}
			out := make([]byte, width<<24)
			for c := range next {
				for i := range uint32(len(in) / 4) {
					binary.LittleEndian.PutUint32(in[4*i:], c<<24|i)
				}
				chunk(t, c, in, out)
				digests[c] = sha256.Sum256(out)
			}
		})
	}
	wg.Wait()
	cat := make([]byte, 0, 256*32)
	for c, d := range digests {
		if !bytes.Equal(d[:], golden[32*c:32*c+32]) {
			t.Errorf("chunk %d (bits 0x%08x..0x%08x) differs from torch", c, c<<24, c<<24|0xFFFFFF)
		}
		cat = append(cat, d[:]...)
	}
	if !all {
		t.Logf("checked the interesting chunks only; %s=1 checks all 2^32 inputs", exhaustiveEnv)
	}
	return shaHex(cat)
}

// TestF32ToE4M3Exhaustive holds E4M3FromF32, the branch-free e4m3Select and
// the vector kernel (x·1 is x for every float32) to torch's cast of all 2^32
// float32 values.
func TestF32ToE4M3Exhaustive(t *testing.T) {
	if testing.Short() {
		t.Skip("2^32 conversions")
	}
	g := golden(t)
	if g.F32ToE4M3Mismatches != 0 {
		t.Errorf("torch CPU and CUDA casts differ on %d inputs", g.F32ToE4M3Mismatches)
	}
	got := exhaustiveF32(t, g.mustSection(t, "exhaustive/f32_to_e4m3_chunks"), 1, true, func(c uint32) bool {
		// float32 subnormals, |x| in [2^-11, 512) (all E4M3FN codes and the
		// rounding into zero and into NaN), and Inf/NaN; both signs.
		e := c & 0x7F
		return e == 0 || e >= 0x3A && e <= 0x43 || e == 0x7F
	}, func(t *testing.T, c uint32, in, out []byte) {
		// The kernel writes into out first, then each byte is checked
		// against the scalar conversions and replaced by E4M3FromF32's.
		encode(F32, out, 0, in, 0, 1, len(out), 1)
		for i, k := range out {
			f := math.Float32frombits(c<<24 | uint32(i))
			s, sel := e4M3FromF32(f), e4m3Select(f)
			if k != s || sel != s {
				t.Errorf("bits 0x%08x: E4M3FromF32 0x%02x, kernel 0x%02x, e4m3Select 0x%02x", c<<24|uint32(i), s, k, sel)
				return
			}
			out[i] = s
		}
	})
	if got != g.F32ToE4M3SHA {
		t.Errorf("E4M3FromF32 over all float32: sha256 %s, torch %s", got, g.F32ToE4M3SHA)
	}
}

func TestF32ToBF16Exhaustive(t *testing.T) {
	if testing.Short() {
		t.Skip("2^32 conversions")
	}
	g := golden(t)
	got := exhaustiveF32(t, g.mustSection(t, "exhaustive/f32_to_bf16_chunks"), 2, false, func(c uint32) bool {
		// subnormals, around 1, the rounding into Inf, Inf/NaN; both signs.
		e := c & 0x7F
		return e <= 1 || e == 0x3F || e >= 0x7E
	}, func(t *testing.T, c uint32, _, out []byte) {
		for i := range uint32(1 << 24) {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToBF16(math.Float32frombits(c<<24|i)))
		}
	})
	if got != g.F32ToBF16SHA {
		t.Errorf("F32ToBF16 over all float32 (NaN as 0x7FC0): sha256 %s, torch %s", got, g.F32ToBF16SHA)
	}
}

// quantizeAll block-quantizes a whole golden matrix band by band.
func quantizeAll(t *testing.T, src []byte, e Elem, n, k int, f ScaleFmt, cpuDiv bool) (fp8 []byte, scales []float32) {
	t.Helper()
	q := NewQuantizer(k, e, f)
	q.cpuDiv = cpuDiv
	nkb := numBlocks(k)
	fp8 = make([]byte, n*k)
	scales = make([]float32, numBlocks(n)*nkb)
	for b := range numBlocks(n) {
		r0, r1 := b*BlockSize, min(b*BlockSize+BlockSize, n)
		if err := q.quantizeNext(fp8[r0*k:r1*k], scales[b*nkb:(b+1)*nkb], src[r0*k*e.Size():r1*k*e.Size()], r1-r0); err != nil {
			t.Fatal(err)
		}
	}
	return fp8, scales
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

func TestBlockQuantGolden(t *testing.T) { eachKernel(t, testBlockQuantGolden) }

func testBlockQuantGolden(t *testing.T) {
	g := golden(t)
	for _, c := range g.Cases {
		src, e := c.input(t)
		for _, fc := range []struct {
			f            ScaleFmt
			bands        []string
			deqF, deqB   string
			cpuSHA       string
			cpuEqualCUDA bool
		}{
			{ScaleFP32, c.BandSHAFP32, c.DeqF32FP32, c.DeqBF16FP32, c.CPUSHAFP32, c.CPUEqualsCUDAFP32},
			{ScaleUE8M0, c.BandSHAUE8M0, c.DeqF32UE8M0, c.DeqBF16UE8M0, c.CPUSHAUE8M0, c.CPUEqualsCUDAUE8M0},
		} {
			name := c.Name + "/" + fc.f.String()
			fp8, scales := quantizeAll(t, src, e, c.N, c.K, fc.f, false)
			if want := g.mustSection(t, c.Name+"/scales_"+fc.f.String()); !bytes.Equal(f32Bytes(scales), want) {
				for i := range scales {
					if math.Float32bits(scales[i]) != u32At(want, i) {
						t.Errorf("%s: scale %d = %g, torch %g", name, i, scales[i], math.Float32frombits(u32At(want, i)))
					}
				}
			}
			for b, want := range fc.bands {
				if got := shaHex(fp8[b*BlockSize*c.K : min((b+1)*BlockSize, c.N)*c.K]); got != want {
					t.Errorf("%s: band %d FP8 bytes differ from torch", name, b)
				}
			}
			if want := g.section(c.Name + "/fp8_" + fc.f.String()); want != nil {
				for i := range want {
					if fp8[i] != want[i] {
						t.Errorf("%s: element (%d, %d) = 0x%02x, torch 0x%02x", name, i/c.K, i%c.K, fp8[i], want[i])
					}
				}
			}
			// torch on CPU divides exactly; DivExact must reproduce its bytes too.
			cpu, cpuScales := quantizeAll(t, src, e, c.N, c.K, fc.f, true)
			if got := shaHex(cpu); got != fc.cpuSHA {
				t.Errorf("%s: DivExact bytes differ from torch on CPU", name)
			}
			if same := bytes.Equal(cpu, fp8) && bytes.Equal(f32Bytes(cpuScales), f32Bytes(scales)); same != fc.cpuEqualCUDA {
				t.Errorf("%s: torch CPU == CUDA is %v, ours %v", name, fc.cpuEqualCUDA, !fc.cpuEqualCUDA)
			}
			// dequantization, to float32 and to BF16
			nkb := numBlocks(c.K)
			deq := make([]float32, c.N*c.K)
			deqB := make([]byte, 2*c.N*c.K)
			for b := range numBlocks(c.N) {
				r0, r1 := b*BlockSize, min(b*BlockSize+BlockSize, c.N)
				if err := dequantizeBand(deq[r0*c.K:r1*c.K], fp8[r0*c.K:r1*c.K], scales[b*nkb:], r1-r0, c.K); err != nil {
					t.Fatal(err)
				}
				if err := DequantizeBandBF16(deqB[2*r0*c.K:2*r1*c.K], fp8[r0*c.K:r1*c.K], scales[b*nkb:], r1-r0, c.K); err != nil {
					t.Fatal(err)
				}
			}
			if got := shaHex(f32Bytes(deq)); got != fc.deqF {
				t.Errorf("%s: float32 dequantization differs from torch", name)
			}
			if got := shaHex(deqB); got != fc.deqB {
				t.Errorf("%s: BF16 dequantization differs from torch", name)
			}
		}
	}
}
