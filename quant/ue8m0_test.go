package quant

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func int32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		putElem(b, F32, i, uint32(x))
	}
	return b
}

func f32FromBytes(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(u32At(b, i))
	}
	return v
}

// TestPackUE8M0Golden packs the UE8M0 scales torch made for each golden
// matrix and compares every word with DeepGEMM's layout as the generator
// built it; unpacking gives the scales back.
func TestPackUE8M0Golden(t *testing.T) {
	g := golden(t)
	for _, c := range g.Cases {
		scales := f32FromBytes(g.mustSection(t, c.Name+"/scales_ue8m0"))
		want := g.mustSection(t, c.Name+"/packed_ue8m0")
		words, stride := PackedUE8M0Shape(c.N, c.K)
		if 4*words*stride != len(want) {
			t.Fatalf("%s: shape %d×%d, torch buffer has %d bytes", c.Name, words, stride, len(want))
		}
		got, err := PackUE8M0(scales, c.N, c.K)
		if err != nil {
			t.Fatal(err)
		}
		if gb := int32Bytes(got); string(gb) != string(want) {
			for i := range got {
				if uint32(got[i]) != u32At(want, i) {
					t.Errorf("%s: word %d (K word %d, row %d) = 0x%08x, DeepGEMM 0x%08x", c.Name, i, i/stride, i%stride, uint32(got[i]), u32At(want, i))
					break
				}
			}
		}
		back, err := UnpackUE8M0(got, c.N, c.K)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(back, scales) {
			t.Errorf("%s: unpack(pack(scales)) differs", c.Name)
		}
	}
}

// TestPackDCPSlicesGolden: q_b_proj [18432, 1536] split over 8 ranks of 12
// heads × 192 rows. Each rank's packing and the packing of the whole must
// equal DeepGEMM's packing of the slices and of the full grid.
func TestPackDCPSlicesGolden(t *testing.T) {
	g := golden(t)
	d := g.DCP
	exps := g.mustSection(t, "dcp/exponents")
	scales := make([]float32, len(exps))
	for i, e := range exps {
		scales[i] = math.Float32frombits(uint32(e) << 23)
	}
	full, err := PackUE8M0(scales, d.N, d.K)
	if err != nil {
		t.Fatal(err)
	}
	if got := shaHex(int32Bytes(full)); got != d.FullSHA {
		t.Errorf("full packing sha256 %s, DeepGEMM %s", got, d.FullSHA)
	}
	rows, kb := d.N/d.Ranks, numBlocks(d.K)
	for r := range d.Ranks {
		b0, b1 := r*rows/BlockSize, (r+1)*rows/BlockSize
		part, err := PackUE8M0(scales[b0*kb:b1*kb], rows, d.K)
		if err != nil {
			t.Fatal(err)
		}
		if got := shaHex(int32Bytes(part)); got != d.PartSHA[r] {
			t.Errorf("rank %d packing sha256 %s, DeepGEMM %s", r, got, d.PartSHA[r])
		}
	}
}

func randomUE8M0(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = math.Float32frombits(uint32(1+rng.IntN(254)) << 23)
	}
	return s
}

func TestUnpackUE8M0Rejects(t *testing.T) {
	const n, k = 300, 700 // 3×6 blocks, 2 words per row, stride 300
	rng := rand.New(rand.NewPCG(5, 6))
	scales := randomUE8M0(rng, numBlocks(n)*numBlocks(k))
	p, err := PackUE8M0(scales, n, k)
	if err != nil {
		t.Fatal(err)
	}
	_, stride := PackedUE8M0Shape(n, k)
	bad := slices.Clone(p)
	bad[stride+200]++ // row 200 (block 1) word 1 disagrees with row 128
	if _, err := UnpackUE8M0(bad, n, k); !errors.Is(err, errInconsistent) {
		t.Errorf("disagreeing row: %v, want ErrInconsistent", err)
	}
	bad = slices.Clone(p)
	for r := range n { // slot 3 of word 1 is column block 7, past the 6 that exist
		bad[stride+r] |= 1 << 24
	}
	if _, err := UnpackUE8M0(bad, n, k); !errors.Is(err, errInconsistent) {
		t.Errorf("non-zero padding slot: %v, want ErrInconsistent", err)
	}
	bad = slices.Clone(p)
	for r := range BlockSize {
		bad[r] |= 0xFF
	}
	if _, err := UnpackUE8M0(bad, n, k); !errors.Is(err, ErrNonFinite) {
		t.Errorf("exponent 0xff: %v, want ErrNonFinite", err)
	}
	if _, err := UnpackUE8M0(p[1:], n, k); !errors.Is(err, errShape) {
		t.Errorf("short buffer: %v, want ErrShape", err)
	}
	if _, err := UnpackUE8M0(p, 0, k); !errors.Is(err, errShape) {
		t.Errorf("zero rows: %v, want ErrShape", err)
	}
	// The padding rows 300..303 do not exist here (300 % 4 == 0); with
	// n = 299 row 299 is padding and may hold anything.
	p2, _ := PackUE8M0(scales, 299, k)
	p2[299] = -1
	if _, err := UnpackUE8M0(p2, 299, k); err != nil {
		t.Errorf("garbage in a padding row: %v", err)
	}
}

func TestPackUE8M0Rejects(t *testing.T) {
	for _, s := range []float32{1.5, -2, float32(math.Inf(1)), float32(math.NaN()), 0x1p-140} {
		scales := []float32{1, s}
		if _, err := PackUE8M0(scales, 10, 200); !errors.Is(err, errNotUE8M0) {
			t.Errorf("scale %g: %v, want errNotUE8M0", s, err)
		}
	}
	if _, err := PackUE8M0([]float32{1}, 10, 200); !errors.Is(err, errShape) {
		t.Errorf("one scale for two blocks: %v, want ErrShape", err)
	}
	// zero is a representable UE8M0 byte (DeepGEMM's packer accepts it)
	if _, err := PackUE8M0([]float32{0, 1}, 10, 200); err != nil {
		t.Errorf("zero scale: %v", err)
	}
}
