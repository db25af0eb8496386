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
	"testing"
)

// bidirGoldens are testdata/bidir_goldens.*, made by testdata/gen_bidir.py
// with torch 2.11 and compressed-tensors' own functions on an H200 host.
type bidirGoldens struct {
	Facts struct {
		Torch             string `json:"torch"`
		CompressedTensors string `json:"compressed_tensors"`
		Pack              map[string]struct {
			N, K          int
			CPUEqualsCUDA bool `json:"cpu_equals_cuda"`
		} `json:"pack"`
		Sections []struct {
			Name           string
			Offset, Length int
			SHA256         string
		} `json:"sections"`
	}
	blob []byte
}

func loadBidir(t *testing.T) *bidirGoldens {
	t.Helper()
	var g bidirGoldens
	j, err := os.ReadFile(filepath.Join("testdata", "bidir_goldens.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &g.Facts); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join("testdata", "bidir_goldens.bin.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if g.blob, err = io.ReadAll(zr); err != nil {
		t.Fatal(err)
	}
	return &g
}

func (g *bidirGoldens) sec(t *testing.T, name string) []byte {
	t.Helper()
	for _, s := range g.Facts.Sections {
		if s.Name == name {
			b := g.blob[s.Offset : s.Offset+s.Length]
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != s.SHA256 {
				t.Fatalf("section %s: sha256 differs from the manifest", name)
			}
			return b
		}
	}
	return nil
}

// TestPackMXFP4Goldens packs every golden BF16 matrix and compares each
// packed byte and scale byte with what compressed-tensors' functions wrote
// (CPU path; where its CUDA path differs the test says how).
func TestPackMXFP4Goldens(t *testing.T) {
	g := loadBidir(t)
	if g.Facts.CompressedTensors == "" || len(g.Facts.Pack) == 0 {
		t.Fatal("goldens list no MXFP4 pack cases")
	}
	for name, c := range g.Facts.Pack {
		in, wantP, wantS := g.sec(t, "pack/"+name+"/input"), g.sec(t, "pack/"+name+"/packed"), g.sec(t, "pack/"+name+"/scale")
		if in == nil || wantP == nil || wantS == nil {
			t.Fatalf("%s: sections missing", name)
		}
		n, k := c.N, c.K
		p, s := make([]byte, n*k/2), make([]byte, n*k/32)
		groups := 0
		for r := range n {
			for grp := range k / 32 {
				gi := r*k/32 + grp
				src := in[2*(r*k+grp*32) : 2*(r*k+grp*32+32)]
				_, err := packMXFP4(p[gi*16:gi*16+16], s[gi:gi+1], src, 1, 32)
				if err != nil {
					// Only a group whose amax rounds to Inf may fail; compressed-tensors
					// then writes a scale it cannot decode.
					var amax uint16
					for i := 0; i < 64; i += 2 {
						amax = max(amax, binary.LittleEndian.Uint16(src[i:])&0x7FFF)
					}
					if _, ok := mxfp4ScaleByte(amax); ok {
						t.Errorf("%s: row %d group %d: %v", name, r, grp, err)
					}
					copy(p[gi*16:gi*16+16], wantP[gi*16:gi*16+16])
					s[gi] = wantS[gi]
					continue
				}
				groups++
				if s[gi] != wantS[gi] {
					t.Errorf("%s: row %d group %d: scale byte %d, compressed-tensors %d", name, r, grp, s[gi], wantS[gi])
				}
				if !bytes.Equal(p[gi*16:gi*16+16], wantP[gi*16:gi*16+16]) {
					t.Errorf("%s: row %d group %d: packed % x, compressed-tensors % x", name, r, grp, p[gi*16:gi*16+16], wantP[gi*16:gi*16+16])
				}
			}
		}
		if groups == 0 {
			t.Errorf("%s: no group compared", name)
		}
	}
}

// TestMXFP4ToBF16Goldens decodes every (packed byte, E8M0 byte) pair and
// compares with torch (float8_e8m0fnu widened, times the E2M1 value, to BF16).
func TestMXFP4ToBF16Goldens(t *testing.T) {
	g := loadBidir(t)
	pk, sc, want := g.sec(t, "mxdeq/packed"), g.sec(t, "mxdeq/scale"), g.sec(t, "mxdeq/bf16")
	got := make([]byte, 1024)
	for r := range 256 {
		nan, err := MXFP4ToBF16(got, pk[r*256:(r+1)*256], sc[r*16:(r+1)*16])
		if err != nil {
			t.Fatal(err)
		}
		if (nan > 0) != (r == 0xFF) {
			t.Errorf("scale byte %d: %d NaN groups", r, nan)
		}
		w := want[r*1024 : (r+1)*1024]
		for i := 0; i < 1024; i += 2 {
			a, b := binary.LittleEndian.Uint16(got[i:]), binary.LittleEndian.Uint16(w[i:])
			if a != b && !(bf16IsNaN(a) && bf16IsNaN(b)) {
				t.Fatalf("scale byte %d, packed byte %d nibble %d: BF16 0x%04x, torch 0x%04x", r, i/4, (i/2)%2, a, b)
			}
		}
	}
}

func bf16IsNaN(b uint16) bool { return b&0x7FFF > 0x7F80 }

// TestFP8ToBF16EdgeGoldens: every E4M3 code times edge scales (0, Inf, NaN,
// subnormal, huge) against torch's float32 product rounded to BF16.
func TestFP8ToBF16EdgeGoldens(t *testing.T) {
	g := loadBidir(t)
	sc, want := g.sec(t, "fp8deq/scales"), g.sec(t, "fp8deq/bf16")
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	got := make([]byte, 512)
	for j := range len(sc) / 4 {
		s := math.Float32frombits(binary.LittleEndian.Uint32(sc[4*j:]))
		if err := DequantizeBandBF16(got, codes, []float32{s, s}, 1, 256); err != nil {
			t.Fatal(err)
		}
		w := want[j*512 : (j+1)*512]
		for i := 0; i < 512; i += 2 {
			a, b := binary.LittleEndian.Uint16(got[i:]), binary.LittleEndian.Uint16(w[i:])
			if a != b && !(bf16IsNaN(a) && bf16IsNaN(b)) {
				t.Errorf("scale %g, code 0x%02x: BF16 0x%04x, torch 0x%04x", s, i/2, a, b)
			}
		}
	}
}

// TestNVFP4ToBF16Goldens: NVFP4 codes × (E4M3 scale · scale_2) in float32,
// to BF16, against torch, for every E4M3 scale byte and five scale_2 values.
func TestNVFP4ToBF16Goldens(t *testing.T) {
	g := loadBidir(t)
	pk, sc, s2 := g.sec(t, "nvdeq/packed"), g.sec(t, "nvdeq/scale"), g.sec(t, "nvdeq/scale2")
	got := make([]byte, 256)
	for j := range len(s2) / 4 {
		s := math.Float32frombits(binary.LittleEndian.Uint32(s2[4*j:]))
		want := g.sec(t, "nvdeq/bf16_"+string(rune('0'+j)))
		for r := range 256 {
			if err := NVFP4ToBF16(got, pk[r*64:(r+1)*64], sc[r*8:(r+1)*8], s); err != nil {
				t.Fatal(err)
			}
			w := want[r*256 : (r+1)*256]
			for i := 0; i < 256; i += 2 {
				a, b := binary.LittleEndian.Uint16(got[i:]), binary.LittleEndian.Uint16(w[i:])
				if a != b && !(bf16IsNaN(a) && bf16IsNaN(b)) {
					t.Errorf("scale_2 %g, row %d, element %d: BF16 0x%04x, torch 0x%04x", s, r, i/2, a, b)
				}
			}
		}
	}
}

// TestPackMXFP4GoldensCUDA: where compressed-tensors' functions gave other
// bytes on CUDA than on CPU, the group is one PackMXFP4 refuses (amax rounds
// to Inf, and the Inf scale's byte is what each device's float → int32 cast
// of Inf makes of it).
func TestPackMXFP4GoldensCUDA(t *testing.T) {
	g := loadBidir(t)
	n := 0
	for name, c := range g.Facts.Pack {
		if c.CPUEqualsCUDA {
			continue
		}
		in, wantP, wantS := g.sec(t, "pack/"+name+"/input"), g.sec(t, "pack/"+name+"/packed_cuda"), g.sec(t, "pack/"+name+"/scale_cuda")
		for gi := range c.N * c.K / 32 {
			p, s := make([]byte, 16), make([]byte, 1)
			_, err := packMXFP4(p, s, in[64*gi:64*gi+64], 1, 32)
			same := s[0] == wantS[gi] && bytes.Equal(p, wantP[16*gi:16*gi+16])
			if err == nil {
				n++
			}
			if err == nil && !same {
				t.Errorf("%s: group %d: % x / %d, compressed-tensors on CUDA % x / %d", name, gi, p, s[0], wantP[16*gi:16*gi+16], wantS[gi])
			}
		}
	}
	if n == 0 {
		t.Fatal("no CUDA case compared")
	}
}
