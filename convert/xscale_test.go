package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// rewritten copies checkpoint dir (shards, index and side files) with the
// tensors placed by place (name → shard; nil keeps the shard) and each
// tensor's bytes passed through edit (nil keeps them).
func rewritten(t *testing.T, dir string, place map[string]string, edit func(name string, b []byte) []byte) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "moved")
	c := openSrc(t, dir)
	idx := c.Index()
	where := map[string]string{}
	files := map[string][]safetensors.TensorSpec{}
	for _, f := range c.Files {
		for _, ti := range f.Tensors {
			file := f.Path
			if p, ok := place[ti.Name]; ok {
				file = p
			}
			where[ti.Name] = file
			files[file] = append(files[file], safetensors.TensorSpec{Name: ti.Name, DType: ti.DType, Shape: ti.Shape})
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
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
			f, ti, _ := c.Lookup(s.Name)
			b := readAll(t, f.Section(ti))
			if edit != nil {
				b = edit(s.Name, b)
			}
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
	if err := safetensors.WriteIndex(filepath.Join(out, safetensors.IndexName), &safetensors.Index{TotalSize: idx.TotalSize, WeightMap: where}); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".safetensors") || e.Name() == safetensors.IndexName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(out, e.Name()), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// A DeepSeek-format FP8 weight whose weight_scale_inv sits in another
// shard decodes to the BF16 that the same weight with its scale beside it
// decodes to, in the weight's shard; the scale leaves the output and its
// index. The plan depends on the scale's file: the --worker split gives the
// same tree, verify passes, and a change of the scale's values alone makes
// another plan, which resume and verify refuse.
func TestCrossShardScale(t *testing.T) {
	skipShort(t)
	t.Parallel()
	root := t.TempDir()
	fp8 := filepath.Join(root, "fp8")
	convertRecipe(t, miniSrc, fp8, AttnMoEDenseFP8, Options{Format: deepSeek})
	c := openSrc(t, fp8)
	if len(c.Files) < 2 {
		t.Fatalf("%d shards", len(c.Files))
	}
	var weight, scale, from, to string
	for i, f := range c.Files {
		for _, ti := range f.Tensors {
			if s := ti.Name + "_scale_inv"; ti.DType == safetensors.F8_E4M3 && weight == "" {
				if _, ok := f.Lookup(s); ok {
					weight, scale, from, to = ti.Name, s, f.Path, c.Files[(i+1)%len(c.Files)].Path
				}
			}
		}
	}
	if weight == "" {
		t.Fatal("no FP8 weight")
	}
	moved := rewritten(t, fp8, map[string]string{scale: to}, nil)
	if f, _, _ := openSrc(t, moved).Lookup(scale); f.Path != to {
		t.Fatalf("%s in %s", scale, f.Path)
	}

	want, got := filepath.Join(root, "want"), filepath.Join(root, "got")
	convertRecipe(t, fp8, want, BF16, Options{})
	res := convertRecipe(t, moved, got, BF16, Options{})
	w, g := tensorsOf(t, want), tensorsOf(t, got)
	if len(g) != len(w) || res.Decoded == 0 {
		t.Fatalf("%d tensors, %d with the scale beside its weight; %d decoded", len(g), len(w), res.Decoded)
	}
	for n, wt := range w {
		if gt, ok := g[n]; !ok || gt.dtype != wt.dtype || !slices.Equal(gt.shape, wt.shape) || string(gt.data) != string(wt.data) {
			t.Errorf("%s differs from its decode with the scale beside it", n)
		}
	}
	out := openSrc(t, got)
	if f, ti, ok := out.Lookup(weight); !ok || f.Path != from || ti.DType != safetensors.BF16 {
		t.Errorf("%s: %v in %v, want BF16 in %s", weight, ok, f, from)
	}
	if _, ok := out.Index().WeightMap[scale]; ok {
		t.Errorf("the output index keeps %s", scale)
	}

	p := planOf(t, moved, BF16)
	sameTree(t, splitAndMerge(t, p), got)
	// From a hub: the shard's planned ranges hold no byte of the other
	// file's scale, and nothing is fetched unplanned.
	bf16, _ := Lookup(BF16)
	hp, err := NewPlan(openRemote(t, testckpt.NewHubServer(t, moved), "hf://org/name"), nil, bf16, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if hp.ID != p.ID {
		t.Errorf("hub plan %.12s, local %.12s", hp.ID, p.ID)
	}
	hub := filepath.Join(root, "hub")
	hres, err := Execute(context.Background(), hp, hub, ExecOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n := hres.Network; n == nil || n.Unplanned != 0 {
		t.Errorf("hub: network %+v", n)
	}
	sameTree(t, hub, got)
	rep, err := Verify(context.Background(), openSrc(t, moved), got, VerifyOptions{Jobs: 2})
	if err != nil || !rep.OK || rep.Decoded != res.Decoded {
		t.Fatalf("verify: %v %v %d %v", err, rep.OK, rep.Decoded, rep.Violations)
	}

	// The scale's values doubled, its file's size and header unchanged.
	changed := rewritten(t, moved, nil, func(name string, b []byte) []byte {
		if name != scale {
			return b
		}
		for i := 0; i+4 <= len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(2*math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
		}
		return b
	})
	q := planOf(t, changed, BF16)
	if q.ID == p.ID {
		t.Fatal("a change of the scale's values keeps the plan ID")
	}
	if _, err := Execute(context.Background(), q, got, ExecOptions{Resume: true}); !errors.Is(err, ErrDestination) {
		t.Errorf("resume onto the conversion from the old scale: %v, want %v", err, ErrDestination)
	}
	if rep, err := Verify(context.Background(), openSrc(t, changed), got, VerifyOptions{Jobs: 2}); err != nil || rep.OK {
		t.Errorf("verify against the changed scale: %v, OK %v", err, rep.OK)
	}

	// A partial run's finished units belong to their plan: the weight's
	// shard, written from the old scale, is not kept for the new one.
	part := filepath.Join(root, "part")
	if _, err := Execute(context.Background(), p, part, ExecOptions{Worker: 0, Workers: len(c.Files)}); err != nil {
		t.Fatal(err)
	}
	if _, err := Execute(context.Background(), q, part, ExecOptions{Resume: true, Worker: 1, Workers: len(c.Files)}); !errors.Is(err, ErrDestination) {
		t.Errorf("a worker of the new plan joining the old one's split: %v, want %v", err, ErrDestination)
	}
}

// A shard whose weight reads its scale from another file is refused when
// that file changed since planning, even when the shard's own did not.
func TestCrossShardScaleFileChanged(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fp8 := filepath.Join(root, "fp8")
	convertRecipe(t, miniSrc, fp8, AttnMoEDenseFP8, Options{Format: deepSeek})
	c := openSrc(t, fp8)
	f := c.Files[0]
	var weight, scale string
	for _, ti := range f.Tensors {
		if _, ok := f.Lookup(ti.Name + "_scale_inv"); ok && weight == "" {
			weight, scale = ti.Name, ti.Name+"_scale_inv"
		}
	}
	to := c.Files[1].Path
	moved := rewritten(t, fp8, map[string]string{scale: to}, nil)
	p := planOf(t, moved, BF16)
	n := len(p.units())
	worker := -1
	for i := range n {
		us, err := p.slice(i, n)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{}
		for _, u := range us {
			names = append(names, u.Name)
		}
		if slices.Contains(names, f.Path) && !slices.Contains(names, to) {
			worker = i
		}
	}
	if worker < 0 {
		t.Fatalf("no worker of %d writes %s without %s", n, f.Path, to)
	}
	sf, si, _ := openSrc(t, moved).Lookup(scale)
	path := filepath.Join(moved, to)
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // a distinct mtime on coarse clocks
	_, err = fh.WriteAt([]byte{0, 0, 0x80, 0x3f}, sf.DataStart+si.Begin)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, "out")
	_, err = Execute(context.Background(), p, dst, ExecOptions{Worker: worker, Workers: n})
	if !errors.Is(err, errChanged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), scale) {
		t.Fatalf("the scale's file changed since planning: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, f.Path)); !os.IsNotExist(err) {
		t.Errorf("%s written from a changed scale file", f.Path)
	}
}

// A shard that holds nothing but another shard's weight's scale is
// refused: its BF16 output would be a shard no index lists.
func TestCrossShardScaleAlone(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fp8 := filepath.Join(root, "fp8")
	convertRecipe(t, miniSrc, fp8, AttnMoEDenseFP8, Options{Format: deepSeek})
	c := openSrc(t, fp8)
	f := c.Files[0]
	var scale string
	for _, ti := range f.Tensors {
		if _, ok := f.Lookup(ti.Name + "_scale_inv"); ok && scale == "" {
			scale = ti.Name + "_scale_inv"
		}
	}
	moved := rewritten(t, fp8, map[string]string{scale: "model-extra.safetensors"}, nil)
	r, _ := Lookup(BF16)
	_, err := NewPlan(openSrc(t, moved), nil, r, Options{})
	if want := "model-extra.safetensors: tensor cannot be block-quantized: it holds only scales of weights in other shards"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a shard of only another shard's scale: %v, want an error with %q", err, want)
	}
}

// planOf plans the conversion of dir with a named recipe.
func planOf(t *testing.T, dir, recipe string) *Plan {
	t.Helper()
	r, err := Lookup(recipe)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(openSrc(t, dir), nil, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
