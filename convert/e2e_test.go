package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// numBlocks is ⌈n/128⌉, the scale blocks along a dimension of n.
func numBlocks(n int) int { return int(blocks(int64(n))) }

// refQuantize quantizes a whole matrix with the quant package (whose bytes
// are checked against PyTorch/DeepGEMM goldens): the reference every FP8
// byte and scale of the output must equal.
func refQuantize(t *testing.T, raw []byte, dt safetensors.DType, n, k int, sf quant.ScaleFmt) ([]byte, []float32) {
	t.Helper()
	q := quant.NewQuantizer(k, quantElems[dt], sf)
	esz := quantElems[dt].Size()
	fp8 := make([]byte, n*k)
	kb := numBlocks(k)
	scales := make([]float32, numBlocks(n)*kb)
	for b := 0; b*128 < n; b++ {
		rows := min(128, n-b*128)
		if err := q.QuantizeBandAt(b, fp8[b*128*k:], scales[b*kb:], raw[b*128*k*esz:], rows); err != nil {
			t.Fatal(err)
		}
	}
	return fp8, scales
}

// Each convention's conversion, checked tensor by tensor against the quant
// reference, of the mini replica (which holds every tensor kind the tiny one
// does) and, but under -short, of the tiny replica.
func TestConvertEveryConvention(t *testing.T) {
	t.Parallel()
	cases := []Options{
		{Format: deepSeek, ScaleFmt: quant.ScaleFP32}, // Options{}: tinyRef, miniRef
		{Format: deepSeek, ScaleFmt: quant.ScaleUE8M0},
		{Format: compressedTensors, ScaleFmt: quant.ScaleFP32},
		{Format: modelOpt, ScaleFmt: quant.ScaleUE8M0},
	}
	reps := []struct{ what, src, ref string }{{"mini", miniSrc, miniRef}}
	if !testing.Short() {
		reps = append(reps, struct{ what, src, ref string }{"tiny", tinySrc(t), tinyRef(t)})
	}
	for _, r := range reps {
		for _, opts := range cases {
			t.Run(r.what+"/"+opts.Format.String()+"-"+opts.ScaleFmt.String(), func(t *testing.T) {
				dst := r.ref
				if opts != (Options{}) {
					var res *Result
					dst, res = sharedConversion(t, r.src, AttnMoEDenseFP8, opts)
					if !res.Finalized || len(res.Skipped) != 0 {
						t.Fatalf("result %+v", res)
					}
				}
				checkConversion(t, r.src, dst, opts)
			})
		}
	}
}

// checkConversion checks an output against its source independently of the
// planner: every tensor the recipe keeps copied byte for byte, every weight
// it converts (KDA q/k/v/g/o, the MLA projections, shared experts, latent
// projections, the dense MLP) quantized to the quant reference's FP8 codes
// with its scale tensor named and shaped as the convention says (⌈N/128⌉ ×
// ⌈K/128⌉ fp32 values); index, manifest and side files right.
func checkConversion(t *testing.T, srcDir, dst string, opts Options) {
	src := openSrc(t, srcDir)
	out := openSrc(t, dst) // the codec validates headers, index and total_size
	r := mustRecipe(t)
	if got, want := len(out.Files), len(src.Files); got != want {
		t.Fatalf("%d output shards, source has %d", got, want)
	}
	quantized := 0
	for i, sf := range src.Files {
		of := out.Files[i]
		if of.Path != sf.Path {
			t.Fatalf("output shard %s, source shard %s", of.Path, sf.Path)
		}
		wantTensors := len(sf.Tensors)
		for _, st := range sf.Tensors {
			a := r.classifyK3(st.Name)
			srcBytes := readAll(t, sf.Section(st))
			ot, ok := of.Lookup(st.Name)
			if !ok {
				t.Fatalf("%s: missing from %s", st.Name, of.Path)
			}
			if a == keep {
				if ot.DType != st.DType || !slices.Equal(ot.Shape, st.Shape) || !bytes.Equal(readAll(t, of.Section(ot)), srcBytes) {
					t.Fatalf("%s: kept tensor differs from the source", st.Name)
				}
				continue
			}
			quantized++
			wantTensors++
			n, k := int(st.Shape[0]), int(st.Shape[1])
			fp8, scales := refQuantize(t, srcBytes, st.DType, n, k, opts.ScaleFmt)
			if ot.DType != safetensors.F8_E4M3 || !slices.Equal(ot.Shape, st.Shape) {
				t.Fatalf("%s: %s %v, want F8_E4M3 %v", st.Name, ot.DType, ot.Shape, st.Shape)
			}
			if !bytes.Equal(readAll(t, of.Section(ot)), fp8) {
				t.Fatalf("%s: FP8 bytes differ from the quant reference", st.Name)
			}
			scaleName := strings.TrimSuffix(st.Name, "weight") + map[model.Format]string{deepSeek: "weight_scale_inv", compressedTensors: "weight_scale", modelOpt: "weight_scale"}[opts.Format]
			sc, ok := of.Lookup(scaleName)
			if !ok {
				t.Fatalf("%s: no scale tensor %s", st.Name, scaleName)
			}
			nb, kb := int64((n+127)/128), int64((k+127)/128)
			wantShape := []int64{nb, kb}
			if opts.Format == modelOpt {
				wantShape = []int64{nb, 1, kb, 1}
			}
			if sc.DType != safetensors.F32 || !slices.Equal(sc.Shape, wantShape) {
				t.Fatalf("%s: %s %v, want F32 %v", scaleName, sc.DType, sc.Shape, wantShape)
			}
			sb := readAll(t, of.Section(sc))
			for i, v := range scales {
				got := math.Float32frombits(binary.LittleEndian.Uint32(sb[4*i:]))
				if math.Float32bits(got) != math.Float32bits(v) {
					t.Fatalf("%s: scale %d = %g, reference %g", scaleName, i, got, v)
				}
				if opts.ScaleFmt == quant.ScaleUE8M0 && math.Float32bits(got)&0x7FFFFF != 0 {
					t.Fatalf("%s: scale %d = %g is not a power of two", scaleName, i, got)
				}
			}
		}
		if len(of.Tensors) != wantTensors {
			t.Fatalf("%s: %d tensors, want %d", of.Path, len(of.Tensors), wantTensors)
		}
	}
	// On the tiny replica 69 KDA × 5 + 24 MLA × 6 + 92 MoE × 5 + 3 dense.
	if want := quantizedOn(t, srcDir); quantized != want {
		t.Errorf("%d tensors quantized, want %d", quantized, want)
	}
	// Side files copied, hidden ones not.
	for name, body := range sideFiles {
		got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
		if strings.HasPrefix(name, ".") {
			if err == nil {
				t.Errorf("%s: hidden file copied", name)
			}
			continue
		}
		if err != nil || string(got) != body {
			t.Errorf("%s: not copied (%v)", name, err)
		}
	}
	// The manifest lists every file with its size and sha256, and nothing else.
	m, err := readManifest(dst)
	if err != nil {
		t.Fatal(err)
	}
	tree := treeHashes(t, dst)
	delete(tree, ManifestName)
	if len(m.Files) != len(tree) {
		t.Errorf("manifest lists %d files, DST holds %d", len(m.Files), len(tree))
	}
	for _, f := range m.Files {
		if tree[f.Name] != f.SHA256 {
			t.Errorf("manifest: %s sha256 %s, file has %s", f.Name, f.SHA256, tree[f.Name])
		}
	}
	if _, err := os.Stat(filepath.Join(dst, stateDir)); !os.IsNotExist(err) {
		t.Errorf("state directory left after finalize: %v", err)
	}
	checkConfig(t, dst, opts)
}

func readJSONFile(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// checkConfig checks the field names each engine's loader reads (SGLang /
// vLLM Fp8Config, compressed-tensors FP8_BLOCK, ModelOpt MIXED_PRECISION).
func checkConfig(t *testing.T, dst string, opts Options) {
	t.Helper()
	cfg := readJSONFile(t, filepath.Join(dst, model.ConfigName))
	qc, _ := cfg["quantization_config"].(map[string]any)
	if qc == nil {
		t.Fatal("no quantization_config")
	}
	attn := "language_model.model.layers.3.self_attn.q_b_proj"
	kept := "language_model.model.layers.0.self_attn.f_a_proj"
	experts := "language_model.model.layers.1.block_sparse_moe.experts"
	has := func(list any, s string) bool {
		l, _ := list.([]any)
		return slices.Contains(l, any(s))
	}
	_, hfErr := os.Stat(filepath.Join(dst, HFQuantConfigName))
	switch opts.Format {
	case deepSeek:
		if qc["quant_method"] != "fp8" || qc["fmt"] != "e4m3" || qc["activation_scheme"] != "dynamic" {
			t.Errorf("deepseek config: %v", qc)
		}
		if bs, _ := qc["weight_block_size"].([]any); len(bs) != 2 || bs[0] != 128.0 || bs[1] != 128.0 {
			t.Errorf("weight_block_size %v", qc["weight_block_size"])
		}
		if (qc["scale_fmt"] == "ue8m0") != (opts.ScaleFmt == quant.ScaleUE8M0) {
			t.Errorf("scale_fmt %v with %v scales", qc["scale_fmt"], opts.ScaleFmt)
		}
		for _, key := range []string{"ignored_layers", "modules_to_not_convert"} {
			if !has(qc[key], kept) || !has(qc[key], experts) || has(qc[key], attn) {
				t.Errorf("%s wrong: kept %v experts %v fp8 %v", key, has(qc[key], kept), has(qc[key], experts), has(qc[key], attn))
			}
		}
		ex, _ := cfg["text_config"].(map[string]any)["quantization_config"].(map[string]any)
		if ex["quant_method"] != "compressed-tensors" || ex["format"] != "mxfp4-pack-quantized" {
			t.Errorf("experts' compressed-tensors description not kept in text_config: %v", ex)
		}
		if hfErr == nil {
			t.Error("hf_quant_config.json written for deepseek")
		}
	case compressedTensors:
		if qc["quant_method"] != "compressed-tensors" || qc["format"] != "mixed-precision" {
			t.Errorf("compressed-tensors config: method %v format %v", qc["quant_method"], qc["format"])
		}
		groups, _ := qc["config_groups"].(map[string]any)
		var fp8, mx map[string]any
		for _, g := range groups {
			gm := g.(map[string]any)
			switch gm["format"] {
			case "float-quantized":
				fp8 = gm
			case "mxfp4-pack-quantized":
				mx = gm
			}
		}
		if fp8 == nil || mx == nil {
			t.Fatalf("groups: %v", groups)
		}
		w := fp8["weights"].(map[string]any)
		if w["strategy"] != "block" || w["type"] != "float" || w["num_bits"] != 8.0 || !slices.Equal(w["block_structure"].([]any), []any{128.0, 128.0}) {
			t.Errorf("fp8 weights %v", w)
		}
		targets := func(name string) bool {
			for _, e := range fp8["targets"].([]any) {
				if m, _ := ctMatcher(e.(string)); m(name) {
					return true
				}
			}
			return false
		}
		if !targets(attn) || !targets("model.layers.3.self_attn.q_b_proj") || targets(kept) {
			t.Errorf("fp8 targets wrong: %v", fp8["targets"])
		}
		if _, bad := fp8["scale_fmt"]; bad {
			t.Error("scale_fmt is no compressed-tensors key")
		}
		// No converted module may stay ignored; kept ones must.
		for _, e := range qc["ignore"].([]any) {
			m, err := ctMatcher(e.(string))
			if err != nil {
				t.Fatal(err)
			}
			if m(attn) {
				t.Errorf("ignore entry %v still matches converted %s", e, attn)
			}
		}
		ignored := false
		for _, e := range qc["ignore"].([]any) {
			m, _ := ctMatcher(e.(string))
			ignored = ignored || m(kept)
		}
		if !ignored {
			t.Errorf("%s no longer ignored", kept)
		}
	case modelOpt:
		hf := readJSONFile(t, filepath.Join(dst, HFQuantConfigName))
		if hf["producer"].(map[string]any)["name"] != "modelopt" {
			t.Errorf("producer %v", hf["producer"])
		}
		sec := hf["quantization"].(map[string]any)
		layers := sec["quantized_layers"].(map[string]any)
		if sec["quant_algo"] != "MIXED_PRECISION" || layers[attn].(map[string]any)["quant_algo"] != "FP8_PB_WO" {
			t.Errorf("hf_quant_config: %v / %v", sec["quant_algo"], layers[attn])
		}
		if e, ok := layers[experts]; ok {
			t.Errorf("MXFP4 experts declared as %v: a ModelOpt loader reads undeclared experts as MXFP4", e)
		}
		excluded := false
		for _, e := range sec["exclude_modules"].([]any) {
			excluded = excluded || model.ModuleMatcher(e.(string))(kept)
		}
		if !excluded {
			t.Errorf("%s not excluded", kept)
		}
		if qc["quant_method"] != "modelopt_mixed" || qc["quant_algo"] != "MIXED_PRECISION" {
			t.Errorf("config.json quantization_config %v", qc["quant_method"])
		}
		if tc, _ := cfg["text_config"].(map[string]any); tc != nil && tc["quantization_config"] != nil {
			t.Error("text_config.quantization_config left in place")
		}
	}
}

// The streamed index is byte-identical to the codec's Index.Marshal.
func TestStreamedIndexIsCanonical(t *testing.T) {
	t.Parallel()
	refs := []string{miniRef}
	if !testing.Short() {
		refs = append(refs, tinyRef(t))
	}
	for _, ref := range refs {
		out := openSrc(t, ref)
		idx := &safetensors.Index{WeightMap: map[string]string{}}
		var shards []string
		for _, f := range out.Files {
			shards = append(shards, f.Path)
			for _, ti := range f.Tensors {
				idx.WeightMap[ti.Name] = f.Path
				idx.TotalSize += ti.Size()
			}
		}
		want, err := idx.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := streamIndex(&got, ref, shards); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("%s: streamed index differs from Index.Marshal (%d vs %d bytes)", ref, got.Len(), len(want))
		}
		if file, _ := os.ReadFile(filepath.Join(ref, safetensors.IndexName)); !bytes.Equal(file, want) {
			t.Fatalf("%s: written index is not canonical", ref)
		}
	}
	var empty bytes.Buffer
	streamIndex(&empty, miniRef, nil)
	if e, _ := (&safetensors.Index{WeightMap: map[string]string{}}).Marshal(); !bytes.Equal(empty.Bytes(), e) {
		t.Fatalf("empty index %q, want %q", empty.String(), e)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	// The clean conversions: the mini replica's, and but under -short the
	// tiny one's (952 FP8 tensors).
	clean := []struct {
		src, ref  string
		quantized int
	}{{miniSrc, miniRef, quantizedOn(t, miniSrc)}}
	if !testing.Short() {
		clean = append(clean, struct {
			src, ref  string
			quantized int
		}{tinySrc(t), tinyRef(t), 952})
	}
	for _, c := range clean {
		rep, err := Verify(context.Background(), openSrc(t, c.src), c.ref, VerifyOptions{Jobs: 2})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK || rep.Quantized != c.quantized || len(rep.Tensors) != c.quantized {
			t.Fatalf("clean conversion %s: ok %v, %d fp8, violations %v", c.ref, rep.OK, rep.Quantized, rep.Violations)
		}
		for _, s := range rep.Tensors {
			// Random normal weights: FP8 E4M3 keeps ~4 significant bits, so the
			// error is at most 1/16 of a block's amax and the SNR about 30 dB.
			if s.MaxRelBlock <= 0 || s.MaxRelBlock > 1.0/16 || s.SNRdB == nil || *s.SNRdB < 25 || *s.SNRdB > 40 {
				t.Fatalf("%s: rel %g snr %v", s.Name, s.MaxRelBlock, s.SNRdB)
			}
		}
	}

	// Damage a copy of the mini replica's conversion: one FP8 code becomes
	// NaN, one expert byte changes.
	src := openSrc(t, miniSrc)
	dst := filepath.Join(t.TempDir(), "bad")
	copyTree(t, miniRef, dst)
	out := openSrc(t, dst)
	f, w, _ := out.Lookup("language_model.model.layers.3.self_attn.q_b_proj.weight")
	_, e, _ := out.Lookup("language_model.model.layers.3.block_sparse_moe.experts.3.w2.weight_packed")
	patch(t, filepath.Join(dst, f.Path), f.DataStart+w.Begin+100, 0x7F)
	patch(t, filepath.Join(dst, f.Path), f.DataStart+e.Begin+7, 0x00)
	rep, err := Verify(context.Background(), src, dst, VerifyOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(rep.Violations, "\n")
	if rep.OK || !strings.Contains(joined, "q_b_proj.weight: 0 values beyond the FP8 rounding bound, 1 NaN") ||
		!strings.Contains(joined, "experts.3.w2.weight_packed differs from the source") ||
		!strings.Contains(joined, "manifest says") {
		t.Fatalf("damage not reported:\n%s", joined)
	}
}

func patch(t *testing.T, path string, off int64, b byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := []byte{0}
	f.ReadAt(old, off)
	if old[0] == b {
		b ^= 1
	}
	if _, err := f.WriteAt([]byte{b}, off); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies a directory (regular files) so a test may modify it.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		target := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Resume redoes exactly the files that no longer match their record.
func TestResumeRedoesOnlyDamagedFiles(t *testing.T) {
	t.Parallel()
	dst := filepath.Join(t.TempDir(), "out")
	copyTree(t, miniRef, dst)
	damaged := miniShard(4)
	patch(t, filepath.Join(dst, damaged), 4096, 0x55)
	os.Remove(filepath.Join(dst, "tiktoken.model"))
	// A leftover temporary of a killed run.
	os.WriteFile(filepath.Join(dst, filewrite.TempPrefix+damaged+"-123"), []byte("partial"), 0o644)
	res, err := convertDir(miniSrc, dst, Options{}, ExecOptions{Jobs: 2, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Written, []string{damaged, "tiktoken.model"}) || !res.Finalized {
		t.Fatalf("written %v finalized %v", res.Written, res.Finalized)
	}
	if len(res.Skipped) != len(openSrc(t, miniSrc).Files)-1+len(sideFiles)-2 {
		t.Errorf("skipped %d", len(res.Skipped))
	}
	sameTree(t, dst, miniRef)
}

// N workers, each converting its slice, then merge: byte-identical to one run.
func TestWorkersAndMerge(t *testing.T) {
	t.Parallel()
	dst := filepath.Join(t.TempDir(), "out")
	p, c, err := planFor(miniSrc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 3
	seen := map[string]int{}
	for i := range n {
		mine, _ := p.slice(i, n)
		for _, u := range mine {
			seen[u.Name]++
		}
	}
	for _, u := range p.units() {
		if seen[u.Name] != 1 {
			t.Fatalf("%s is in %d slices", u.Name, seen[u.Name])
		}
	}
	for i := range n - 1 {
		res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2, Worker: i, Workers: n})
		if err != nil {
			t.Fatal(err)
		}
		if res.Finalized {
			t.Fatalf("worker %d finalized with a slice missing", i)
		}
	}
	if _, err := Finalize(dst, ""); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("merge with a slice missing: %v", err)
	}
	if _, err := readManifest(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("manifest written early: %v", err)
	}
	// merge --dry-run names exactly the last slice's files as missing.
	st, err := StatusOfMerge(dst, "")
	if err != nil {
		t.Fatal(err)
	}
	last, _ := p.slice(n-1, n)
	var want []string
	for _, u := range last {
		want = append(want, u.Name)
	}
	if !slices.Contains(st.Writes, ReportName) {
		t.Errorf("merge would write %v: no %s", st.Writes, ReportName)
	}
	if st.Ready || st.Finalized || !slices.Equal(st.Missing, want) || len(st.Done)+len(st.Missing) != len(p.units()) || st.Plan != p.ID {
		t.Fatalf("status with slice %d missing: %+v, want missing %v", n-1, st, want)
	}
	res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2, Worker: n - 1, Workers: n})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Finalized {
		t.Fatal("last worker did not finalize")
	}
	sameTree(t, dst, miniRef)
	m, err := readManifest(dst)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, f := range m.Files {
		listed = append(listed, f.Name)
	}
	if st, err := StatusOfMerge(dst, ""); err != nil || !st.Finalized || st.Ready || !slices.Equal(st.Done, listed) {
		t.Fatalf("status of the finished conversion: %+v %v, want done = the manifest's %v", st, err, listed)
	}
	if _, err := p.slice(3, 3); !errors.Is(err, ErrWorker) {
		t.Errorf("slice 3/3: %v", err)
	}
}

func TestDestinationChecks(t *testing.T) {
	t.Parallel()
	// SRC == DST
	if _, err := convertDir(miniSrc, miniSrc, Options{}, ExecOptions{}); !errors.Is(err, errSameDir) {
		t.Errorf("SRC == DST: %v", err)
	}
	// A finished conversion with another convention.
	dst := filepath.Join(t.TempDir(), "out")
	copyTree(t, miniRef, dst)
	before := treeHashes(t, dst)
	_, err := convertDir(miniSrc, dst, Options{Format: modelOpt}, ExecOptions{})
	if !errors.Is(err, ErrDestination) || !strings.Contains(err.Error(), "deepseek") {
		t.Errorf("other conversion in DST: %v", err)
	}
	if after := treeHashes(t, dst); len(after) != len(before) {
		t.Errorf("DST changed: %d files, was %d", len(after), len(before))
	}
	// A directory holding something else.
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine"), 0o644)
	if _, err := convertDir(miniSrc, foreign, Options{}, ExecOptions{}); !errors.Is(err, ErrDestination) {
		t.Errorf("foreign DST: %v", err)
	}
	if got := listDir(t, foreign); !slices.Equal(got, []string{"notes.txt"}) {
		t.Errorf("foreign DST written: %v", got)
	}
}

// copyWithShard makes a copy of the mini replica whose file `name` (a shard
// or a side file) a test may modify.
func copyWithShard(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	testckpt.CopyTree(t, miniSrc, dir)
	return dir
}

func TestNonFiniteWeight(t *testing.T) {
	shard := miniShard(0)
	name := "language_model.model.layers.0.mlp.down_proj.weight"
	src := copyWithShard(t, shard)
	c := openSrc(t, src)
	f, ti, ok := c.Lookup(name)
	if !ok {
		t.Fatal("no layer-0 down_proj")
	}
	k := ti.Shape[1]
	row, col := int64(130), int64(300) // row band 1, column block 2
	f2 := filepath.Join(src, f.Path)
	fh, err := os.OpenFile(f2, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteAt([]byte{0xC0, 0x7F}, f.DataStart+ti.Begin+2*(row*k+col)) // BF16 NaN
	fh.Close()

	dst := filepath.Join(t.TempDir(), "out")
	_, err = convertDir(src, dst, Options{}, ExecOptions{Jobs: 1})
	if !errors.Is(err, errNonFinite) || !strings.Contains(err.Error(), name) ||
		!strings.Contains(err.Error(), "row 130, column 300 (128×128 block 1,2)") {
		t.Fatalf("NaN weight: %v", err)
	}
	for _, e := range listDir(t, dst) {
		if e == shard || strings.HasPrefix(e, ".k3tmp-") {
			t.Errorf("%s left in DST after the error", e)
		}
	}
	res, err := convertDir(src, dst, Options{NonFinite: nonFiniteZero}, ExecOptions{Jobs: 2, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.ZeroedNonFinite != 1 || !res.Finalized {
		t.Fatalf("zeroed %d finalized %v", res.ZeroedNonFinite, res.Finalized)
	}
	// The manifest records the policy: verify needs no option.
	rep, err := Verify(context.Background(), c, dst, VerifyOptions{})
	if err != nil || !rep.OK {
		t.Fatalf("verify after --nonfinite zero: %v %v", err, rep.Violations)
	}
	// A manifest that does not record it (as before the field) is checked
	// under the default policy, convert's: the NaN convert refuses fails
	// verify, unless the option says zero.
	mpath := filepath.Join(dst, ManifestName)
	m := readJSONFile(t, mpath)
	if m["nonfinite"] != "zero" {
		t.Fatalf("manifest nonfinite = %v, want zero", m["nonfinite"])
	}
	delete(m, "nonfinite")
	if b, err := json.Marshal(m); err != nil || os.WriteFile(mpath, b, 0o644) != nil {
		t.Fatal("rewrite manifest", err)
	}
	rep, err = Verify(context.Background(), c, dst, VerifyOptions{})
	if err != nil || rep.OK || len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], name+": the source holds a non-finite value") {
		t.Fatalf("verify of a NaN source under the default policy: %v %v", err, rep.Violations)
	}
	rep, err = Verify(context.Background(), c, dst, VerifyOptions{NonFinite: nonFiniteZero})
	if err != nil || !rep.OK {
		t.Fatalf("verify with the zero option: %v %v", err, rep.Violations)
	}
}

func TestConfigMismatch(t *testing.T) {
	src := copyWithShard(t, "")
	cfg := readJSONFile(t, filepath.Join(src, model.ConfigName))
	cfg["text_config"].(map[string]any)["q_lora_rank"] = 64.0
	b, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(src, model.ConfigName), b, 0o644)
	_, _, err := planFor(src, Options{})
	if !errors.Is(err, errConfigMismatch) || !regexp.MustCompile(`layers\.\d+\.self_attn\.q_a_`).MatchString(err.Error()) || !strings.Contains(err.Error(), "config.json implies") {
		t.Fatalf("q_lora_rank changed: %v", err)
	}
}

// A band wider than TileBytes is quantized in column tiles with bounded
// buffers, and gives the same bytes as one whole band.
func TestWideBandTiles(t *testing.T) {
	t.Parallel()
	const n, k = 130, 40000 // 128·40000·2 bytes > TileBytes; partial last row band and tile
	if blockSize*k*2 <= tileBytes {
		t.Fatal("not wide enough to tile")
	}
	raw := make([]byte, n*k*2)
	var x uint32 = 1
	for i := 0; i < len(raw); i += 2 {
		x = x*1664525 + 1013904223
		binary.LittleEndian.PutUint16(raw[i:], quant.F32ToBF16(float32(int32(x))/(1<<31)*float32(1+i%7)))
	}
	specs := []safetensors.TensorSpec{{Name: "w", DType: safetensors.BF16, Shape: []int64{n, k}}}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	writeFile(t, in, specs, [][]byte{raw})
	f, err := safetensors.OpenFile(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	outSpecs := []safetensors.TensorSpec{{Name: "w", DType: safetensors.F8_E4M3, Shape: []int64{n, k}}, {Name: "s", DType: safetensors.F32, Shape: []int64{2, (k + 127) / 128}}}
	l, _ := safetensors.NewFilePlan(outSpecs, nil)
	w, err := safetensors.Create(filepath.Join(dir, "out.safetensors"), l)
	if err != nil {
		t.Fatal(err)
	}
	tw, _ := w.Tensor("w")
	stw, _ := w.Tensor("s")
	s := &scratch{}
	emit := func(b []byte) error { _, err := tw.Write(b); return err }
	if _, err := s.quantize(context.Background(), f.ReaderAt(), f, f.Tensors[0], Options{}, emit, nil, meter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := stw.Write(s.sbytes); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if cap(s.src) > tileBytes || cap(s.band) != blockSize*k {
		t.Errorf("buffers %d and %d bytes", cap(s.src), cap(s.band))
	}
	out, err := safetensors.OpenFile(filepath.Join(dir, "out.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	fp8, scales := refQuantize(t, raw, safetensors.BF16, n, k, quant.ScaleFP32)
	wt, _ := out.Lookup("w")
	st, _ := out.Lookup("s")
	if !bytes.Equal(readAll(t, out.Section(wt)), fp8) {
		t.Error("tiled FP8 differs from whole-band quantization")
	}
	sb := readAll(t, out.Section(st))
	for i, v := range scales {
		if binary.LittleEndian.Uint32(sb[4*i:]) != math.Float32bits(v) {
			t.Fatalf("scale %d differs", i)
		}
	}
}

// TestQuantizeHeld quantizes weights into held codes, a band at a time in
// place (one band wide) or through the band buffer (in column tiles): the
// codes equal a reference quantization, and holding more than the capacity
// planned is an error.
func TestQuantizeHeld(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]int{{300, 512}, {130, 40000}} {
		n, k := c[0], c[1]
		raw := make([]byte, n*k*2)
		var x uint32 = 7
		for i := 0; i < len(raw); i += 2 {
			x = x*1664525 + 1013904223
			binary.LittleEndian.PutUint16(raw[i:], quant.F32ToBF16(float32(int32(x))/(1<<31)*float32(1+i%5)))
		}
		in := filepath.Join(t.TempDir(), "in.safetensors")
		writeFile(t, in, []safetensors.TensorSpec{{Name: "w", DType: safetensors.BF16, Shape: []int64{int64(n), int64(k)}}}, [][]byte{raw})
		f, err := safetensors.OpenFile(in)
		if err != nil {
			t.Fatal(err)
		}
		fp8, _ := refQuantize(t, raw, safetensors.BF16, n, k, quant.ScaleFP32)
		s := &scratch{held: make([]byte, 0, n*k)}
		if _, err := s.quantize(context.Background(), f.ReaderAt(), f, f.Tensors[0], Options{}, nil, &s.held, meter{}); err != nil {
			t.Fatalf("%d×%d: %v", n, k, err)
		}
		if !bytes.Equal(s.held, fp8) {
			t.Errorf("%d×%d: held codes differ from the reference quantization", n, k)
		}
		s.held = make([]byte, 0, n*k-1)
		if _, err := s.quantize(context.Background(), f.ReaderAt(), f, f.Tensors[0], Options{}, nil, &s.held, meter{}); err == nil || !strings.Contains(err.Error(), "codes held over") {
			t.Errorf("%d×%d: holding past the planned capacity: %v", n, k, err)
		}
		f.Close()
	}
}

func writeFile(t *testing.T, path string, specs []safetensors.TensorSpec, data [][]byte) {
	t.Helper()
	l, err := safetensors.NewFilePlan(specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := safetensors.Create(path, l)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		tw, _ := w.Tensor(s.Name)
		tw.Write(data[i])
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
}
