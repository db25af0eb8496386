package convert

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// TestFP8ExpertsFromMXFP4IsBF16Path: --experts fp8 of the release's MXFP4
// experts writes, in every convention and scale format, the same FP8 bytes
// as --experts fp8 of their BF16 decode (exact in BF16), which is the block
// quantizer torch's goldens cover; the experts carry the convention's names
// (X.weight and its scale tensor, no MXFP4 tensor left), the config
// declares them FP8 with no MXFP4 group, verify re-derives them bit for
// bit, and the block counts are the ones an independent dequantization
// finds.
func TestFP8ExpertsFromMXFP4IsBF16Path(t *testing.T) {
	skipShort(t)
	t.Parallel()
	root := t.TempDir()
	bf := filepath.Join(root, "bf16")
	convertRecipe(t, miniSrc, bf, BF16, Options{Experts: ExpertsBF16})
	src := tensorsOf(t, miniSrc)
	for fi, format := range []model.Format{modelOpt, deepSeek, compressedTensors} {
		for si, sf := range []quant.ScaleFmt{quant.ScaleFP32, quant.ScaleUE8M0} {
			if testing.Short() && (fi+si)%2 == 1 {
				continue // -short: every format and every scale format once
			}
			opts := Options{Format: format, ScaleFmt: sf, Experts: ExpertsFP8}
			name := format.String() + "-" + sf.String()
			fromMX, fromBF := filepath.Join(root, name+"-mx"), filepath.Join(root, name+"-bf")
			res := convertRecipe(t, miniSrc, fromMX, AttnMoEDenseFP8, opts)
			resBF := convertRecipe(t, bf, fromBF, AttnMoEDenseFP8, opts)
			a, b := tensorsOf(t, fromMX), tensorsOf(t, fromBF)
			experts := 0
			for n, ta := range a {
				if model.K3Classifier().Classify(n) != model.RoutedExperts {
					continue
				}
				experts++
				tb, ok := b[n]
				if !ok || ta.dtype != tb.dtype || !bytes.Equal(ta.data, tb.data) {
					t.Fatalf("%s: %s differs between the MXFP4 and the BF16 source", name, n)
				}
				if strings.HasSuffix(n, ".weight_packed") {
					t.Fatalf("%s: %s left", name, n)
				}
				if strings.HasSuffix(n, ".weight") {
					if ta.dtype != safetensors.F8_E4M3 {
						t.Fatalf("%s: %s is %s", name, n, ta.dtype)
					}
					if _, ok := a[format.ScaleName(n)]; !ok {
						t.Fatalf("%s: %s has no %s", name, n, format.ScaleName(n))
					}
				}
			}
			if experts == 0 {
				t.Fatal("no expert tensors")
			}
			// Everything but the experts is the default conversion's.
			for n, ta := range a {
				if model.K3Classifier().Classify(n) == model.RoutedExperts {
					continue
				}
				if tr, ok := src[n]; ok && tr.dtype != safetensors.BF16 && !bytes.Equal(tr.data, ta.data) {
					t.Fatalf("%s: %s changed", name, n)
				}
			}
			cfgBytes, err := os.ReadFile(filepath.Join(fromMX, model.ConfigName))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(cfgBytes, []byte(ctMXFP4Format)) {
				t.Errorf("%s: config.json still declares %s", name, ctMXFP4Format)
			}
			cfg, err := model.ParseConfig(cfgBytes)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if cfg.Experts != model.ExpertsFP8 {
				t.Errorf("%s: config.json reads as %s experts", name, cfg.Experts)
			}
			if rep := verifyDir(t, miniSrc, fromMX); !rep.OK {
				t.Fatalf("%s: verify: %v", name, rep.Violations)
			}
			want := fp8ExpertBlocks(t, src, sf)
			if res.FP8Experts != want {
				t.Errorf("%s: counts %+v, an independent dequantization finds %+v", name, res.FP8Experts, want)
			}
			// The summary's counts are the report's for the experts group.
			if res.Report == nil {
				t.Fatalf("%s: no quantization report", name)
			}
			found := false
			for _, g := range res.Report.Groups {
				if g.Group != model.GroupExperts.String() {
					continue
				}
				found = true
				if g.Blocks != want.Blocks || g.LossyBlocks != want.Lossy || g.Tensors != want.Tensors {
					t.Errorf("%s: report's experts group %+v, counts %+v", name, g, want)
				}
			}
			if !found {
				t.Errorf("%s: no experts group in the report", name)
			}
			if resBF.FP8Experts != want {
				t.Errorf("%s from BF16: counts %+v, want %+v", name, resBF.FP8Experts, want)
			}
			t.Logf("%s: %d blocks, %d lossless, %d lossy", name, res.FP8Experts.Blocks, res.FP8Experts.Blocks-res.FP8Experts.Lossy, res.FP8Experts.Lossy)
		}
	}
}

// fp8ExpertBlocks counts, over the MXFP4 experts of src, the 128×128 blocks
// of their block-FP8 cast with scale format sf, and those that do not
// dequantize (DequantizeBandBF16: code × scale rounded to BF16) to the
// exact MXFP4 values.
func fp8ExpertBlocks(t *testing.T, src map[string]tensorData, sf quant.ScaleFmt) fp8ExpertStats {
	t.Helper()
	var st fp8ExpertStats
	for name, s := range src {
		base, packed, ok := model.K3Classifier().MXFP4Part(name)
		if !ok || !packed {
			continue
		}
		st.Tensors++
		n, k := int(s.shape[0]), int(2*s.shape[1])
		bf := refMXFP4(t, s.data, src[base+".weight_scale"].data, k)
		kb := numBlocks(k)
		q := quant.NewQuantizer(k, quant.BF16, sf)
		codes, scales, back := make([]byte, 128*k), make([]float32, kb), make([]byte, 2*128*k)
		for b := range numBlocks(n) {
			r0, r1 := b*128, min(b*128+128, n)
			rows := r1 - r0
			if err := q.QuantizeBandAt(b, codes, scales, bf[2*r0*k:2*r1*k], rows); err != nil {
				t.Fatal(err)
			}
			if err := quant.DequantizeBandBF16(back, codes, scales, rows, k); err != nil {
				t.Fatal(err)
			}
			for j := range kb {
				st.Blocks++
				c0, c1 := j*128, min(j*128+128, k)
				for r := range rows {
					row := 2 * (r0 + r) * k
					if !sameUpToZeroSign(back[2*r*k+2*c0:2*r*k+2*c1], bf[row+2*c0:row+2*c1]) {
						st.Lossy++
						break
					}
				}
			}
		}
	}
	return st
}

// TestFP8ExpertsResumeWorkersHub: --experts fp8 from a hub source reads only
// its planned ranges and writes the local bytes; split over two workers and
// merged, the same tree; a killed run's rerun keeps its finished files.
func TestFP8ExpertsResumeWorkersHub(t *testing.T) {
	skipShort(t)
	t.Parallel()
	r, _ := Lookup(AttnMoEDenseFP8)
	opts := Options{Format: deepSeek, ScaleFmt: quant.ScaleUE8M0, Experts: ExpertsFP8}
	want := filepath.Join(t.TempDir(), "want")
	full := convertRecipe(t, miniSrc, want, AttnMoEDenseFP8, opts)

	h := testckpt.NewHubServer(t, miniSrc)
	p, err := NewPlan(openRemote(t, h, "hf://org/name"), nil, r, opts)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "hub")
	res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, dst, want)
	if n := res.Network; n == nil || n.Unplanned != 0 {
		t.Fatalf("network %+v", n)
	}

	pl, err := NewPlan(openSrc(t, miniSrc), nil, r, opts)
	if err != nil {
		t.Fatal(err)
	}
	split := splitAndMerge(t, pl)
	sameTree(t, split, want)

	// A run resuming a half-done output counts the files it keeps from
	// their records: the summary covers the whole output.
	half := filepath.Join(t.TempDir(), "half")
	if _, err := Execute(context.Background(), pl, half, ExecOptions{Jobs: 1, Worker: 0, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	whole, err := Execute(context.Background(), pl, half, ExecOptions{Jobs: 1, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(whole.Skipped) == 0 || whole.FP8Experts != full.FP8Experts || whole.FP8Experts.Blocks == 0 {
		t.Fatalf("resumed run kept %d files and counts %+v, the whole run %+v", len(whole.Skipped), whole.FP8Experts, full.FP8Experts)
	}
	sameTree(t, half, want)

	// A rerun over the finished output keeps every file.
	res, err = Execute(context.Background(), pl, split, ExecOptions{Jobs: 1, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Written) != 0 || len(res.Skipped) == 0 {
		t.Fatalf("rerun wrote %d files, kept %d", len(res.Written), len(res.Skipped))
	}
}

// TestFP8ExpertsErrors: what --experts fp8 refuses, and a NaN scale byte.
func TestFP8ExpertsErrors(t *testing.T) {
	t.Parallel()
	r, _ := Lookup(AttnMoEDenseFP8)
	expert := "language_model.model.layers.1.block_sparse_moe.experts.0.w1"
	for _, c := range []struct {
		what  string
		specs []safetensors.TensorSpec
		want  string
	}{
		{"already FP8", []safetensors.TensorSpec{{Name: expert + ".weight", DType: safetensors.F8_E4M3, Shape: []int64{128, 128}}},
			"block FP8 already: keep it (--experts keep)"},
		{"NVFP4", []safetensors.TensorSpec{{Name: expert + ".weight", DType: safetensors.U8, Shape: []int64{128, 64}}},
			"decode it first (--experts bf16)"},
		{"MXFP4 scales of the wrong shape", []safetensors.TensorSpec{{Name: expert + ".weight_packed", DType: safetensors.U8, Shape: []int64{64, 32}}, {Name: expert + ".weight_scale", DType: safetensors.U8, Shape: []int64{64, 3}}},
			"are not the E8M0 scales of MXFP4 codes"},
		{"MXFP4 codes without scales", []safetensors.TensorSpec{{Name: expert + ".weight_packed", DType: safetensors.U8, Shape: []int64{64, 32}}},
			expert + ".weight_scale are not in the same file"},
		{"MXFP4 scales without codes", []safetensors.TensorSpec{{Name: expert + ".weight_scale", DType: safetensors.U8, Shape: []int64{64, 2}}},
			"MXFP4 scales without their codes"},
	} {
		_, err := PlanTensors(r, c.specs, Options{Experts: ExpertsFP8})
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, errNotQuantizable) {
			t.Errorf("%s: %v, want %q", c.what, err, c.want)
		}
	}
	// ModelOpt's numerics: refused, naming what works.
	_, err := NewPlan(openSrc(t, miniSrc), nil, r, Options{Experts: ExpertsFP8, Numerics: quant.ModelOpt})
	if err == nil || !strings.Contains(err.Error(), "--numerics deepgemm") || !strings.Contains(err.Error(), "every --format") {
		t.Errorf("--numerics modelopt: %v", err)
	}
	// FP8 experts asked to become FP8 again: said what they are.
	fp8 := filepath.Join(t.TempDir(), "fp8")
	convertRecipe(t, miniSrc, fp8, AttnMoEDenseFP8, Options{Experts: ExpertsFP8})
	if _, err := NewPlan(openSrc(t, fp8), nil, r, Options{Experts: ExpertsFP8}); err == nil || !strings.Contains(err.Error(), "block FP8 already") {
		t.Errorf("--experts fp8 on FP8 experts: %v", err)
	}

	// A NaN scale byte: the run fails naming file, tensor, row, group and
	// block, and leaves no shard under its final name.
	path, err := convertNaNScale(t, r, Options{Experts: ExpertsFP8})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "experts.5.w3.weight_packed") ||
		!strings.Contains(err.Error(), "row 1, group 1") || !strings.Contains(err.Error(), "block 0,0") || !errors.Is(err, quant.ErrNonFinite) {
		t.Fatalf("NaN scale byte: %v", err)
	}
}

// TestFP8ExpertsPartialBlocks: experts whose K is no multiple of 128 (but
// of 32, as MXFP4 needs) get partial blocks at the edge, as the BF16 path
// gives any weight: the same bytes from the MXFP4 codes as from their BF16
// decode.
func TestFP8ExpertsPartialBlocks(t *testing.T) {
	t.Parallel()
	name := "language_model.model.layers.1.block_sparse_moe.experts.0.w2"
	n, k := 200, 160 // partial blocks in both directions
	packed, scales := make([]byte, n*k/2), make([]byte, n*k/32)
	for i := range packed {
		packed[i] = byte(i*37 + 11)
	}
	for i := range scales {
		scales[i] = byte(120 + i%9)
	}
	bf := refMXFP4(t, packed, scales, k)
	mx := writeOne(t, []safetensors.TensorSpec{{Name: name + ".weight_packed", DType: safetensors.U8, Shape: []int64{int64(n), int64(k / 2)}},
		{Name: name + ".weight_scale", DType: safetensors.U8, Shape: []int64{int64(n), int64(k / 32)}}}, [][]byte{packed, scales})
	bfFile := writeOne(t, []safetensors.TensorSpec{{Name: name + ".weight", DType: safetensors.BF16, Shape: []int64{int64(n), int64(k)}}}, [][]byte{bf})
	var s1, s2 scratch
	got := quantizeAll(t, &s1, mx, name+".weight_packed")
	want := quantizeAll(t, &s2, bfFile, name+".weight")
	if !bytes.Equal(got, want) || !bytes.Equal(s1.sbytes, s2.sbytes) || len(s1.sbytes) != 4*2*2 {
		t.Fatalf("partial blocks: codes equal %v, scales %d vs %d bytes", bytes.Equal(got, want), len(s1.sbytes), len(s2.sbytes))
	}
}

// writeOne writes one safetensors file and opens it.
func writeOne(t *testing.T, specs []safetensors.TensorSpec, data [][]byte) *safetensors.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "one.safetensors")
	writeFile(t, path, specs, data)
	f, err := safetensors.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// quantizeAll quantizes one weight of f and returns its codes.
func quantizeAll(t *testing.T, s *scratch, f *safetensors.File, name string) []byte {
	t.Helper()
	ti, ok := f.Lookup(name)
	if !ok {
		t.Fatal(name)
	}
	var codes []byte
	if _, err := s.quantize(context.Background(), f.ReaderAt(), f, ti, Options{}, func(b []byte) error { codes = append(codes, b...); return nil }, nil, meter{}); err != nil {
		t.Fatal(err)
	}
	return codes
}

// TestFP8ExpertsBackToBF16: where every block is counted lossless (UE8M0
// scales on the mini replica), decoding the FP8 experts to BF16 gives back
// exactly the MXFP4 values (decoded by the format's definition, not by
// package quant), in every convention.
func TestFP8ExpertsBackToBF16(t *testing.T) {
	skipShort(t)
	t.Parallel()
	src := tensorsOf(t, miniSrc)
	for _, format := range []model.Format{modelOpt, deepSeek, compressedTensors} {
		root := t.TempDir()
		fp8, bf := filepath.Join(root, "fp8"), filepath.Join(root, "bf16")
		res := convertRecipe(t, miniSrc, fp8, AttnMoEDenseFP8, Options{Format: format, ScaleFmt: quant.ScaleUE8M0, Experts: ExpertsFP8})
		if res.FP8Experts.Lossy != 0 || res.FP8Experts.Blocks == 0 {
			t.Fatalf("%s: counts %+v, want every block lossless", format, res.FP8Experts)
		}
		convertRecipe(t, fp8, bf, BF16, Options{Experts: ExpertsBF16})
		back := tensorsOf(t, bf)
		n := 0
		for name, s := range src {
			base, packed, ok := model.K3Classifier().MXFP4Part(name)
			if !ok || !packed {
				continue
			}
			want := refMXFP4(t, s.data, src[base+".weight_scale"].data, int(2*s.shape[1]))
			got, ok := back[base+".weight"]
			if !ok || got.dtype != safetensors.BF16 || !sameUpToZeroSign(got.data, want) {
				t.Fatalf("%s: %s.weight is not the MXFP4 values", format, base)
			}
			n++
		}
		if n == 0 {
			t.Fatal("no MXFP4 experts")
		}
	}
}

// TestFP8ExpertsVerifyCatchesChange: verify re-quantizes an FP8 expert from
// its MXFP4 source and names it when one of its codes changed.
func TestFP8ExpertsVerifyCatchesChange(t *testing.T) {
	t.Parallel()
	dst := filepath.Join(t.TempDir(), "fp8")
	convertRecipe(t, miniSrc, dst, AttnMoEDenseFP8, Options{Format: deepSeek, Experts: ExpertsFP8})
	name := "language_model.model.layers.2.block_sparse_moe.experts.5.w3.weight"
	out := openSrc(t, dst)
	f, ti, ok := out.Lookup(name)
	if !ok {
		t.Fatal(name + " not in the output")
	}
	patch(t, filepath.Join(dst, f.Path), f.DataStart+ti.Begin+7, 0x3C)
	rep := verifyDir(t, miniSrc, dst)
	found := false
	for _, v := range rep.Violations {
		found = found || strings.Contains(v, name+": FP8 codes differ from a fresh quantization")
	}
	if rep.OK || !found {
		t.Fatalf("verify after a changed expert code: ok %v, %v", rep.OK, rep.Violations)
	}
}
