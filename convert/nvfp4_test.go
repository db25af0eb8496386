package convert

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// nvidiaOpts are the options of `convert --recipe modelopt-k3 --experts nvfp4
// --numerics modelopt`, the drop-in for NVIDIA's converter.
var nvidiaOpts = Options{Format: modelOpt, Experts: ExpertsNVFP4, Numerics: quant.ModelOpt}

func convertNVIDIA(t *testing.T, src, dst string) *Result {
	t.Helper()
	return convertRecipe(t, src, dst, ModelOptK3, nvidiaOpts)
}

func verifyDir(t *testing.T, src, dst string) *VerifyReport {
	t.Helper()
	rep, err := Verify(context.Background(), openSrc(t, src), dst, VerifyOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// readTensor reads a whole (small) tensor of a checkpoint.
func readTensor(t *testing.T, c *safetensors.Checkpoint, name string) []byte {
	t.Helper()
	f, ti, ok := c.Lookup(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	return readAll(t, f.Section(ti))
}

// mxfp4Projections lists the bases X of the source's X.weight_packed.
func mxfp4Projections(c *safetensors.Checkpoint) []string {
	var out []string
	for _, f := range c.Files {
		for _, ti := range f.Tensors {
			if base, packed, ok := model.K3Classifier().MXFP4Part(ti.Name); ok && packed {
				out = append(out, base)
			}
		}
	}
	return out
}

// e8m0KMax is NVIDIA's mxfp4_kmax, written out: the largest byte − 127 over
// the non-zero bytes, 0 when all are zero.
func e8m0KMax(b []byte) int {
	top := 0
	for _, x := range b {
		top = max(top, int(x))
	}
	if top == 0 {
		return 0
	}
	return top - 127
}

// checkNVFP4Files checks every cast projection through the files alone: the
// four NVIDIA tensors present (and the MXFP4 codes gone), input_scale 1.0,
// weight_scale_2 = 2^(K_max − 8) with K_max shared by w1 and w3, and each
// 32-element block's NVFP4 dequantization equal to the source's MXFP4 one,
// except in the blocks it returns as differing.
func checkNVFP4Files(t *testing.T, srcDir, dst string) (projections int, differing int64) {
	t.Helper()
	src, out := openSrc(t, srcDir), openSrc(t, dst)
	for _, base := range mxfp4Projections(src) {
		projections++
		if _, _, ok := out.Lookup(base + ".weight_packed"); ok {
			t.Fatalf("%s.weight_packed still in the output", base)
		}
		packed := readTensor(t, src, base+".weight_packed")
		e8 := readTensor(t, src, mxfp4Scales(base))
		codes := readTensor(t, out, base+".weight")
		e4 := readTensor(t, out, base+".weight_scale")
		s2 := math.Float32frombits(binary.LittleEndian.Uint32(readTensor(t, out, base+".weight_scale_2")))
		in := math.Float32frombits(binary.LittleEndian.Uint32(readTensor(t, out, base+".input_scale")))
		if in != 1 {
			t.Fatalf("%s.input_scale = %g, want 1", base, in)
		}
		kmax := e8m0KMax(e8)
		if p, ok := model.K3Classifier().NVFP4ScalePartner(base); ok {
			kmax = max(kmax, e8m0KMax(readTensor(t, src, mxfp4Scales(p))))
		}
		if want := float32(math.Ldexp(1, kmax-8)); s2 != want {
			t.Fatalf("%s.weight_scale_2 = %g, want 2^(%d-8)", base, s2, kmax)
		}
		_, pi, _ := src.Lookup(base + ".weight_packed")
		n, k := int(pi.Shape[0]), int(2*pi.Shape[1])
		if len(codes) != n*k/2 || len(e4) != n*k/16 {
			t.Fatalf("%s: %d code and %d scale bytes for [%d, %d]", base, len(codes), len(e4), n, k)
		}
		// Both decodings are exact in BF16 (2- and 6-bit significands).
		mx, nv := make([]byte, 2*k), make([]byte, 2*k)
		for r := range n {
			if nan, err := quant.MXFP4ToBF16(mx, packed[r*k/2:(r+1)*k/2], e8[r*k/32:(r+1)*k/32]); err != nil || nan != 0 {
				t.Fatalf("%s row %d: %d NaN groups, %v", base, r, nan, err)
			}
			if err := quant.NVFP4ToBF16(nv, codes[r*k/2:(r+1)*k/2], e4[r*k/16:(r+1)*k/16], s2); err != nil {
				t.Fatal(err)
			}
			for b := 0; b < k; b += 32 {
				for i := b; i < b+32; i++ {
					x := quant.BF16ToF32(binary.LittleEndian.Uint16(mx[2*i:]))
					y := quant.BF16ToF32(binary.LittleEndian.Uint16(nv[2*i:]))
					if x != y { // ±0 compare equal
						differing++
						break
					}
				}
			}
		}
	}
	return projections, differing
}

// NVIDIA's recipe with NVFP4 experts, on the mini replica and (in the full
// suite) the tiny one: every cast block's value equals the MXFP4 one, the
// conversion verifies, is reproducible, and a flipped byte in each NVFP4
// tensor kind is a violation naming it.
func TestConvertNVFP4ModelOpt(t *testing.T) {
	t.Parallel()
	srcs := []string{miniSrc}
	if !testing.Short() {
		srcs = append(srcs, tinySrc(t))
	}
	for _, src := range srcs {
		checkNVFP4ModelOpt(t, src)
	}
}

func checkNVFP4ModelOpt(t *testing.T, src string) {
	dst, res := sharedConversion(t, src, ModelOptK3, nvidiaOpts)
	n, differing := checkNVFP4Files(t, src, dst)
	if n == 0 || differing != 0 {
		t.Fatalf("%d projections, %d blocks whose NVFP4 value differs from MXFP4", n, differing)
	}
	// The replica's scales lie within 17 exponents of K_max: all lossless.
	if res.Cast.Blocks == 0 || res.Cast.OutOfRange != 0 || res.Cast.Lossy != 0 {
		t.Fatalf("cast counts %+v", res.Cast)
	}
	rep := verifyDir(t, src, dst)
	if !rep.OK || rep.NVFP4 != n || rep.Cast != res.Cast || rep.Experts != ExpertsNVFP4 || rep.Numerics != "modelopt" {
		t.Fatalf("verify: ok %v, %d projections (want %d), cast %+v (convert %+v), %v/%s; %v", rep.OK, rep.NVFP4, n, rep.Cast, res.Cast, rep.Experts, rep.Numerics, rep.Violations)
	}
	// The same conversion twice gives the same bytes.
	again := filepath.Join(t.TempDir(), "again")
	convertNVIDIA(t, src, again)
	sameTree(t, again, dst)

	// A flipped byte in each NVFP4 tensor kind is a violation naming it.
	bad := filepath.Join(t.TempDir(), "bad")
	copyTree(t, dst, bad)
	out := openSrc(t, bad)
	base := "language_model.model.layers.3.block_sparse_moe.experts.2.w1"
	for _, name := range []string{base + ".weight_scale", base + ".weight", base + ".weight_scale_2"} {
		f, ti, ok := out.Lookup(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		patch(t, filepath.Join(bad, f.Path), f.DataStart+ti.Begin+min(ti.Size()-1, 5), 0x33)
	}
	rep = verifyDir(t, src, bad)
	joined := strings.Join(rep.Violations, "\n")
	for _, want := range []string{
		base + ".weight_scale: E4M3 scales differ from a fresh cast",
		base + ".weight: NVFP4 codes differ from a fresh cast",
		base + ".weight_scale_2: weight_scale_2 bytes",
	} {
		if rep.OK || !strings.Contains(joined, want) {
			t.Fatalf("flipped byte not reported as %q:\n%s", want, joined)
		}
	}
}

// TestNVFP4OutOfRangeCounted crafts an expert whose scales span more than
// E4M3's window (in a copy of the mini replica): convert and verify count
// the blocks, NVIDIA's way.
func TestNVFP4OutOfRangeCounted(t *testing.T) {
	shard := miniShard(2)
	srcDir := copyWithShard(t, shard)
	src := openSrc(t, srcDir)
	base := "language_model.model.layers.2.block_sparse_moe.experts.5.w3"
	f, ti, ok := src.Lookup(mxfp4Scales(base))
	if !ok {
		t.Fatal("no scales")
	}
	path := filepath.Join(srcDir, f.Path)
	// Three blocks at 2^-126, far below K_max: out of range, and their
	// non-zero codes round to zero (lossy).
	for _, i := range []int64{0, 1, 7} {
		patch(t, path, f.DataStart+ti.Begin+i, 0x01)
	}
	packed := readTensor(t, src, base+".weight_packed")
	for _, i := range []int{0, 1, 7} {
		if allZero(packed[16*i : 16*i+16]) {
			t.Fatalf("block %d has no non-zero code: pick another", i)
		}
	}
	src.Close()

	dst := filepath.Join(t.TempDir(), "nv")
	res := convertNVIDIA(t, srcDir, dst)
	if res.Cast.OutOfRange != 3 || res.Cast.Lossy != 3 {
		t.Fatalf("cast counts %+v, want 3 out of range and 3 lossy", res.Cast)
	}
	if _, differing := checkNVFP4Files(t, srcDir, dst); differing != 3 {
		t.Fatalf("%d blocks whose NVFP4 value differs from MXFP4, want the 3 crafted ones", differing)
	}
	rep := verifyDir(t, srcDir, dst)
	if !rep.OK || rep.Cast != res.Cast {
		t.Fatalf("verify: ok %v, cast %+v (convert %+v); %v", rep.OK, rep.Cast, res.Cast, rep.Violations)
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// TestModelOptZeroTileCounted: an all-zero 128×128 tile gets ModelOpt's
// scale 0 and NaN codes (0xFF, what NVIDIA's CPU run writes); convert and
// verify count it, and verify accepts it (in a copy of the mini replica).
func TestModelOptZeroTileCounted(t *testing.T) {
	shard := miniShard(1)
	srcDir := copyWithShard(t, shard)
	src := openSrc(t, srcDir)
	name := "language_model.model.layers.1.self_attn.q_proj.weight"
	f, ti, ok := src.Lookup(name)
	if !ok || ti.DType != safetensors.BF16 || ti.Shape[0] < 128 || ti.Shape[1] < 128 {
		t.Fatalf("%s: %v %v", name, ti.DType, ti.Shape)
	}
	src.Close()
	fh, err := os.OpenFile(filepath.Join(srcDir, f.Path), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, 2*128)
	for r := range int64(128) {
		if _, err := fh.WriteAt(zero, f.DataStart+ti.Begin+r*2*ti.Shape[1]); err != nil {
			t.Fatal(err)
		}
	}
	fh.Close()

	dst := filepath.Join(t.TempDir(), "nv")
	res := convertNVIDIA(t, srcDir, dst)
	if res.ZeroScaleBlocks != 1 {
		t.Fatalf("%d zero-scale blocks, want 1", res.ZeroScaleBlocks)
	}
	out := openSrc(t, dst)
	codes := readTensor(t, out, name)
	scales := readTensor(t, out, strings.TrimSuffix(name, ".weight")+".weight_scale")
	if codes[0] != 0xFF || codes[127] != 0xFF || binary.LittleEndian.Uint32(scales) != 0 {
		t.Fatalf("zero tile: codes %#x %#x, scale bits %#x; want NaN codes 0xff and scale 0", codes[0], codes[127], binary.LittleEndian.Uint32(scales))
	}
	rep := verifyDir(t, srcDir, dst)
	if !rep.OK || rep.ZeroScaleBlocks != 1 {
		t.Fatalf("verify: ok %v, %d zero-scale blocks; %v", rep.OK, rep.ZeroScaleBlocks, rep.Violations)
	}
}

// TestModelOptRefusals: combinations without a meaning are refused before
// anything is planned.
func TestModelOptRefusals(t *testing.T) {
	t.Parallel()
	c := openSrc(t, miniSrc)
	r, _ := Lookup(ModelOptK3)
	for _, o := range []Options{
		{Format: deepSeek, Experts: ExpertsNVFP4},
		{Format: modelOpt, Numerics: quant.ModelOpt, ScaleFmt: quant.ScaleUE8M0},
	} {
		if _, err := NewPlan(c, nil, r, o); err == nil {
			t.Fatalf("%+v planned", o)
		}
	}
}

// The planner refuses a w1 whose w3 (which shares its weight_scale_2) is not
// in the same file, as NVIDIA's converter does, and MXFP4 scales of the
// wrong shape, naming the tensor.
func TestNVFP4PlanRefusals(t *testing.T) {
	t.Parallel()
	r, _ := Lookup(ModelOptK3)
	e := "language_model.model.layers.1.block_sparse_moe.experts.0."
	u8 := func(name string, shape ...int64) safetensors.TensorSpec {
		return safetensors.TensorSpec{Name: name, DType: safetensors.U8, Shape: shape}
	}
	for _, c := range []struct {
		specs []safetensors.TensorSpec
		want  string
	}{
		{[]safetensors.TensorSpec{u8(e+"w1.weight_packed", 4, 32), u8(e+"w1.weight_scale", 4, 2)}, "not in the same file"},
		{[]safetensors.TensorSpec{u8(e+"w2.weight_packed", 4, 32), u8(e+"w2.weight_scale", 4, 3)}, "are not the E8M0 scales"},
	} {
		path := filepath.Join(t.TempDir(), "model-00002-of-000096.safetensors")
		data := make([][]byte, len(c.specs))
		for i, s := range c.specs {
			data[i] = make([]byte, s.Shape[0]*s.Shape[1])
		}
		writeFile(t, path, c.specs, data)
		f, err := safetensors.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, _, err = planFile(filepath.Dir(path), f, r, nvidiaOpts)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), e) {
			t.Errorf("%s: %v, want an error naming the tensor and %q", c.specs[0].Name, err, c.want)
		}
	}
}
