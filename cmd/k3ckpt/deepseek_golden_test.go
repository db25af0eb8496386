package main

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// goldenDir unpacks model/testdata/deepseek-v3/golden/<which> (shards
// gzipped) into a temporary directory and checks every file against
// SHA256SUMS.
func goldenDir(t *testing.T, which string) string {
	t.Helper()
	root := filepath.Join("..", "..", "model", "testdata", "deepseek-v3", "golden")
	sums := map[string]string{}
	f, err := os.Open(filepath.Join(root, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if sum, name, ok := strings.Cut(sc.Text(), "  "); ok {
			sums[name] = sum
		}
	}
	dst := filepath.Join(t.TempDir(), which)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(root, which))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		in, err := os.Open(filepath.Join(root, which, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = in
		name := e.Name()
		if n, ok := strings.CutSuffix(name, ".gz"); ok {
			zr, err := gzip.NewReader(in)
			if err != nil {
				t.Fatal(err)
			}
			r, name = zr, n
		}
		b, err := io.ReadAll(r)
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
		if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != sums[which+"/"+name] {
			t.Fatalf("%s/%s: sha256 %x, SHA256SUMS %s", which, name, s, sums[which+"/"+name])
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// readAll reads one tensor of ck whole.
func readAll(t *testing.T, ck *safetensors.Checkpoint, name string) ([]byte, safetensors.TensorInfo) {
	t.Helper()
	f, ti, ok := ck.Lookup(name)
	if !ok {
		t.Fatalf("%s missing", name)
	}
	b := make([]byte, ti.Size())
	if _, err := f.Section(ti).ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b, ti
}

// The golden DeepSeek-V3-shaped FP8 checkpoint (model/testdata/deepseek-v3:
// made by make_golden.py, converted by DeepSeek's fp8_cast_bf16.py on an
// H200): its config's catalog is its tensors, inspect counts them, and
// convert --recipe bf16 gives DeepSeek's BF16 output byte for byte.
func TestDeepSeekGoldens(t *testing.T) {
	t.Parallel()
	fp8, ref := goldenDir(t, "fp8"), goldenDir(t, "bf16")
	src, err := safetensors.Open(fp8)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := os.ReadFile(filepath.Join(fp8, model.ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	var catalog []safetensors.TensorSpec
	for i := range cfg.NumShards() {
		catalog = append(catalog, cfg.ShardTensors(i)...)
	}
	if len(catalog) != 97 || src.NumTensors() != 97 {
		t.Errorf("catalog %d tensors, golden %d", len(catalog), src.NumTensors())
	}
	for _, s := range catalog {
		_, ti, ok := src.Lookup(s.Name)
		if !ok || ti.DType != s.DType || !slices.Equal(ti.Shape, s.Shape) {
			t.Errorf("%s: golden %v %s %v, catalog %s %v", s.Name, ok, ti.DType, ti.Shape, s.DType, s.Shape)
		}
	}
	o, e, code := k3("inspect", "--json", fp8)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, e)
	}
	if rep := decodeSchema(t, "inspect", o); rep["total_bytes"] != float64(2106352) || rep["tensor_count"] != float64(97) {
		t.Errorf("inspect: %v bytes, %v tensors", rep["total_bytes"], rep["tensor_count"])
	}

	out := filepath.Join(t.TempDir(), "bf16")
	// The golden puts one weight_scale_inv in the shard after its weight's
	// (make_golden.py does so on purpose; fp8_cast_bf16.py finds it through
	// the index): its BF16 weight is compared below like every other.
	if _, e, code := k3("convert", "-q", "--format", "deepseek", "--recipe", "bf16", "--experts", "bf16", fp8, out); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, e)
	}
	// A scale that no shard holds is still refused, by name, before
	// anything is written.
	const scale = "model.layers.1.mlp.experts.1.down_proj.weight_scale_inv"
	missing, out2 := withoutTensor(t, src, fp8, scale), filepath.Join(t.TempDir(), "bf16")
	_, e, code = k3("convert", "-q", "--format", "deepseek", "--recipe", "bf16", "--experts", "bf16", missing, out2)
	if want := "its scale tensor " + scale + " (or model.layers.1.mlp.experts.1.down_proj.weight_scale) is not in the same file nor in any other shard"; code == 0 || !strings.Contains(e, want) {
		t.Errorf("convert without %s: exit %d: %s\nwant an error with: %s", scale, code, e, want)
	}
	if _, err := os.Stat(out2); err == nil {
		t.Errorf("the refused convert left %s", out2)
	}
	got, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	want, err := safetensors.Open(withTotalSize(t, ref))
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	if got.NumTensors() != want.NumTensors() {
		t.Errorf("%d tensors, DeepSeek's %d", got.NumTensors(), want.NumTensors())
	}
	names := make([]string, 0, want.NumTensors())
	for n := range want.Index().WeightMap {
		names = append(names, n)
	}
	slices.Sort(names)
	nanDiffs := 0
	for _, name := range names {
		// DeepSeek's index puts each BF16 weight in its weight's shard.
		if g, w := got.Index().WeightMap[name], want.Index().WeightMap[name]; g != w {
			t.Errorf("%s: in %s, DeepSeek's in %s", name, g, w)
		}
		w, wi := readAll(t, want, name)
		g, gi := readAll(t, got, name)
		if gi.DType != wi.DType || !slices.Equal(gi.Shape, wi.Shape) {
			t.Errorf("%s: %s %v, DeepSeek's %s %v", name, gi.DType, gi.Shape, wi.DType, wi.Shape)
			continue
		}
		if string(g) == string(w) {
			continue
		}
		// NaN: DeepSeek's Triton store writes 0x7FFF for either sign; ours
		// is counted, every other element must be equal.
		diff, nans := 0, 0
		for i := 0; i+1 < len(g) && gi.DType == safetensors.BF16; i += 2 {
			a, b := binary.LittleEndian.Uint16(g[i:]), binary.LittleEndian.Uint16(w[i:])
			switch {
			case a == b:
			case a&0x7fff > 0x7f80 && b == 0x7fff:
				if nans == 0 {
					t.Logf("%s: NaN written as %#04x, DeepSeek's %#04x", name, a, b)
				}
				nans++
			default:
				diff++
			}
		}
		if diff > 0 || gi.DType != safetensors.BF16 {
			t.Errorf("%s: %d elements differ from DeepSeek's", name, diff)
		}
		nanDiffs += nans
	}
	// The golden's one NaN tensor holds 256 NaN codes (make_golden.py).
	if nanDiffs != 0 && nanDiffs != 256 {
		t.Errorf("%d NaN elements written otherwise than DeepSeek's 0x7FFF, want 0 or the golden's 256", nanDiffs)
	}
	var conf map[string]any
	if b, err := os.ReadFile(filepath.Join(out, model.ConfigName)); err != nil || json.Unmarshal(b, &conf) != nil {
		t.Fatalf("output config: %v", err)
	}
	if _, ok := conf["quantization_config"]; ok {
		t.Error("the BF16 output's config.json keeps quantization_config")
	}
}

// withoutTensor copies checkpoint src (at dir) without tensor drop.
func withoutTensor(t *testing.T, src *safetensors.Checkpoint, dir, drop string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "without")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	idx := src.Index()
	place := map[string]string{}
	files := map[string][]safetensors.TensorSpec{}
	total := idx.TotalSize
	for name, file := range idx.WeightMap {
		if name == drop {
			_, ti, _ := src.Lookup(name)
			total -= ti.Size()
			continue
		}
		place[name] = file
		_, ti, _ := src.Lookup(name)
		files[file] = append(files[file], safetensors.TensorSpec{Name: name, DType: ti.DType, Shape: ti.Shape})
	}
	for file, specs := range files {
		plan, err := safetensors.NewFilePlan(specs, nil)
		if err != nil {
			t.Fatal(err)
		}
		w, err := safetensors.Create(filepath.Join(out, file), plan)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range specs {
			b, _ := readAll(t, src, s.Name)
			tw, err := w.Tensor(s.Name)
			if err == nil {
				_, err = tw.Write(b)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := safetensors.WriteIndex(filepath.Join(out, safetensors.IndexName), &safetensors.Index{TotalSize: total, WeightMap: place}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, model.ConfigName))
	if err == nil {
		err = os.WriteFile(filepath.Join(out, model.ConfigName), b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withTotalSize adds metadata.total_size to the index of dir (DeepSeek's
// script writes the index without it).
func withTotalSize(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, safetensors.IndexName)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	idx := &safetensors.Index{WeightMap: raw.WeightMap}
	seen := map[string]bool{}
	for _, file := range raw.WeightMap {
		if seen[file] {
			continue
		}
		seen[file] = true
		f, err := safetensors.OpenFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range f.Tensors {
			idx.TotalSize += ti.Size()
		}
		f.Close()
	}
	if err := safetensors.WriteIndex(p, idx); err != nil {
		t.Fatal(err)
	}
	return dir
}
