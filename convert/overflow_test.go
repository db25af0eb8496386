package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
)

// writeWeightBits overwrites a BF16 tensor of a copyWithShard tree with bit
// patterns from gen.
func writeWeightBits(t *testing.T, src, shard, name string, gen func(i int) uint16) {
	t.Helper()
	c := openSrc(t, src)
	f, ti, ok := c.Lookup(name)
	if !ok {
		t.Fatalf("no %s", name)
	}
	path := filepath.Join(src, f.Path)
	n := ti.Shape[0] * ti.Shape[1]
	b := make([]byte, 2*n)
	for i := range int(n) {
		binary.LittleEndian.PutUint16(b[2*i:], gen(i))
	}
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(b, f.DataStart+ti.Begin); err != nil {
		t.Fatal(err)
	}
}

// One finite BF16 near the maximum in a weight: with UE8M0 scales its block
// is refused naming the tensor and block (its code would dequantize to
// +Inf), nothing is left in DST; with FP32 scales it converts and verifies.
func TestUE8M0OverflowRefused(t *testing.T) {
	shard := miniShard(0)
	name := "language_model.model.layers.0.mlp.down_proj.weight"
	src := copyWithShard(t, shard)
	c := openSrc(t, src)
	_, ti, _ := c.Lookup(name)
	k := int(ti.Shape[1])
	row, col := 130, 300 // row band 1, column block 2
	writeWeightBits(t, src, shard, name, func(i int) uint16 {
		if i == row*k+col {
			return 0x7F7F
		}
		return 0x3F80 // 1.0
	})
	dst := filepath.Join(t.TempDir(), "out")
	_, err := convertDir(src, dst, Options{ScaleFmt: quant.ScaleUE8M0}, ExecOptions{Jobs: 1})
	if !errors.Is(err, quant.ErrRange) || !strings.Contains(err.Error(), name) ||
		!strings.Contains(err.Error(), "amax 0x7f7f in 128×128 block 1,2") || !strings.Contains(err.Error(), "--scale-fmt fp32") {
		t.Fatalf("near-max weight under ue8m0: %v", err)
	}
	for _, e := range listDir(t, dst) {
		if e == shard || strings.HasPrefix(e, ".k3tmp-") {
			t.Errorf("%s left in DST after the error", e)
		}
	}
	dst2 := filepath.Join(t.TempDir(), "out2")
	if _, err := convertDir(src, dst2, Options{}, ExecOptions{Jobs: 1}); err != nil {
		t.Fatal(err)
	}
	if rep := verifyDir(t, src, dst2); !rep.OK {
		t.Fatalf("fp32 scales: %v", rep.Violations)
	}
}

// Property: over random BF16 bit patterns in a weight to quantize, a
// conversion that succeeds verifies, for every format, numerics and scale
// format (and both non-finite policies): convert never writes what verify
// rejects.
func TestConvertSucceedsThenVerifies(t *testing.T) {
	skipShort(t)
	shard := miniShard(0)
	name := "language_model.model.layers.0.mlp.down_proj.weight"
	rng := rand.New(rand.NewSource(246))
	gens := []struct {
		what string
		nf   nonFinitePolicy
		gen  func(i int) uint16
	}{
		{"any bits, non-finite zeroed", nonFiniteZero, func(int) uint16 { return uint16(rng.Intn(1 << 16)) }},
		{"finite bits", nonFiniteError, func(int) uint16 {
			b := uint16(rng.Intn(1 << 16))
			if b&0x7F80 == 0x7F80 {
				b &^= 0x0080
			}
			return b
		}},
		{"ordinary values, some near the maximum", nonFiniteError, func(int) uint16 {
			if rng.Intn(4000) == 0 {
				return 0x7F00 | uint16(rng.Intn(0x80)) | uint16(rng.Intn(2))<<15
			}
			return 0x3C00 | uint16(rng.Intn(0x400)) | uint16(rng.Intn(2))<<15
		}},
	}
	trials := 1 // the generators rotate over the combinations
	if !testing.Short() {
		trials = 2
	}
	converted, refused := 0, 0
	n := 0
	for _, f := range []model.Format{modelOpt, deepSeek, compressedTensors} {
		for _, num := range []quant.Numerics{quant.DeepGEMM, quant.ModelOpt} {
			for _, sf := range []quant.ScaleFmt{quant.ScaleFP32, quant.ScaleUE8M0} {
				for tr := 0; tr < trials; tr++ {
					g := gens[(n+tr)%len(gens)]
					what := fmt.Sprintf("%v/%v/%v, %s", f, num, sf, g.what)
					src := copyWithShard(t, shard)
					writeWeightBits(t, src, shard, name, g.gen)
					opts := Options{Format: f, Numerics: num, ScaleFmt: sf, NonFinite: g.nf}
					dst := filepath.Join(t.TempDir(), "out")
					if _, _, err := planFor(src, opts); err != nil {
						continue // a combination the planner refuses: nothing written
					}
					if _, err := convertDir(src, dst, opts, ExecOptions{Jobs: 2}); err != nil {
						if !errors.Is(err, quant.ErrRange) && !errors.Is(err, errNonFinite) {
							t.Fatalf("%s: convert: %v", what, err)
						}
						refused++
						continue
					}
					converted++
					rep, err := Verify(context.Background(), openSrc(t, src), dst, VerifyOptions{Jobs: 2, NonFinite: g.nf})
					if err != nil || !rep.OK {
						t.Fatalf("%s: convert succeeded, verify: %v %v", what, err, rep.Violations)
					}
				}
				n++
			}
		}
	}
	if converted == 0 {
		t.Fatal("no combination converted")
	}
	t.Logf("%d converted and verified, %d refused", converted, refused)
}
