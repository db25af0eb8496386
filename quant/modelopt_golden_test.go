package quant

import (
	"compress/gzip"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The goldens of NVIDIA Model-Optimizer's own converter functions (commit
// 575c27ae, run with torch 2.11 on an H200 machine by
// scripts/device/modelopt/gen_goldens.py): its FP8_PB_WO cast
// (_quantize_weight_fp8_pb) and its MXFP4 → NVFP4 cast
// (mxfp4_kmax, build_w13_kmax_overrides, quantize_mxfp4_to_nvfp4_lossless,
// NVFP4QTensor.dequantize), on CPU and CUDA.
type moGoldens struct {
	Commit  string     `json:"modelopt_commit"`
	Torch   string     `json:"torch"`
	Devices []string   `json:"devices"`
	FP8     []moFP8    `json:"fp8_pb"`
	NVFP4   []moNVFP4  `json:"nvfp4"`
	Errors  []struct{} `json:"errors"`
}

type moFP8 struct {
	Name  string   `json:"name"`
	Shape []int    `json:"shape"`
	Input string   `json:"input"`
	CPU   moFP8Out `json:"cpu"`
	CUDA  moFP8Out `json:"cuda"`
	Elems [][3]int `json:"elements"`
}

type moFP8Out struct {
	Same       bool   `json:"same_as_cpu"`
	Q          string `json:"q"`
	Scale      string `json:"scale"`
	ScaleShape []int  `json:"scale_shape"`
}

type moNVFP4 struct {
	Name   string `json:"name"`
	Inputs map[string]struct {
		Packed string `json:"packed"`
		Scale  string `json:"scale"`
		Shape  []int  `json:"shape"`
	} `json:"inputs"`
	Results map[string]moNVFP4Res `json:"results"`
}

type moNVFP4Res struct {
	Same    bool           `json:"same_as_cpu"`
	KOwn    map[string]int `json:"kmax_own"`
	KShared map[string]int `json:"kmax_shared"`
	Proj    map[string]struct {
		KMax     int    `json:"kmax"`
		Weight   string `json:"weight"`
		Scale    string `json:"weight_scale"`
		Scale2   string `json:"weight_scale_2"`
		Blocks   int64  `json:"n_blocks"`
		Lossless int64  `json:"n_lossless"`
		Deq      string `json:"dequant_f32"`
		MXBF16   string `json:"mxfp4_bf16"`
	} `json:"proj"`
}

var (
	moOnce sync.Once
	moG    *moGoldens
	moErr  error
)

func loadModelOptGoldens(t *testing.T) *moGoldens {
	t.Helper()
	moOnce.Do(func() {
		f, err := os.Open(filepath.Join("testdata", "modelopt_goldens.json.gz"))
		if err != nil {
			moErr = err
			return
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			moErr = err
			return
		}
		var g moGoldens
		if err := json.NewDecoder(zr).Decode(&g); err != nil {
			moErr = err
			return
		}
		moG = &g
	})
	if moErr != nil {
		t.Fatal(moErr)
	}
	if len(moG.Errors) != 0 {
		t.Fatalf("the golden run reported %d errors", len(moG.Errors))
	}
	return moG
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestModelOptFP8Goldens: the ModelOpt numerics give NVIDIA's CPU bytes for
// every band without a non-finite element, and the scales as float32.
func TestModelOptFP8Goldens(t *testing.T) {
	g := loadModelOptGoldens(t)
	cases := 0
	for _, c := range g.FP8 {
		if c.Input == "" || c.CPU.Same {
			continue // the amax sweep's CPU record was lost in the run (a script bug, fixed since)
		}
		cases++
		n, k := c.Shape[0], c.Shape[1]
		in := unhex(t, c.Input)
		wantQ, wantS := unhex(t, c.CPU.Q), f32s(unhex(t, c.CPU.Scale))
		nkb := numBlocks(k)
		if len(wantQ) != n*k || len(wantS) != numBlocks(n)*nkb {
			t.Fatalf("%s: golden sizes %d, %d", c.Name, len(wantQ), len(wantS))
		}
		if got := c.CPU.ScaleShape; len(got) != 4 || got[0] != numBlocks(n) || got[1] != 1 || got[2] != nkb || got[3] != 1 {
			t.Errorf("%s: NVIDIA's scale shape %v, want [%d 1 %d 1]", c.Name, got, numBlocks(n), nkb)
		}
		q := NewQuantizer(k, BF16, ScaleFP32)
		q.Numerics = ModelOpt
		dst := make([]byte, BlockSize*k)
		sc := make([]float32, nkb)
		for band := range numBlocks(n) {
			r0, r1 := band*BlockSize, min(band*BlockSize+BlockSize, n)
			err := q.QuantizeBandAt(band, dst, sc, in[2*r0*k:2*r1*k], r1-r0)
			if hasNonFinite(in[2*r0*k : 2*r1*k]) {
				if !errors.Is(err, ErrNonFinite) {
					t.Errorf("%s band %d: non-finite input, err = %v", c.Name, band, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s band %d: %v", c.Name, band, err)
			}
			for i, b := range dst[:(r1-r0)*k] {
				if w := wantQ[r0*k+i]; b != w {
					t.Fatalf("%s: FP8 byte at row %d, col %d = 0x%02x, NVIDIA 0x%02x", c.Name, r0+i/k, i%k, b, w)
				}
			}
			for j, s := range sc {
				if w := wantS[band*nkb+j]; math.Float32bits(s) != math.Float32bits(w) {
					t.Fatalf("%s: scale of block (%d, %d) = %g, NVIDIA %g", c.Name, band, j, s, w)
				}
			}
		}
		// CUDA differs from CPU only in the NaN codes of zero-scale blocks (0x7F for 0xFF).
		if !c.CUDA.Same && c.CUDA.Q != "" {
			cq := unhex(t, c.CUDA.Q)
			finite := make([]bool, numBlocks(n))
			for b := range finite {
				finite[b] = !hasNonFinite(in[2*b*BlockSize*k : 2*min(b*BlockSize+BlockSize, n)*k])
			}
			for i := range cq {
				if !finite[i/k/BlockSize] {
					continue
				}
				if cq[i] != wantQ[i] && (wantQ[i] != 0xFF || cq[i] != 0x7F || wantS[i/k/BlockSize*nkb+i%k/BlockSize] != 0) {
					t.Errorf("%s: CUDA byte %d = 0x%02x, CPU 0x%02x outside a zero-scale block", c.Name, i, cq[i], wantQ[i])
					break
				}
			}
		}
	}
	if cases < 6 {
		t.Fatalf("only %d FP8 golden cases", cases)
	}
}

func hasNonFinite(bf16 []byte) bool {
	for i := 0; i+1 < len(bf16); i += 2 {
		if binary.LittleEndian.Uint16(bf16[i:])&0x7FFF >= 0x7F80 {
			return true
		}
	}
	return false
}

// TestModelOptNVFP4Goldens: K_max, the shared w1/w3 K_max, the cast's bytes,
// weight_scale_2, NVIDIA's lossless count, NVFP4 and MXFP4 dequantization all
// equal NVIDIA's, and the lossy count equals an exact float64 comparison.
func TestModelOptNVFP4Goldens(t *testing.T) {
	g := loadModelOptGoldens(t)
	casts := 0
	for _, c := range g.NVFP4 {
		res := c.Results["cpu"]
		if cu, ok := c.Results["cuda"]; ok && !cu.Same {
			t.Errorf("%s: NVIDIA's CUDA cast differs from its CPU cast", c.Name)
		}
		vals := map[string]int{}
		for p, in := range c.Inputs {
			var m KMax
			s := unhex(t, in.Scale)
			for len(s) > 0 { // in chunks, as a converter reading pieces would
				n := min(len(s), 7)
				if err := m.Add(s[:n]); err != nil {
					t.Fatal(err)
				}
				s = s[n:]
			}
			vals[p] = m.Value
			if m.Value != res.KOwn[p] {
				t.Errorf("%s/%s: K_max %d, NVIDIA %d", c.Name, p, m.Value, res.KOwn[p])
			}
		}
		for p, want := range res.KShared {
			if got := max(vals["w1"], vals["w3"]); got != want {
				t.Errorf("%s/%s: shared K_max %d, NVIDIA %d", c.Name, p, got, want)
			}
		}
		for key, r := range res.Proj {
			casts++
			p := key[:strings.IndexByte(key, '@')]
			in := c.Inputs[p]
			rows, k := in.Shape[0], 2*in.Shape[1]
			packed, scales := unhex(t, in.Packed), unhex(t, in.Scale)
			cast, err := NewNVFP4Cast(k, r.KMax)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]byte, len(packed))
			osc := make([]byte, rows*k/NVFP4GroupSize)
			for r0 := 0; r0 < rows; r0 += 5 {
				r1 := min(r0+5, rows)
				if err := cast.CastBand(out[r0*k/2:], osc[r0*k/16:], packed[r0*k/2:r1*k/2], scales[r0*k/32:r1*k/32], r1-r0); err != nil {
					t.Fatalf("%s: %v", key, err)
				}
			}
			name := c.Name + "/" + key
			compareBytes(t, name+" weight", out, unhex(t, r.Weight))
			compareBytes(t, name+" weight_scale", osc, unhex(t, r.Scale))
			if got, want := math.Float32bits(cast.Scale2), binary.LittleEndian.Uint32(unhex(t, r.Scale2)); got != want {
				t.Errorf("%s: weight_scale_2 0x%08x, NVIDIA 0x%08x", name, got, want)
			}
			st := cast.Stats
			if st.Blocks != r.Blocks || st.Blocks-st.OutOfRange != r.Lossless {
				t.Errorf("%s: %d blocks, %d in range; NVIDIA %d, %d lossless", name, st.Blocks, st.Blocks-st.OutOfRange, r.Blocks, r.Lossless)
			}
			if want := exactLossy(packed, scales, out, osc, cast.Scale2, k); st.Lossy != want {
				t.Errorf("%s: %d lossy blocks, exact comparison finds %d", name, st.Lossy, want)
			}
			// NVFP4 dequantization, float32 bit for bit (NaN-free here).
			deq := f32s(unhex(t, r.Deq))
			row := make([]float32, k)
			for i := range rows {
				if err := decodeNVFP4(row, out[i*k/2:], osc[i*k/16:], cast.Scale2); err != nil {
					t.Fatal(err)
				}
				for j, v := range row {
					if w := deq[i*k+j]; math.Float32bits(v) != math.Float32bits(w) {
						t.Fatalf("%s: NVFP4 value (%d, %d) = %g, NVIDIA %g", name, i, j, v, w)
					}
				}
			}
			// MXFP4 dequantization to BF16.
			mx := unhex(t, r.MXBF16)
			for i := range rows {
				if err := decodeMXFP4(row, packed[i*k/2:], scales[i*k/32:]); err != nil {
					t.Fatal(err)
				}
				for j, v := range row {
					if got, w := F32ToBF16(v), binary.LittleEndian.Uint16(mx[2*(i*k+j):]); got != w && !(math.IsInf(float64(v), 0) && w&0x7FFF == 0x7F80) {
						t.Fatalf("%s: MXFP4 value (%d, %d) bf16 0x%04x, NVIDIA 0x%04x", name, i, j, got, w)
					}
				}
			}
		}
	}
	if casts < 30 {
		t.Fatalf("only %d NVFP4 golden casts", casts)
	}
}

func compareBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, NVIDIA %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d = 0x%02x, NVIDIA 0x%02x", what, i, got[i], want[i])
		}
	}
}

// exactLossy counts the 32-blocks where some NVFP4 value differs from its
// MXFP4 value, in float64 arithmetic that is exact for both (no tables).
func exactLossy(packed, scales, out, osc []byte, scale2 float32, k int) int64 {
	var n int64
	for i, b := range scales {
		lossy := false
		for j := range MXGroupSize {
			e := i*MXGroupSize + j
			mxv := math.Ldexp(float64(nibbleValue(packed, e)), int(b)-127)
			nvs := float64(E4M3ToF32(osc[e/NVFP4GroupSize])) * float64(scale2)
			nvv := float64(nibbleValue(out, e)) * nvs
			if mxv != nvv {
				lossy = true
			}
		}
		if lossy {
			n++
		}
	}
	_ = k
	return n
}

func nibbleValue(packed []byte, e int) float32 {
	b := packed[e/2]
	if e%2 == 1 {
		b >>= 4
	}
	return e2m1Table[b&0xF]
}
