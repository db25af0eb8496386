package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// convertRecipe converts src into dst with a named recipe.
func convertRecipe(t *testing.T, src, dst, recipe string, opts Options) *Result {
	t.Helper()
	c := openSrc(t, src)
	r, err := Lookup(recipe)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(c, nil, r, opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Finalized {
		t.Fatal("not finalized")
	}
	return res
}

type tensorData struct {
	dtype safetensors.DType
	shape []int64
	data  []byte
}

// tensorsOf reads every tensor of a checkpoint.
func tensorsOf(t *testing.T, dir string) map[string]tensorData {
	t.Helper()
	c := openSrc(t, dir)
	m := map[string]tensorData{}
	for _, f := range c.Files {
		for _, ti := range f.Tensors {
			b := readAll(t, f.Section(ti))
			m[ti.Name] = tensorData{ti.DType, ti.Shape, b}
		}
	}
	return m
}

// refMXFP4 decodes MXFP4 the way the format defines it (code value ×
// 2^(byte−127), exact in BF16), independently of package quant.
func refMXFP4(t *testing.T, packed, scales []byte, k int) []byte {
	t.Helper()
	vals := [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	out := make([]byte, 4*len(packed))
	for i := range 2 * len(packed) {
		c := packed[i/2] >> (4 * (i % 2)) & 0xF
		row, col := i/k, i%k
		v := math.Ldexp(vals[c&7], int(scales[row*k/32+col/32])-127)
		if c&8 != 0 {
			v = -v
		}
		u := math.Float32bits(float32(v))
		if u&0xFFFF != 0 {
			t.Fatalf("MXFP4 value %g is not a BF16", v)
		}
		binary.LittleEndian.PutUint16(out[2*i:], uint16(u>>16))
	}
	return out
}

func hasQuantConfig(t *testing.T, dir string) (top, text bool) {
	t.Helper()
	cfg := readJSONFile(t, filepath.Join(dir, model.ConfigName))
	_, top = cfg[quantKey]
	if tc, ok := cfg[textKey].(map[string]any); ok {
		_, text = tc[quantKey]
	}
	return top, text
}

// TestBidirExpertsRoundTrip: the release's MXFP4 experts → BF16 masters →
// MXFP4 again. The BF16 values are the exact decode; packing them back
// restores every value, the config is the source's, and every byte comes
// back wherever the source's scale byte is the one compressed-tensors' rule
// picks for those values and the group holds no −0 code; verify re-derives
// both outputs bit for bit.
func TestBidirExpertsRoundTrip(t *testing.T) {
	t.Parallel()
	bf, res := sharedConversion(t, miniSrc, BF16, Options{Experts: ExpertsBF16})
	src, back := tensorsOf(t, miniSrc), tensorsOf(t, bf)
	if top, text := hasQuantConfig(t, bf); top || text {
		t.Errorf("BF16 output keeps a quantization_config (top %v, text_config %v)", top, text)
	}
	if _, err := os.Stat(filepath.Join(bf, HFQuantConfigName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("BF16 output has %s: %v", HFQuantConfigName, err)
	}
	for name, body := range sideFiles {
		if strings.HasPrefix(name, ".") {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(bf, filepath.FromSlash(name))); err != nil || string(b) != body {
			t.Errorf("side file %s not copied: %v", name, err)
		}
	}
	experts := 0
	for name, s := range src {
		base, packed, ok := model.K3Classifier().MXFP4Part(name)
		switch {
		case !ok:
			if b, ok := back[name]; !ok || !bytes.Equal(b.data, s.data) || b.dtype != s.dtype {
				t.Fatalf("%s: not copied unchanged", name)
			}
		case packed:
			experts++
			w, ok := back[base+".weight"]
			sc := src[base+".weight_scale"]
			k := int(2 * s.shape[1])
			if !ok || w.dtype != safetensors.BF16 || !reflect.DeepEqual(w.shape, []int64{s.shape[0], int64(k)}) {
				t.Fatalf("%s.weight: %v %v, want BF16 [%d, %d]", base, w.dtype, w.shape, s.shape[0], k)
			}
			if !bytes.Equal(w.data, refMXFP4(t, s.data, sc.data, k)) {
				t.Fatalf("%s.weight is not the exact decode of its MXFP4 source", base)
			}
		}
		if _, left := back[base+".weight_packed"]; ok && left {
			t.Fatalf("%s: MXFP4 tensors left in the BF16 output", base)
		}
	}
	if experts == 0 || res.Decoded != experts {
		t.Fatalf("%d expert projections, %d decoded", experts, res.Decoded)
	}

	decoded := res
	mx, res := sharedConversion(t, bf, BF16, Options{Experts: ExpertsMXFP4})
	if res.Packed != experts || res.Pack.Lossy != 0 {
		t.Fatalf("packed %d of %d, %d lossy groups", res.Packed, experts, res.Pack.Lossy)
	}
	if a, b := readJSONFile(t, filepath.Join(miniSrc, model.ConfigName)), readJSONFile(t, filepath.Join(mx, model.ConfigName)); !reflect.DeepEqual(a, b) {
		t.Errorf("MXFP4 output's config.json differs from the source's")
	}
	again := tensorsOf(t, mx)
	if len(again) != len(src) {
		t.Fatalf("%d tensors back, source %d", len(again), len(src))
	}
	var groups, sameScale, ruleDiffers, changed int
	for name, s := range src {
		a, ok := again[name]
		if !ok || a.dtype != s.dtype || !reflect.DeepEqual(a.shape, s.shape) {
			t.Fatalf("%s: %v %v back, source %v %v", name, a.dtype, a.shape, s.dtype, s.shape)
		}
		base, packed, ok := model.K3Classifier().MXFP4Part(name)
		if !ok {
			if !bytes.Equal(a.data, s.data) {
				t.Fatalf("%s changed", name)
			}
			continue
		}
		if !packed {
			continue
		}
		k := int(2 * s.shape[1])
		ss, as := src[base+".weight_scale"].data, again[base+".weight_scale"].data
		if !bytes.Equal(refMXFP4(t, a.data, as, k), refMXFP4(t, s.data, ss, k)) && !sameUpToZeroSign(refMXFP4(t, a.data, as, k), refMXFP4(t, s.data, ss, k)) {
			t.Fatalf("%s: values did not come back", base)
		}
		w := back[base+".weight"].data
		for g := range len(ss) {
			groups++
			if as[g] != ss[g] || !bytes.Equal(a.data[16*g:16*g+16], s.data[16*g:16*g+16]) {
				changed++
			}
			negZero := false
			for i := range 32 {
				c := s.data[(32*g+i)/2] >> (4 * (i % 2)) & 0xF
				negZero = negZero || c == 8
			}
			var rule [1]byte // compressed-tensors' scale byte for the decoded group
			if _, err := quant.PackMXFP4Measured(make([]byte, 16), rule[:], w[64*g:64*g+64], 1, 32, nil); err != nil {
				t.Fatalf("%s group %d: %v", base, g, err)
			}
			if rule[0] != ss[g] {
				ruleDiffers++
				continue
			}
			if as[g] != ss[g] {
				t.Fatalf("%s group %d: scale %d back, source %d (the rule's)", base, g, as[g], ss[g])
			}
			if !negZero {
				sameScale++
				if !bytes.Equal(a.data[16*g:16*g+16], s.data[16*g:16*g+16]) {
					t.Fatalf("%s group %d: codes % x back, source % x", base, g, a.data[16*g:16*g+16], s.data[16*g:16*g+16])
				}
			}
		}
	}
	t.Logf("%d groups: %d byte-identical checked, %d where the replica's scale (DeepGEMM's RCEIL) is not compressed-tensors' pick", groups, sameScale, ruleDiffers)
	if sameScale == 0 {
		t.Fatal("no group compared byte for byte")
	}
	// The decode counted, before any packing, the groups whose bytes would
	// not come back.
	if decoded.Repack.Groups != int64(groups) || decoded.Repack.Changed != int64(changed) || changed == 0 {
		t.Errorf("the decode counted %d of %d groups that would not come back byte for byte; the round trip changed %d of %d",
			decoded.Repack.Changed, decoded.Repack.Groups, changed, groups)
	}
	for _, pair := range [][2]string{{miniSrc, bf}, {bf, mx}} {
		rep, err := Verify(context.Background(), openSrc(t, pair[0]), pair[1], VerifyOptions{Jobs: 2})
		if err != nil || !rep.OK || rep.Decoded+rep.Packed != experts {
			t.Fatalf("verify %s: %v, ok %v, %d decoded, %d packed, %v", pair[1], err, rep.OK, rep.Decoded, rep.Packed, rep.Violations)
		}
	}
}

// sameUpToZeroSign compares BF16 bytes as values (−0 = +0).
func sameUpToZeroSign(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i += 2 {
		x, y := binary.LittleEndian.Uint16(a[i:]), binary.LittleEndian.Uint16(b[i:])
		if x != y && !(x&0x7FFF == 0 && y&0x7FFF == 0) {
			return false
		}
	}
	return true
}

// TestBidirFP8BackToBF16: block FP8 in every convention, both numerics and
// both scale formats, decoded back: the tensors are the source's names,
// dtypes and shapes; decoded weights are codes × scale rounded once to BF16
// (quant.DequantizeBandBF16, whose bytes are torch's); the rest is the
// source's bytes; config.json keeps only the experts' MXFP4 description.
func TestBidirFP8BackToBF16(t *testing.T) {
	skipShort(t)
	t.Parallel()
	src := tensorsOf(t, miniSrc)
	srcCfg := readJSONFile(t, filepath.Join(miniSrc, model.ConfigName))
	for _, opts := range []Options{
		{Format: modelOpt},
		{Format: deepSeek, ScaleFmt: quant.ScaleUE8M0},
		{Format: compressedTensors},
		{Format: modelOpt, Numerics: quant.ModelOpt},
	} {
		name := opts.Format.String() + "/" + opts.ScaleFmt.String() + "/" + opts.Numerics.String()
		root := t.TempDir()
		fp8, back := filepath.Join(root, "fp8"), filepath.Join(root, "bf16")
		convertRecipe(t, miniSrc, fp8, AttnMoEDenseFP8, opts)
		res := convertRecipe(t, fp8, back, BF16, Options{})
		q, b := tensorsOf(t, fp8), tensorsOf(t, back)
		if len(b) != len(src) {
			t.Fatalf("%s: %d tensors back, source %d", name, len(b), len(src))
		}
		decoded := 0
		for n, s := range src {
			got, ok := b[n]
			if !ok || got.dtype != s.dtype || !reflect.DeepEqual(got.shape, s.shape) {
				t.Fatalf("%s: %s: %v %v back, source %v %v", name, n, got.dtype, got.shape, s.dtype, s.shape)
			}
			c := q[n]
			if c.dtype != safetensors.F8_E4M3 {
				if !bytes.Equal(got.data, s.data) {
					t.Fatalf("%s: %s changed", name, n)
				}
				continue
			}
			decoded++
			sc := q[opts.Format.ScaleName(n)]
			rows, k := int(c.shape[0]), int(c.shape[1])
			kb := numBlocks(k)
			want := make([]byte, 2*rows*k)
			for b0 := 0; b0 < rows; b0 += 128 {
				r1 := min(b0+128, rows)
				scales := make([]float32, kb)
				for j := range kb {
					scales[j] = math.Float32frombits(binary.LittleEndian.Uint32(sc.data[4*((b0/128)*kb+j):]))
				}
				if err := quant.DequantizeBandBF16(want[2*b0*k:2*r1*k], c.data[b0*k:r1*k], scales, r1-b0, k); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got.data, want) {
				t.Fatalf("%s: %s is not codes × scale rounded to BF16", name, n)
			}
		}
		if decoded == 0 || res.Decoded != decoded {
			t.Fatalf("%s: %d FP8 weights, %d decoded", name, decoded, res.Decoded)
		}
		cfg := readJSONFile(t, filepath.Join(back, model.ConfigName))
		if _, ok := cfg[quantKey]; ok {
			t.Errorf("%s: a top-level quantization_config is left", name)
		}
		if got, want := cfg[textKey].(map[string]any)[quantKey], srcCfg[textKey].(map[string]any)[quantKey]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: text_config.quantization_config is not the source's MXFP4 description:\n%v", name, got)
		}
		if _, err := os.Stat(filepath.Join(back, HFQuantConfigName)); err == nil {
			t.Errorf("%s: %s written", name, HFQuantConfigName)
		}
		rep, err := Verify(context.Background(), openSrc(t, fp8), back, VerifyOptions{Jobs: 2})
		if err != nil || !rep.OK || rep.Decoded != decoded {
			t.Fatalf("%s: verify: %v %v %d %v", name, err, rep.OK, rep.Decoded, rep.Violations)
		}
	}
}

// TestBidirNVFP4ToBF16: NVIDIA's NVFP4 experts (lossless from the replica's
// MXFP4) decode to the MXFP4 values (up to the sign of zero, which NVIDIA's
// re-encoding drops), FP8 attention to its dequantization.
func TestBidirNVFP4ToBF16(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	nv, back := filepath.Join(root, "nvfp4"), filepath.Join(root, "bf16")
	convertRecipe(t, miniSrc, nv, ModelOptK3, Options{Format: modelOpt, Experts: ExpertsNVFP4})
	convertRecipe(t, nv, back, BF16, Options{Experts: ExpertsBF16})
	src, b := tensorsOf(t, miniSrc), tensorsOf(t, back)
	n := 0
	for name, s := range src {
		base, packed, ok := model.K3Classifier().MXFP4Part(name)
		if !ok || !packed {
			continue
		}
		n++
		k := int(2 * s.shape[1])
		got := b[base+".weight"]
		if got.dtype != safetensors.BF16 || !sameUpToZeroSign(got.data, refMXFP4(t, s.data, src[base+".weight_scale"].data, k)) {
			t.Fatalf("%s: NVFP4 → BF16 is not the MXFP4 values", base)
		}
		for _, c := range []string{".weight_scale", ".weight_scale_2", ".input_scale", ".weight_packed"} {
			if _, ok := b[base+c]; ok {
				t.Fatalf("%s%s left", base, c)
			}
		}
	}
	if n == 0 {
		t.Fatal("no experts")
	}
	if top, text := hasQuantConfig(t, back); top || text {
		t.Errorf("quantization_config left (top %v, text %v)", top, text)
	}
}

// TestBidirErrors: what the two directions refuse, naming the tensor.
func TestBidirErrors(t *testing.T) {
	t.Parallel()
	bf16, _ := Lookup(BF16)
	expert := "language_model.model.layers.1.block_sparse_moe.experts.0.w1"
	for _, c := range []struct {
		what  string
		specs []safetensors.TensorSpec
		opts  Options
		want  string
	}{
		{"K not a multiple of 32", []safetensors.TensorSpec{{Name: expert + ".weight", DType: safetensors.BF16, Shape: []int64{64, 48}}},
			Options{Experts: ExpertsMXFP4}, "K = 48 is not a positive multiple of 32"},
		{"already MXFP4", []safetensors.TensorSpec{{Name: expert + ".weight_packed", DType: safetensors.U8, Shape: []int64{64, 32}}, {Name: expert + ".weight_scale", DType: safetensors.U8, Shape: []int64{64, 2}}},
			Options{Experts: ExpertsMXFP4}, "already mxfp4-pack-quantized"},
		{"FP8 without scales", []safetensors.TensorSpec{{Name: "model.layers.0.self_attn.q_proj.weight", DType: safetensors.F8_E4M3, Shape: []int64{256, 256}}},
			Options{}, "model.layers.0.self_attn.q_proj.weight_scale_inv (or model.layers.0.self_attn.q_proj.weight_scale) is not in the same file"},
		{"FP8 scales of the wrong shape", []safetensors.TensorSpec{{Name: "model.layers.0.self_attn.q_proj.weight", DType: safetensors.F8_E4M3, Shape: []int64{256, 256}},
			{Name: "model.layers.0.self_attn.q_proj.weight_scale_inv", DType: safetensors.F32, Shape: []int64{2, 3}}},
			Options{}, "are not the block scales of FP8 weight"},
		{"MXFP4 scales of the wrong shape", []safetensors.TensorSpec{{Name: expert + ".weight_packed", DType: safetensors.U8, Shape: []int64{64, 32}}, {Name: expert + ".weight_scale", DType: safetensors.U8, Shape: []int64{64, 3}}},
			Options{Experts: ExpertsBF16}, "are not the E8M0 scales of MXFP4 codes"},
	} {
		_, err := PlanTensors(bf16, c.specs, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, errNotQuantizable) {
			t.Errorf("%s: %v, want %q", c.what, err, c.want)
		}
	}

	// The release's experts asked to become MXFP4: said what they are.
	c := openSrc(t, miniSrc)
	if _, err := NewPlan(c, nil, bf16, Options{Experts: ExpertsMXFP4}); err == nil || !strings.Contains(err.Error(), "already mxfp4-pack-quantized") {
		t.Errorf("--experts mxfp4 on MXFP4 experts: %v", err)
	}

	// A NaN scale byte: the run fails naming file, tensor, row and group,
	// and leaves no shard under its final name.
	path, err := convertNaNScale(t, bf16, Options{Experts: ExpertsBF16})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "experts.5.w3.weight_packed") ||
		!strings.Contains(err.Error(), "row 1, group 1") || !errors.Is(err, quant.ErrNonFinite) {
		t.Fatalf("NaN scale byte: %v", err)
	}
}

// TestBidirFromHub: both directions from a remote source write the local
// conversion's bytes, every read within the shard's planned ranges; split
// over two workers and merged, the same tree again.
func TestBidirFromHub(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	bf16, _ := Lookup(BF16)
	root := t.TempDir()
	localBF, localMX := filepath.Join(root, "bf"), filepath.Join(root, "mx")
	convertRecipe(t, miniSrc, localBF, BF16, Options{Experts: ExpertsBF16})
	convertRecipe(t, localBF, localMX, BF16, Options{Experts: ExpertsMXFP4})
	for _, c := range []struct {
		src, want string
		opts      Options
	}{{miniSrc, localBF, Options{Experts: ExpertsBF16}}, {localBF, localMX, Options{Experts: ExpertsMXFP4}}} {
		h := testckpt.NewHubServer(t, c.src)
		p, err := NewPlan(openRemote(t, h, "hf://org/name"), nil, bf16, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "out")
		res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2})
		if err != nil {
			t.Fatal(err)
		}
		sameTree(t, dst, c.want)
		if n := res.Network; n == nil || n.Unplanned != 0 {
			t.Fatalf("%s: network %+v", c.opts.Experts, n)
		}
		// Two workers and the merge: the same files.
		pl, err := NewPlan(openSrc(t, c.src), nil, bf16, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		split := splitAndMerge(t, pl)
		sameTree(t, split, c.want)
	}
}

// TestBidirPackedUE8M0: FP8 weights whose scales are DeepGEMM's packed UE8M0
// I32 buffer decode like the same scales as an F32 grid.
func TestBidirPackedUE8M0(t *testing.T) {
	t.Parallel()
	const n, k = 200, 300 // partial blocks both ways
	nb, kb := numBlocks(n), numBlocks(k)
	grid := make([]float32, nb*kb)
	for i := range grid {
		grid[i] = float32(math.Ldexp(1, i%9-6))
	}
	codes := make([]byte, n*k)
	for i := range codes {
		codes[i] = byte(i*37) &^ 0x80 // no NaN codes: 0x7F is skipped below
		if codes[i] == 0x7F {
			codes[i] = 0x7E
		}
	}
	words, err := quant.PackUE8M0(grid, n, k)
	if err != nil {
		t.Fatal(err)
	}
	wb := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(wb[4*i:], uint32(w))
	}
	ws, stride := quant.PackedUE8M0Shape(n, k)
	name := "model.layers.0.self_attn.q_proj"
	path := filepath.Join(t.TempDir(), "m.safetensors")
	writeFile(t, path, []safetensors.TensorSpec{
		{Name: name + ".weight", DType: safetensors.F8_E4M3, Shape: []int64{n, k}},
		{Name: name + ".weight_scale_inv", DType: safetensors.I32, Shape: []int64{int64(ws), int64(stride)}},
	}, [][]byte{codes, wb})
	f, err := safetensors.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Path = filepath.Base(path)
	bf16, _ := Lookup(BF16)
	fp, _, err := planFile(filepath.Dir(path), f, bf16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fp.Steps) != 1 || fp.Steps[0].Kind != stepDecode {
		t.Fatalf("steps %+v", fp.Steps)
	}
	var s scratch
	var got []byte
	if err := s.runTransform(context.Background(), f.ReaderAt(), f, fp.Steps[0], func(b []byte) error { got = append(got, b...); return nil }, meter{}); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 2*n*k)
	for b := range nb {
		r0, r1 := b*128, min(b*128+128, n)
		if err := quant.DequantizeBandBF16(want[2*r0*k:2*r1*k], codes[r0*k:r1*k], grid[b*kb:], r1-r0, k); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("packed UE8M0 scales decode differently from their grid")
	}
}

// convertNaNScale converts a copy of the mini replica with one expert scale
// byte set to 0xFF (E8M0 NaN: row 1, group 1 of experts.5.w3 in layer 2)
// under r and opts. It returns the damaged file and the run's error, after
// checking that the file was not left under its final name.
func convertNaNScale(t *testing.T, r *Recipe, opts Options) (string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "nan")
	copyTree(t, miniSrc, dir)
	d := openSrc(t, dir)
	name := "language_model.model.layers.2.block_sparse_moe.experts.5.w3.weight_scale"
	f, sc, ok := d.Lookup(name)
	if !ok {
		t.Fatal(name + " not in the replica")
	}
	groups := int(sc.Shape[1])
	patch(t, filepath.Join(dir, f.Path), f.DataStart+sc.Begin+int64(groups+1), 0xFF) // row 1, group 1
	p, err := NewPlan(openSrc(t, dir), nil, r, opts)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	_, err = Execute(context.Background(), p, dst, ExecOptions{Jobs: 1})
	if _, serr := os.Stat(filepath.Join(dst, f.Path)); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("%s written despite the error", f.Path)
	}
	return f.Path, err
}

// splitAndMerge executes p as two workers into one new directory and
// finalizes it if the last worker did not: the tree N Slurm tasks and a
// merge would leave.
func splitAndMerge(t *testing.T, p *Plan) string {
	t.Helper()
	split := filepath.Join(t.TempDir(), "split")
	for i := range 2 {
		if _, err := Execute(context.Background(), p, split, ExecOptions{Jobs: 1, Worker: i, Workers: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(split, ManifestName)); err != nil {
		if _, err := Finalize(split, ""); err != nil {
			t.Fatal(err)
		}
	}
	return split
}
