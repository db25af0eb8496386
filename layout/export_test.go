package layout

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	st "github.com/k3ckpt/k3ckpt/safetensors"
)

// fixtures writes, once per test binary, the tiny BF16 replica (model.Synth,
// with data) and an FP8 version of it (written here, see writeFP8). Only
// end-to-end tests need them: a test that reads headers alone takes
// testckpt.Replica.
func fixtures(t testing.TB) (bf16, fp8 string) {
	t.Helper()
	bf16 = testckpt.Dir(t, "layout-bf16", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Scale: model.ScaleTiny, Seed: 7})
	})
	fp8 = testckpt.Dir(t, "layout-fp8", func(dir string) error { return writeFP8(bf16, dir) })
	return bf16, fp8
}

// tpFixture is the FP8 tiny variant whose experts split 8 ways, built on
// first use (only end-to-end tests need it).
func tpFixture(t testing.TB) string {
	t.Helper()
	cfg := testckpt.TPConfigJSON(t)
	// The tiny replica's experts (moe_intermediate_size 32: one MXFP4 group
	// per w2 row) cannot be TP-split 8 ways; pp8-tp8 gets a variant with 256.
	bf := testckpt.Dir(t, "layout-bf16-tp", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: cfg, Seed: 3})
	})
	return testckpt.Dir(t, "layout-fp8-tp", func(dir string) error { return writeFP8(bf, dir) })
}

// fp8Targets are the projections the ATTN-MOE-DENSE-FP8 recipe converts:
// KDA q/k/v/g/o, MLA q_a/q_b/kv_a/kv_b/o, the shared and routed expert
// projections it names, and layer 0's dense MLP.
var fp8Targets = []string{
	".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight", ".self_attn.g_proj.weight",
	".self_attn.o_proj.weight", ".self_attn.q_a_proj.weight", ".self_attn.q_b_proj.weight",
	".self_attn.kv_a_proj_with_mqa.weight", ".self_attn.kv_b_proj.weight",
	".shared_experts.gate_proj.weight", ".shared_experts.up_proj.weight", ".shared_experts.down_proj.weight",
	".routed_expert_down_proj.weight", ".routed_expert_up_proj.weight",
	".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight",
}

// writeFP8 makes a block-FP8 checkpoint shaped like the converter's output
// (DeepSeek names): every fp8Targets weight becomes F8_E4M3 (the high byte of
// each BF16 value, which is all a layout test needs: distinct, position-
// dependent bytes) plus an F32 scale whose blocks hold distinct powers of two.
func writeFP8(src, dst string) error {
	c, err := st.Open(src)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	idx := &st.Index{WeightMap: map[string]string{}}
	for _, f := range c.Files {
		var specs []st.TensorSpec
		data := map[string][]byte{}
		for _, t := range f.Tensors {
			b := make([]byte, t.Size())
			if _, err := io.ReadFull(f.Section(t), b); err != nil {
				return err
			}
			conv := false
			for _, s := range fp8Targets {
				conv = conv || (strings.HasSuffix(t.Name, s) && strings.HasPrefix(t.Name, "language_model."))
			}
			if !conv {
				specs = append(specs, st.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape})
				data[t.Name] = b
				continue
			}
			q := make([]byte, len(b)/2)
			for i := range q {
				q[i] = b[2*i+1]
			}
			specs = append(specs, st.TensorSpec{Name: t.Name, DType: st.F8_E4M3, Shape: t.Shape})
			data[t.Name] = q
			gn, gk := (t.Shape[0]+127)/128, (t.Shape[1]+127)/128
			sc := make([]byte, 4*gn*gk)
			for i := int64(0); i < gn*gk; i++ {
				binary.LittleEndian.PutUint32(sc[4*i:], math.Float32bits(float32(math.Ldexp(1, int(i%13)-9))))
			}
			name := strings.TrimSuffix(t.Name, ".weight") + ".weight_scale_inv"
			specs = append(specs, st.TensorSpec{Name: name, DType: st.F32, Shape: []int64{gn, gk}})
			data[name] = sc
		}
		lay, err := st.NewFilePlan(specs, f.Metadata)
		if err != nil {
			return err
		}
		w, err := st.Create(filepath.Join(dst, f.Path), lay)
		if err != nil {
			return err
		}
		for _, s := range specs {
			tw, err := w.Tensor(s.Name)
			if err != nil {
				w.Abort()
				return err
			}
			if _, err := tw.Write(data[s.Name]); err != nil {
				w.Abort()
				return err
			}
			idx.WeightMap[s.Name] = f.Path
			idx.TotalSize += int64(len(data[s.Name]))
		}
		if err := w.Commit(); err != nil {
			return err
		}
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), cfg, 0o644); err != nil {
		return err
	}
	return st.WriteIndex(filepath.Join(dst, st.IndexName), idx)
}

// readTensor reads a whole tensor from a checkpoint directory.
func readTensor(t testing.TB, c *st.Checkpoint, name string) ([]byte, st.TensorInfo) {
	t.Helper()
	f, ti, ok := c.Lookup(name)
	if !ok {
		t.Fatalf("%s: no tensor %s", c.Root, name)
	}
	b := make([]byte, ti.Size())
	if _, err := f.ReaderAt().ReadAt(b, f.DataStart+ti.Begin); err != nil {
		t.Fatal(err)
	}
	return b, ti
}

// naiveSlice cuts [start, stop) along axis element by element (the obvious
// way, independent of the exporter's run/window arithmetic).
func naiveSlice(b []byte, shape []int64, esz int64, axis int, start, stop int64) []byte {
	outer, inner := int64(1), int64(1)
	for _, d := range shape[:axis] {
		outer *= d
	}
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	out := make([]byte, 0, outer*(stop-start)*inner*esz)
	for o := int64(0); o < outer; o++ {
		for a := start; a < stop; a++ {
			at := (o*shape[axis] + a) * inner * esz
			out = append(out, b[at:at+inner*esz]...)
		}
	}
	return out
}

// runExport plans and executes an export.
func runExport(s *Source, l *Layout, dst string, eo ExportOptions) (*Plan, error) {
	p, err := PlanExport(s, l, eo)
	if err != nil {
		return nil, err
	}
	if _, err := p.Execute(context.Background(), dst, ExecOptions{}); err != nil {
		return nil, err
	}
	return p, nil
}

// runReassemble plans and executes a reassembly of an export directory.
func runReassemble(exportDir, out string) (*Plan, error) {
	s, err := OpenSource(exportDir)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	p, err := PlanReassemble(s)
	if err != nil {
		return nil, err
	}
	if _, err := p.Execute(context.Background(), out, ExecOptions{}); err != nil {
		return nil, err
	}
	return p, nil
}

func export(t testing.TB, src, name string, o Options, eo ExportOptions) (string, *Plan) {
	t.Helper()
	s, err := OpenSource(src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := s.Model()
	if err != nil {
		t.Fatal(err)
	}
	l, err := builtinLayout(name, m, o)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), name)
	res, err := runExport(s, l, dst, eo)
	if err != nil {
		t.Fatal(err)
	}
	return dst, res
}

// checkExport verifies every piece of every rank against the source, cut
// naively, and returns the manifests.
func checkExport(t *testing.T, srcDir, dst string) []*manifest {
	t.Helper()
	src, err := st.Open(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dirs := must(exportDirs(dst))(t)
	if len(dirs) == 0 {
		t.Fatalf("%s holds no rank directories", dst)
	}
	var mans []*manifest
	for _, d := range dirs {
		m, err := readManifest(filepath.Join(dst, d))
		if err != nil {
			t.Fatal(err)
		}
		mans = append(mans, m)
		rc, err := st.Open(filepath.Join(dst, d))
		if err != nil {
			t.Fatal(err)
		}
		if rc.NumTensors() != len(m.Tensors) {
			t.Errorf("%s: %d tensors in files, %d in manifest", d, rc.NumTensors(), len(m.Tensors))
		}
		for _, e := range m.Tensors {
			if e.Packed != nil {
				continue
			}
			want, ti := readTensor(t, src, e.Name)
			if e.Held == HeldSlice {
				want = naiveSlice(want, ti.Shape, ti.DType.Bits()/8, e.Axis, e.Start, e.Stop)
			}
			got, _ := readTensor(t, rc, e.Name)
			if !bytes.Equal(got, want) {
				t.Errorf("%s: %s (%v [%d,%d) axis %d) differs from the source", d, e.Name, e.Held, e.Start, e.Stop, e.Axis)
			}
		}
		rc.Close()
	}
	return mans
}

func entries(m *manifest) map[string]entry {
	out := map[string]entry{}
	for _, e := range m.Tensors {
		out[e.Name] = e
	}
	return out
}

// sameFile compares two files byte for byte.
func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

func TestShardPP16Tiny(t *testing.T) {
	t.Parallel()
	e2e(t)
	bf, _ := fixtures(t)
	dst, res := export(t, bf, "pp16", Options{}, ExportOptions{})
	if len(res.Dirs) != 16 || res.Dirs[0].Dir != "stage-00" {
		t.Fatalf("dirs %v", res.Dirs)
	}
	mans := checkExport(t, bf, dst)
	var total int64
	for s, m := range mans {
		a, b := m.Layers[0], m.Layers[1]
		// Stage s reads exactly the shards of its layers (layer l in shard l+1),
		// plus the model-level shards on the first and last stage.
		var want []string
		for l := a; l < b; l++ {
			want = append(want, fmt.Sprintf("model-%05d-of-000096.safetensors", l+1))
		}
		for _, e := range m.Tensors {
			if !strings.HasPrefix(e.Name, "language_model.model.layers.") {
				want = append(want, e.SourceFile)
			}
		}
		sort.Strings(want)
		want = compact(want)
		if fmt.Sprint(m.SourceFiles) != fmt.Sprint(want) {
			t.Errorf("stage %d opened %v, want %v", s, m.SourceFiles, want)
		}
		// A complete checkpoint: its index and config agree.
		dir := filepath.Join(dst, fmt.Sprintf("stage-%02d", s))
		c, err := st.Open(dir)
		if err != nil {
			t.Fatalf("stage %d is not a checkpoint: %v", s, err)
		}
		total += c.Index().TotalSize // Open checked it against the shards
		c.Close()
		cfg := must(os.ReadFile(filepath.Join(dir, "config.json")))(t)
		var obj map[string]any
		check(t, json.Unmarshal(cfg, &obj))
		sk, ok := obj[stageKey].(map[string]any)
		if !ok {
			t.Fatalf("stage %d config has no %s", s, stageKey)
		}
		if fmt.Sprint(sk["layers"]) != fmt.Sprintf("[%d %d]", a, b) {
			t.Errorf("stage %d config records %v, want [%d %d]", s, sk["layers"], a, b)
		}
		if _, err := model.ParseConfig(cfg); err != nil {
			t.Errorf("stage %d config no longer parses: %v", s, err)
		}
	}
	if mans[7].Layers != [2]int{43, 48} || mans[15].Layers != [2]int{90, 93} {
		t.Errorf("stage 7 %v, stage 15 %v", mans[7].Layers, mans[15].Layers)
	}
	src := must(st.Open(bf))(t)
	if total != src.Index().TotalSize {
		t.Errorf("stages hold %d B, source %d", total, src.Index().TotalSize)
	}
	src.Close()
	// Lossless: reassembly gives back every source file byte for byte.
	out := filepath.Join(t.TempDir(), "out")
	rr, err := runReassemble(dst, out)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Files != 96 || len(rr.Dropped) != 0 {
		t.Errorf("reassembled %d files, missing %v", rr.Files, rr.Dropped)
	}
	ents := must(os.ReadDir(bf))(t)
	for _, e := range ents {
		if !sameFile(t, filepath.Join(bf, e.Name()), filepath.Join(out, e.Name())) {
			t.Errorf("%s differs after reassembly", e.Name())
		}
	}
}

func compact(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func TestExportDP16Tiny(t *testing.T) {
	t.Parallel()
	e2e(t)
	bf, fp := fixtures(t)
	for _, src := range []string{bf, fp} {
		dst, res := export(t, src, "dp16", Options{TextOnly: true, WeightShard: true, VocabTP: true}, ExportOptions{})
		mans := checkExport(t, src, dst)
		if len(mans) != 16 || res.Files == 0 {
			t.Fatalf("%d ranks", len(mans))
		}
		for r, m := range mans {
			es := entries(m)
			g := int64(r % 8)
			experts := map[int]bool{}
			for _, e := range m.Tensors {
				if e.Held == heldExpert {
					var x int
					fmt.Sscanf(e.Name[strings.Index(e.Name, "experts.")+8:], "%d", &x)
					experts[x] = true
				}
			}
			if len(experts) != 2 || !experts[2*r] || !experts[2*r+1] {
				t.Errorf("rank %d experts %v, want {%d, %d}", r, experts, 2*r, 2*r+1)
			}
			if e := es["language_model.model.embed_tokens.weight"]; e.Held != HeldSlice || e.Start != 125*g || e.Stop != 125*(g+1) {
				t.Errorf("rank %d vocab %+v", r, e)
			}
			// Tiny q_proj is [128, 160]: 1/8 of the rows is 16, which cuts a 128 block.
			q := "language_model.model.layers.1.self_attn.q_proj."
			if e := es[q+"weight"]; e.Start != 16*g || e.Stop != 16*(g+1) {
				t.Errorf("rank %d q_proj %+v", r, e)
			}
			if src == fp {
				if e := es[q+"weight_scale_inv"]; e.Held != heldReplica || e.Scale != scaleReplicated || e.ScaleOf != q+"weight" {
					t.Errorf("rank %d q_proj scale %+v, want replicated", r, e)
				}
			}
			for name := range es {
				if strings.HasPrefix(name, "vision_tower.") || strings.HasPrefix(name, "mm_projector.") {
					t.Fatalf("rank %d holds %s", r, name)
				}
			}
		}
		if src == fp && len(res.Unaligned) == 0 {
			t.Error("no unaligned scales reported for 16-row slices")
		}
		// Reassembly rebuilds every kept tensor byte for byte; only the shard
		// that held vision differs (vision was dropped).
		out := filepath.Join(t.TempDir(), "out")
		rr, err := runReassemble(dst, out)
		if err != nil {
			t.Fatal(err)
		}
		if len(rr.Dropped) == 0 || !strings.HasPrefix(rr.Dropped[0], "mm_projector.") {
			t.Errorf("missing %v", rr.Dropped)
		}
		checkSame(t, src, out)
	}
}

// checkSame compares every reassembled tensor with the source, and every
// shard that lost nothing byte for byte.
func checkSame(t *testing.T, src, out string) {
	t.Helper()
	a, err := OpenSource(src)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenSource(out)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := Compare(context.Background(), a, b); err != nil {
		t.Fatal(err)
	}
	lost := map[string]bool{}
	have := map[string]bool{}
	for _, s := range b.Specs {
		have[s.Name] = true
	}
	for i, s := range a.Specs {
		if !have[s.Name] {
			lost[a.fileOf[i]] = true
		}
	}
	for _, f := range a.info.Files {
		if !lost[f.Name] && !sameFile(t, filepath.Join(src, f.Name), filepath.Join(out, f.Name)) {
			t.Errorf("%s differs after reassembly", f.Name)
		}
	}
}

func TestExportDCPAndTP(t *testing.T) {
	t.Parallel()
	e2e(t)
	_, fp := fixtures(t)
	dst, _ := export(t, fp, "dp2-dcp8", Options{TextOnly: true, VocabTP: true}, ExportOptions{Ranks: []int{3, 11}})
	mans := checkExport(t, fp, dst)
	if len(mans) != 2 {
		t.Fatalf("%d ranks written", len(mans))
	}
	for _, m := range mans {
		es := entries(m)
		g := int64(m.Rank % 8)
		K, M := "language_model.model.layers.1.self_attn.", "language_model.model.layers.3.self_attn."
		// Tiny KDA: 8 heads × 16; head TP8 is one head per rank.
		for name, want := range map[string][3]int64{
			K + "q_proj.weight": {0, 16 * g, 16 * (g + 1)}, K + "b_proj.weight": {0, g, g + 1},
			K + "A_log": {0, g, g + 1}, K + "o_proj.weight": {1, 16 * g, 16 * (g + 1)},
			K + "dt_bias": {0, 16 * g, 16 * (g + 1)}, M + "o_proj.weight": {1, 16 * g, 16 * (g + 1)},
		} {
			e := es[name]
			if e.Held != HeldSlice || int64(e.Axis) != want[0] || e.Start != want[1] || e.Stop != want[2] {
				t.Errorf("rank %d %s = %+v, want axis %d [%d,%d)", m.Rank, name, e, want[0], want[1], want[2])
			}
		}
		if e := es[K+"A_log"]; e.Valid != 8 {
			t.Errorf("A_log valid %d, want 8 (heads)", e.Valid)
		}
		if e := es[M+"q_b_proj.weight"]; e.Held != heldReplica {
			t.Errorf("q_b_proj %+v, want replicated", e)
		}
	}
}

func TestExportPP8TP8(t *testing.T) {
	t.Parallel()
	e2e(t)
	_, fp := fixtures(t)
	// One MXFP4 group per w2 row cannot be cut 8 ways: a clear error up front.
	s := must(OpenSource(fp))(t)
	m := must(s.Model())(t)
	l := must(builtinLayout("pp8-tp8", m, Options{}))(t)
	_, err := runExport(s, l, filepath.Join(t.TempDir(), "x"), ExportOptions{})
	s.Close()
	if !errors.Is(err, errIndivisible) || !strings.Contains(err.Error(), "w2.weight_scale: axis 1 of [96 1] has 1 entries, not divisible by 8") {
		t.Errorf("expert TP err %v", err)
	}
	tp := tpFixture(t)
	dst, res := export(t, tp, "pp8-tp8", Options{}, ExportOptions{})
	if len(res.Dirs) != 64 {
		t.Fatalf("%d dirs", len(res.Dirs))
	}
	mans := checkExport(t, tp, dst)
	// rank 8s+g: stage s (layers 12s…), TP rank g; w2 [96, 128] packed bytes split by column.
	m11 := entries(mans[11])
	E := "language_model.model.layers.13.block_sparse_moe.experts.15."
	for name, want := range map[string][3]int64{
		E + "w1.weight_packed": {0, 96, 128}, E + "w1.weight_scale": {0, 96, 128},
		E + "w2.weight_packed": {1, 48, 64}, E + "w2.weight_scale": {1, 3, 4},
	} {
		e := m11[name]
		if e.Held != HeldSlice || int64(e.Axis) != want[0] || e.Start != want[1] || e.Stop != want[2] {
			t.Errorf("%s = %+v, want axis %d [%d,%d)", name, e, want[0], want[1], want[2])
		}
	}
	// Vision kept on stage 0: a full reassembly is byte-identical, file by file.
	out := filepath.Join(t.TempDir(), "out")
	if _, err := runReassemble(dst, out); err != nil {
		t.Fatal(err)
	}
	checkSame(t, tp, out)
	ents := must(os.ReadDir(tp))(t)
	for _, e := range ents {
		if !sameFile(t, filepath.Join(tp, e.Name()), filepath.Join(out, e.Name())) {
			t.Errorf("%s differs after reassembly", e.Name())
		}
	}
}

// DCP replicated Q: from an export whose q_b_proj is TP-sharded with packed
// scales, the dp2-dcp8 export rebuilds the full q_b_proj by unpacking,
// gathering by head and repacking; that must equal packing the full matrix.
func TestReplicatedQFromPackedShards(t *testing.T) {
	t.Parallel()
	e2e(t)
	packed := ExportOptions{Pack: packUE8M0}
	fp := tpFixture(t)
	tp, _ := export(t, fp, "pp8-tp8", Options{}, packed) // q_b_proj split by head, scales packed
	some := ExportOptions{Pack: packUE8M0, Ranks: []int{0, 5, 13}}
	direct, _ := export(t, fp, "dp2-dcp8", Options{TextOnly: true, VocabTP: true}, some)
	gathered, _ := export(t, tp, "dp2-dcp8", Options{TextOnly: true, VocabTP: true}, some)
	q := "language_model.model.layers.3.self_attn.q_b_proj.weight_scale_inv"
	// The TP8 shards: rank g of stage 0 holds head g's 128 rows and their
	// packed scale. Unpacking each, concatenating the block rows (every
	// shard is whole 128-row blocks) and packing the result is the reference.
	var blockScales []float32
	for g := 0; g < 8; g++ {
		dir := filepath.Join(tp, fmt.Sprintf("rank-%02d", g))
		m := must(readManifest(dir))(t)
		if e := entries(m)[q]; e.Packed == nil || e.Packed.Rows != [2]int64{128 * int64(g), 128 * int64(g+1)} || e.Scale != scaleFollow {
			t.Fatalf("pp8-tp8 rank %d %s = %+v, want packed rows [%d,%d)", g, q, e, 128*g, 128*(g+1))
		}
		c := must(st.Open(dir))(t)
		b, _ := readTensor(t, c, q)
		c.Close()
		part, err := quant.UnpackUE8M0(int32s(b), 128, 96)
		if err != nil {
			t.Fatalf("pp8-tp8 rank %d %s: %v", g, q, err)
		}
		blockScales = append(blockScales, part...)
	}
	ref, err := quant.PackUE8M0(blockScales, 8*128, 96)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{0, 5, 13} {
		d := fmt.Sprintf("rank-%02d", r)
		a, err := st.Open(filepath.Join(direct, d))
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Open(filepath.Join(gathered, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{q, strings.TrimSuffix(q, "_scale_inv")} {
			x, ti := readTensor(t, a, name)
			y, _ := readTensor(t, b, name)
			if !bytes.Equal(x, y) {
				t.Errorf("rank %d %s: gathered differs from packing the full matrix", r, name)
			}
			if name == q && (ti.DType != st.I32 || ti.Shape[0] != 1 || ti.Shape[1] != 1024) {
				t.Errorf("packed q_b scale %s %v, want I32 [1 1024]", ti.DType, ti.Shape)
			}
			if name == q && fmt.Sprint(int32s(y)) != fmt.Sprint(ref) {
				t.Errorf("rank %d %s differs from packing the TP shards' block scales", r, name)
			}
		}
		a.Close()
		b.Close()
	}
	// And the packed export reassembles to the source F32 scales exactly.
	out := filepath.Join(t.TempDir(), "out")
	if _, err := runReassemble(tp, out); err != nil {
		t.Fatal(err)
	}
	checkSame(t, fp, out)
}

func int32s(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func TestExportBadInput(t *testing.T) {
	t.Parallel()
	e2e(t)
	bf, _ := fixtures(t)
	s, err := OpenSource(bf)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := must(s.Model())(t)
	l := must(builtinLayout("dp16", m, Options{TextOnly: true}))(t)
	dst := filepath.Join(t.TempDir(), "x")
	if _, err := runExport(s, l, dst, ExportOptions{Ranks: []int{3, 16}}); !errors.Is(err, errRank) {
		t.Errorf("rank err %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bad rank list created %s", dst)
	}
	// A layout claiming A_log has only 4 real heads: the dropped entries are
	// not zero, so the export refuses before writing anything.
	l2 := must(builtinLayout("dp2-dcp8", m, Options{TextOnly: true}))(t)
	for i := range l2.Rules {
		if l2.Rules[i].Name == "kda-a-log" {
			l2.Rules[i].Valid, l2.Rules[i].Units, l2.Rules[i].Parts = 4, 0, 4
		}
	}
	if _, err := runExport(s, l2, dst, ExportOptions{}); !errors.Is(err, errPadding) || !strings.Contains(err.Error(), "A_log") {
		t.Errorf("padding err %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed export created %s", dst)
	}
	// An occupied output directory.
	check(t, os.MkdirAll(filepath.Join(dst, "rank-00"), 0o755))
	check(t, os.WriteFile(filepath.Join(dst, "rank-00", "junk"), []byte("x"), 0o644))
	if _, err := runExport(s, l, dst, ExportOptions{Ranks: []int{0}}); !errors.Is(err, errOutputExists) {
		t.Errorf("exists err %v", err)
	}
	if _, err := ParseRanks("1,x"); !errors.Is(err, errRank) {
		t.Errorf("parse ranks err %v", err)
	}
	if r, err := ParseRanks("0,3-5"); err != nil || fmt.Sprint(r) != "[0 3 4 5]" {
		t.Errorf("ranks %v %v", r, err)
	}
	// Reassembly with a rank directory missing names the gap.
	full, _ := export(t, bf, "dp16", Options{TextOnly: true, WeightShard: true}, ExportOptions{})
	os.RemoveAll(filepath.Join(full, "rank-05"))
	if _, err := runReassemble(full, filepath.Join(t.TempDir(), "o")); !errors.Is(err, errManifest) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing rank err %v", err)
	}
}

// A user layout from JSON on a single-file checkpoint with ModelOpt-shaped
// [⌈N/128⌉, 1, ⌈K/128⌉, 1] scales: an aligned row split carries its block
// rows, an unaligned column split keeps the scale replicated, and scales
// that are not powers of two cannot be packed (refused before writing).
func TestJSONLayoutModelOpt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	specs := []st.TensorSpec{
		{Name: "a.weight", DType: st.F8_E4M3, Shape: []int64{256, 384}},
		{Name: "a.weight_scale", DType: st.F32, Shape: []int64{2, 1, 3, 1}},
		{Name: "b.weight", DType: st.F8_E4M3, Shape: []int64{256, 384}},
		{Name: "b.weight_scale", DType: st.F32, Shape: []int64{2, 1, 3, 1}},
		{Name: "c", DType: st.BF16, Shape: []int64{4, 6}},
	}
	lay, err := st.NewFilePlan(specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Create(filepath.Join(dir, "model.safetensors"), lay)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		n := must(st.ByteSize(s.DType, s.Shape))(t)
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + len(s.Name))
		}
		if s.DType == st.F32 {
			for i := 0; i < len(b); i += 4 {
				binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(i+1)*0.3))
			}
		}
		tw := must(w.Tensor(s.Name))(t)
		must(tw.Write(b))(t)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	js := `{"name": "two", "ranks_per_stage": 2, "rules": [
		{"name": "rows", "match": ["a.weight"], "action": "split", "axis": 0, "parts": 2},
		{"name": "cols", "match": ["b.weight", "c"], "action": "split", "axis": 1, "parts": 2}]}`
	lpath := filepath.Join(t.TempDir(), "two.json")
	check(t, os.WriteFile(lpath, []byte(js), 0o644))
	l, err := Resolve(lpath, Model{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := OpenSource(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := runExport(src, l, dst, ExportOptions{Pack: packUE8M0}); err == nil || !strings.Contains(err.Error(), "scale is not UE8M0") {
		t.Errorf("packing non-UE8M0 scales: err %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused export created %s", dst)
	}
	res, err := runExport(src, l, dst, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Unaligned) != "[b.weight]" {
		t.Errorf("unaligned %v", res.Unaligned)
	}
	mans := checkExport(t, dir, dst)
	es := entries(mans[1])
	if e := es["a.weight_scale"]; e.Held != HeldSlice || e.Axis != 0 || e.Start != 1 || e.Stop != 2 || e.Scale != scaleFollow {
		t.Errorf("a scale %+v, want block row [1,2)", e)
	}
	if e := es["b.weight_scale"]; e.Held != heldReplica || e.Scale != scaleReplicated {
		t.Errorf("b scale %+v, want replicated", e)
	}
	if e := es["c"]; e.Axis != 1 || e.Start != 3 || e.Stop != 6 {
		t.Errorf("c %+v", e)
	}
	out := filepath.Join(t.TempDir(), "re")
	if _, err := runReassemble(dst, out); err != nil {
		t.Fatal(err)
	}
	if !sameFile(t, filepath.Join(dir, "model.safetensors"), filepath.Join(out, "model.safetensors")) {
		t.Error("reassembled file differs")
	}
}

// smallReplica is the ~0.9 GiB small replica: $K3CKPT_SMALL_REPLICA, or one
// synthesized (about 40 s) into the fixture directory.
func smallReplica(b *testing.B) (string, int64) {
	dir := os.Getenv("K3CKPT_SMALL_REPLICA")
	if dir == "" {
		dir = testckpt.Dir(b, "layout-small", func(dir string) error {
			return model.Synth(dir, model.SynthOptions{Scale: model.ScaleSmall, Force: true})
		})
	}
	var size int64
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		info := must(e.Info())(b)
		size += info.Size()
	}
	return dir, size
}

// benchExport measures an export of the small replica side by side with cp
// -r of the same replica on the same disk, without and with sync (the
// export fsyncs every file): warm page cache for both, cleanup untimed.
// export-MB/s counts the bytes written (a decode layout writes more than the
// checkpoint: replicated tensors on every rank), cp the replica's bytes.
func benchExport(b *testing.B, name string, o Options) {
	srcDir, size := smallReplica(b)
	s, err := OpenSource(srcDir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m := must(s.Model())(b)
	l, err := builtinLayout(name, m, o)
	if err != nil {
		b.Fatal(err)
	}
	p := must(l.Place(s.Specs))(b)
	var written int64
	for _, n := range p.RankBytes {
		written += n
	}
	b.SetBytes(written)
	b.ReportAllocs()
	tmp := b.TempDir()
	dst, cpDst := filepath.Join(tmp, "out"), filepath.Join(tmp, "cp")
	var expT, cpT, syncT time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		os.RemoveAll(dst)
		syncAll(b)
		t0 := time.Now()
		if out, err := exec.Command("cp", "-r", srcDir, cpDst).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v %s", err, out)
		}
		t1 := time.Now()
		syncAll(b)
		cpT, syncT = cpT+t1.Sub(t0), syncT+time.Since(t1)
		os.RemoveAll(cpDst)
		syncAll(b)
		b.StartTimer()
		t0 = time.Now()
		if _, err := runExport(s, l, dst, ExportOptions{}); err != nil {
			b.Fatal(err)
		}
		expT += time.Since(t0)
		n++
	}
	rate := func(bytes int64, d time.Duration) float64 { return float64(bytes) * float64(n) / 1e6 / d.Seconds() }
	exp, cp, cps := rate(written, expT), rate(size, cpT), rate(size, cpT+syncT)
	b.ReportMetric(exp, "export-MB/s")
	b.ReportMetric(cp, "cp-r-MB/s")
	b.ReportMetric(cps, "cp-r+sync-MB/s")
	b.ReportMetric(exp/cp, "ratio-vs-cp")
	b.ReportMetric(exp/cps, "ratio-vs-cp+sync")
}

func syncAll(b *testing.B) {
	if out, err := exec.Command("sync").CombinedOutput(); err != nil {
		b.Fatalf("sync: %v %s", err, out)
	}
}

// Export throughput on the small replica (every file fsynced), each next to
// cp -r of the replica:
//
//	K3CKPT_SMALL_REPLICA=DIR go test -run XXX -bench Export -benchtime 5x ./layout
func BenchmarkExportPP16Small(b *testing.B) { benchExport(b, "pp16", Options{}) }

func BenchmarkExportDP16Small(b *testing.B) {
	benchExport(b, "dp16", Options{TextOnly: true, WeightShard: true, VocabTP: true})
}

func BenchmarkExportDP2DCP8Small(b *testing.B) {
	benchExport(b, "dp2-dcp8", Options{TextOnly: true, VocabTP: true})
}
