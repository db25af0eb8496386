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

// TestGatherHeadsDCPGolden: q_b_proj [18432, 1536] split over 8 ranks of 12
// heads × 192 rows, whose packed UE8M0 scales are gathered per head. Each
// rank's packing and the gathered whole must equal DeepGEMM's packing of the
// slices and of the full grid.
func TestGatherHeadsDCPGolden(t *testing.T) {
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
	rows, kb := d.N/d.Ranks, NumBlocks(d.K)
	parts := make([][]int32, d.Ranks)
	counts := make([]int, d.Ranks)
	for r := range d.Ranks {
		b0, b1 := r*rows/BlockSize, (r+1)*rows/BlockSize
		if parts[r], err = PackUE8M0(scales[b0*kb:b1*kb], rows, d.K); err != nil {
			t.Fatal(err)
		}
		counts[r] = rows
		if got := shaHex(int32Bytes(parts[r])); got != d.PartSHA[r] {
			t.Errorf("rank %d packing sha256 %s, DeepGEMM %s", r, got, d.PartSHA[r])
		}
	}
	gathered, err := GatherHeadsUE8M0(parts, counts, d.K)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gathered, full) {
		t.Errorf("gathered heads differ from the direct packing")
	}
	// Concatenating the ranks' packed buffers (a bug once) is not the same.
	if slices.Equal(slices.Concat(parts...), full) {
		t.Errorf("plain concatenation equals the packing: the test proves nothing")
	}
}

func randomUE8M0(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = math.Float32frombits(uint32(1+rng.IntN(254)) << 23)
	}
	return s
}

// TestGatherHeadsProperty: for random shapes and random head splits on
// 128-row boundaries, unpack → gather → repack equals packing the whole.
func TestGatherHeadsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		nb, k := 1+rng.IntN(20), 1+rng.IntN(3000)
		last := 1 + rng.IntN(BlockSize) // the last block may be partial
		n := (nb-1)*BlockSize + last
		kb := NumBlocks(k)
		scales := randomUE8M0(rng, nb*kb)
		full, err := PackUE8M0(scales, n, k)
		if err != nil {
			t.Fatal(err)
		}
		var parts [][]int32
		var counts []int
		for b := 0; b < nb; {
			take := min(1+rng.IntN(4), nb-b)
			rows := take * BlockSize
			if b+take == nb {
				rows = n - b*BlockSize
			}
			p, err := PackUE8M0(scales[b*kb:(b+take)*kb], rows, k)
			if err != nil {
				t.Fatal(err)
			}
			parts, counts = append(parts, p), append(counts, rows)
			b += take
		}
		got, err := GatherHeadsUE8M0(parts, counts, k)
		if err != nil {
			t.Fatalf("n=%d k=%d split %v: %v", n, k, counts, err)
		}
		if !slices.Equal(got, full) {
			t.Fatalf("n=%d k=%d split %v: gather differs from direct packing", n, k, counts)
		}
	}
}

// TestGatherHeadsUnaligned: a split inside a 128-row block works when both
// sides agree on that block's scales, and is an error when they do not.
func TestGatherHeadsUnaligned(t *testing.T) {
	const k = 512
	rng := rand.New(rand.NewPCG(3, 4))
	scales := randomUE8M0(rng, 2*NumBlocks(k)) // 256 rows
	kb := NumBlocks(k)
	full, _ := PackUE8M0(scales, 256, k)
	// rows 0..191 and 192..255: the second part lies inside block 1.
	a, _ := PackUE8M0(scales, 192, k)
	b, _ := PackUE8M0(scales[kb:], 64, k)
	got, err := GatherHeadsUE8M0([][]int32{a, b}, []int{192, 64}, k)
	if err != nil || !slices.Equal(got, full) {
		t.Fatalf("agreeing unaligned split: err %v, equal %v", err, slices.Equal(got, full))
	}
	other := slices.Clone(scales[kb:])
	other[2] *= 2
	c, _ := PackUE8M0(other, 64, k)
	if _, err := GatherHeadsUE8M0([][]int32{a, c}, []int{192, 64}, k); !errors.Is(err, errInconsistent) {
		t.Fatalf("disagreeing unaligned split: err %v, want ErrInconsistent", err)
	}
}

func TestUnpackUE8M0Rejects(t *testing.T) {
	const n, k = 300, 700 // 3×6 blocks, 2 words per row, stride 300
	rng := rand.New(rand.NewPCG(5, 6))
	scales := randomUE8M0(rng, NumBlocks(n)*NumBlocks(k))
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
		if _, err := PackUE8M0(scales, 10, 200); !errors.Is(err, ErrNotUE8M0) {
			t.Errorf("scale %g: %v, want ErrNotUE8M0", s, err)
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
