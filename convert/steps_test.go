package convert

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// headerOnly serves a safetensors header followed by zeros up to size, so a
// source File can be made with tensors of any size without their bytes.
type headerOnly struct{ hdr []byte }

func (h headerOnly) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off < int64(len(h.hdr)) {
		copy(p, h.hdr[off:])
	}
	return len(p), nil
}

// sourceFile lays out specs canonically and reads the header back as a source.
func sourceFile(t *testing.T, specs []safetensors.TensorSpec) *safetensors.File {
	t.Helper()
	l, err := safetensors.NewFilePlan(specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadHeader(headerOnly{l.Header}, l.Size, "src.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A hand-made shard: the expected runs are worked out from the canonical
// order (F32, then BF16, then F8_E4M3, then U8; by name inside a dtype).
func TestPlanStepsHandMade(t *testing.T) {
	t.Parallel()
	bf, u8, f32 := safetensors.BF16, safetensors.U8, safetensors.F32
	sf := sourceFile(t, []safetensors.TensorSpec{
		{Name: "a", DType: bf, Shape: []int64{4}},
		{Name: "b", DType: bf, Shape: []int64{4}},
		{Name: "c.weight", DType: bf, Shape: []int64{256, 128}},
		{Name: "d", DType: bf, Shape: []int64{4}},
		{Name: "e", DType: bf, Shape: []int64{4}},
		{Name: "f", DType: bf, Shape: []int64{4}},
		{Name: "u1", DType: u8, Shape: []int64{8}},
		{Name: "u2", DType: u8, Shape: []int64{8}},
		{Name: "u3", DType: u8, Shape: []int64{8}},
		{Name: "z", DType: f32, Shape: []int64{2}},
	})
	keep := func(name string) outputTensor {
		src, _ := sf.Lookup(name)
		spec := safetensors.TensorSpec{Name: name, DType: src.DType, Shape: src.Shape}
		return outputTensor{TensorSpec: spec, Source: name, Role: roleCopy}
	}
	cw := []int64{256, 128}
	outs := []outputTensor{
		keep("a"), keep("b"),
		{TensorSpec: safetensors.TensorSpec{Name: "c.weight", DType: weightDType, Shape: cw}, Source: "c.weight", Role: roleWeight},
		{TensorSpec: safetensors.TensorSpec{Name: "c.weight_scale_inv", DType: scaleDType, Shape: []int64{2, 1}}, Source: "c.weight", Role: roleScale},
		keep("d"), keep("f"), keep("u1"), keep("u2"), keep("u3"), keep("z"), // "e" dropped
	}
	l, _, ordered, err := layoutFile(sf, outs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range ordered {
		names = append(names, o.Name)
	}
	// Output order: F32 (scale, z), BF16 (a b d f), F8 (c), U8 (u1 u2 u3).
	wantOrder := []string{"c.weight_scale_inv", "z", "a", "b", "d", "f", "c.weight", "u1", "u2", "u3"}
	if !slices.Equal(names, wantOrder) {
		t.Fatalf("output order %v, want %v", names, wantOrder)
	}
	steps, err := planSteps(k3Classifier, sf, l, ordered)
	if err != nil {
		t.Fatal(err)
	}
	at := func(name string) int64 { ti, _ := sf.Lookup(name); return sf.DataStart + ti.Begin }
	cw2 := int64(256 * 128 * 2)
	want := []step{
		// The file's codes (32 KiB) fit MaxHeldCodes: made once, held.
		{Kind: stepScales, First: 0, Last: 6, Src: at("c.weight"), Len: cw2, HoldCodes: true},
		// z ends the source's F32 region where a begins: z a b are contiguous
		// on both sides, and the scale before them is not part of the run.
		{Kind: stepCopy, First: 1, Last: 3, Src: at("z"), Len: 8 + 8 + 8},
		{Kind: stepCopy, First: 4, Last: 4, Src: at("d"), Len: 8}, // c.weight lies between b and d in the source
		{Kind: stepCopy, First: 5, Last: 5, Src: at("f"), Len: 8}, // dropped e lies between d and f
		{Kind: stepCodes, First: 6, Last: 0, Src: at("c.weight"), Len: cw2, HoldCodes: true},
		// f and u1 are contiguous in the source but c.weight's codes lie between them in the output.
		{Kind: stepCopy, First: 7, Last: 9, Src: at("u1"), Len: 24},
	}
	if !slices.EqualFunc(stripSources(t, steps), want, sameStep) {
		t.Errorf("steps\n got %+v\nwant %+v", steps, want)
	}
}

// A file whose FP8 codes exceed MaxHeldCodes is quantized twice: no step
// holds codes.
func TestPlanStepsHoldLimit(t *testing.T) {
	t.Parallel()
	const n = 4096 // three 4096×4096 weights: 48 MiB of codes
	var specs []safetensors.TensorSpec
	var outs []outputTensor
	for _, name := range []string{"a.weight", "b.weight", "c.weight"} {
		sh := []int64{n, n}
		specs = append(specs, safetensors.TensorSpec{Name: name, DType: safetensors.BF16, Shape: sh})
		outs = append(outs,
			outputTensor{TensorSpec: safetensors.TensorSpec{Name: name, DType: weightDType, Shape: sh}, Source: name, Role: roleWeight},
			outputTensor{TensorSpec: safetensors.TensorSpec{Name: name + "_scale_inv", DType: scaleDType, Shape: []int64{n / 128, n / 128}}, Source: name, Role: roleScale})
	}
	if 3*n*n <= maxHeldCodes {
		t.Fatal("codes fit MaxHeldCodes")
	}
	sf := sourceFile(t, specs)
	l, _, ordered, err := layoutFile(sf, outs)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := planSteps(k3Classifier, sf, l, ordered)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 6 {
		t.Fatalf("%d steps, want 3 scale and 3 code steps", len(steps))
	}
	for _, st := range steps {
		if st.HoldCodes {
			t.Errorf("%s step of %s holds codes", st.Kind, ordered[st.First].Name)
		}
	}
}

// Runs stop at MaxRunBytes: three 100 MiB tensors make two runs.
func TestPlanStepsRunLimit(t *testing.T) {
	t.Parallel()
	const n = 100 << 20
	specs := []safetensors.TensorSpec{
		{Name: "x0", DType: safetensors.U8, Shape: []int64{n}},
		{Name: "x1", DType: safetensors.U8, Shape: []int64{n}},
		{Name: "x2", DType: safetensors.U8, Shape: []int64{n}},
	}
	sf := sourceFile(t, specs)
	var outs []outputTensor
	for _, s := range specs {
		outs = append(outs, outputTensor{TensorSpec: s, Source: s.Name, Role: roleCopy})
	}
	l, _, ordered, err := layoutFile(sf, outs)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := planSteps(k3Classifier, sf, l, ordered)
	if err != nil {
		t.Fatal(err)
	}
	want := []step{
		{Kind: stepCopy, First: 0, Last: 1, Src: sf.DataStart, Len: 2 * n},
		{Kind: stepCopy, First: 2, Last: 2, Src: sf.DataStart + 2*n, Len: n},
	}
	if !slices.EqualFunc(stripSources(t, steps), want, sameStep) {
		t.Errorf("steps %+v, want %+v", steps, want)
	}
}

// Every planned shard of the mini replica (and, in the full suite, of the
// tiny one), in every convention: the steps
// write each output tensor exactly once, in file order; a copy run's
// tensors are contiguous and in order on both sides, so its source range
// holds exactly its tensors (never a quantized or dropped one); runs are as
// long as allowed; scale and code steps pair a weight with its own scale.
func TestPlanStepsInvariants(t *testing.T) {
	t.Parallel()
	srcs := []string{miniSrc}
	if !testing.Short() {
		srcs = append(srcs, tinySrc(t))
	}
	for _, src := range srcs {
		checkPlanSteps(t, src)
	}
}

func checkPlanSteps(t *testing.T, src string) {
	for _, opts := range []Options{{}, {Format: compressedTensors}, {Format: modelOpt, ScaleFmt: quant.ScaleUE8M0}} {
		p, c, err := planFor(src, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		runs, multi := 0, 0
		for _, fp := range p.Files {
			_, outs, err := planFile(p.SrcRoot, fp.Source, p.Recipe, opts)
			if err != nil {
				t.Fatal(err)
			}
			checkSteps(t, fp, fp.Layout, outs)
			for _, st := range fp.Steps {
				if st.Kind == stepCopy {
					runs++
					if st.Last > st.First {
						multi++
					}
				}
			}
		}
		if multi == 0 || runs >= p.Totals.Copied/4 {
			t.Errorf("%v: %d runs (%d of several tensors) for %d copied tensors: not grouped", opts.Format, runs, multi, p.Totals.Copied)
		}
	}
}

func checkSteps(t *testing.T, fp *filePlan, l *safetensors.FilePlan, outs []outputTensor) {
	t.Helper()
	sf := fp.Source
	var codes int64
	for i, o := range outs {
		if o.Role == roleWeight {
			codes += l.Tensors[i].Size()
		}
	}
	for _, st := range fp.Steps {
		if want := st.Kind != stepCopy && codes <= maxHeldCodes; st.HoldCodes != want {
			t.Errorf("%s: %s step at %d: HoldCodes %v with %d bytes of codes in the file", fp.Name, st.Kind, st.First, st.HoldCodes, codes)
		}
	}
	covered := make([]int, len(outs))
	next := 0 // steps write the file in order, tensor after tensor
	for k, st := range fp.Steps {
		if st.First != next {
			t.Errorf("%s: step %d (%s) starts at output %d, want %d", fp.Name, k, st.Kind, st.First, next)
		}
		next = st.First + st.writes()
		switch st.Kind {
		case stepCopy:
			var n int64
			for i := st.First; i <= st.Last; i++ {
				covered[i]++
				if outs[i].Role != roleCopy {
					t.Errorf("%s: copy run %d..%d holds %s (%s)", fp.Name, st.First, st.Last, outs[i].Name, outs[i].Role)
					continue
				}
				src, _ := sf.Lookup(outs[i].Source)
				if sf.DataStart+src.Begin != st.Src+n {
					t.Errorf("%s: run %d..%d: %s not contiguous in the source", fp.Name, st.First, st.Last, outs[i].Name)
				}
				if i > st.First && l.Tensors[i].Begin != l.Tensors[i-1].End {
					t.Errorf("%s: run %d..%d: %s not contiguous in the output", fp.Name, st.First, st.Last, outs[i].Name)
				}
				n += src.Size()
			}
			if n != st.Len {
				t.Errorf("%s: run %d..%d: %d bytes, step says %d", fp.Name, st.First, st.Last, n, st.Len)
			}
			// The source range holds exactly the run's tensors.
			for _, ti := range sf.Tensors {
				if b := sf.DataStart + ti.Begin; b >= st.Src && b < st.Src+st.Len && ti.Size() > 0 {
					if j := slices.IndexFunc(outs[st.First:st.Last+1], func(o outputTensor) bool { return o.Source == ti.Name }); j < 0 {
						t.Errorf("%s: run %d..%d crosses source tensor %s, which it does not copy", fp.Name, st.First, st.Last, ti.Name)
					}
				}
			}
			// Maximal: the next step could not have joined this run.
			if k+1 < len(fp.Steps) {
				nx := fp.Steps[k+1]
				if nx.Kind == stepCopy && nx.First == st.Last+1 && nx.Src == st.Src+st.Len && st.Len+outSize(l, nx.First) <= maxRunBytes {
					t.Errorf("%s: runs %d..%d and %d..%d could be one", fp.Name, st.First, st.Last, nx.First, nx.Last)
				}
			}
		case stepScales, stepCodes:
			covered[st.First]++
			w, s := outs[st.First], outs[st.Last]
			if st.Kind == stepScales {
				w, s = s, w
			}
			if w.Role != roleWeight || s.Role != roleScale || s.Source != w.Source {
				t.Errorf("%s: %s step pairs %s (%s) with %s (%s)", fp.Name, st.Kind, w.Name, w.Role, s.Name, s.Role)
			}
			src, _ := sf.Lookup(w.Source)
			if st.Src != sf.DataStart+src.Begin || st.Len != src.Size() {
				t.Errorf("%s: quantize %s reads [%d, +%d), the source tensor is [%d, +%d)", fp.Name, w.Name, st.Src, st.Len, sf.DataStart+src.Begin, src.Size())
			}
		default:
			t.Errorf("%s: step kind %v", fp.Name, st.Kind)
		}
	}
	for i, n := range covered {
		if n != 1 {
			t.Errorf("%s: output %s written by %d steps", fp.Name, outs[i].Name, n)
		}
	}
}

func outSize(l *safetensors.FilePlan, i int) int64 { return l.Tensors[i].Size() }

// The executor writes the same file whether a shard's codes are held from
// the scale steps or made again at the code steps: the FP8 codes and scales
// equal the quant reference, and the sha256 taken in flight is the file's.
func TestHeldAndRequantizedCodesAgree(t *testing.T) {
	t.Parallel()
	const p = "language_model.model.layers.1."
	specs := []safetensors.TensorSpec{
		{Name: p + "input_layernorm.weight", DType: safetensors.BF16, Shape: []int64{260}},
		{Name: p + "self_attn.q_proj.weight", DType: safetensors.BF16, Shape: []int64{300, 260}},
		{Name: p + "self_attn.k_proj.weight", DType: safetensors.BF16, Shape: []int64{128, 260}},
		{Name: p + "self_attn.A_log", DType: safetensors.F32, Shape: []int64{128}},
		{Name: p + "block_sparse_moe.experts.0.w1.weight_packed", DType: safetensors.U8, Shape: []int64{64, 16}},
	}
	var x uint32 = 9
	data := make([][]byte, len(specs))
	for i, s := range specs {
		n, _ := safetensors.ByteSize(s.DType, s.Shape)
		data[i] = make([]byte, n)
		for j := 0; j+2 <= len(data[i]); j += 2 {
			x = x*1664525 + 1013904223
			binary.LittleEndian.PutUint16(data[i][j:], quant.F32ToBF16(float32(int32(x))/(1<<31)))
		}
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "in.safetensors"), specs, data)
	f, err := safetensors.OpenFile(filepath.Join(dir, "in.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	plan := &Plan{Recipe: mustRecipe(t), SrcRoot: dir}
	fp, _, err := planFile(dir, f, plan.Recipe, plan.Options)
	if err != nil {
		t.Fatal(err)
	}
	l, planned := fp.Layout, fp.Steps
	run := func(hold bool) []byte {
		fp.Steps = slices.Clone(planned)
		quantized := 0
		for i := range fp.Steps {
			if fp.Steps[i].Kind != stepCopy {
				if !fp.Steps[i].HoldCodes {
					t.Fatalf("%s step not holding codes for a %d-byte file", fp.Steps[i].Kind, l.Size)
				}
				fp.Steps[i].HoldCodes = hold
				quantized++
			}
		}
		if quantized != 4 {
			t.Fatalf("%d scale and code steps, want 4", quantized)
		}
		path := filepath.Join(dir, fmt.Sprintf("out-%v.safetensors", hold))
		_, rec, commit, err := (&scratch{}).writeShard(context.Background(), plan, path, fp, meter{})
		if err != nil {
			t.Fatal(err)
		}
		if rec.SHA256, err = commit(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); rec.SHA256 != hex.EncodeToString(sum[:]) || rec.Size != int64(len(b)) {
			t.Errorf("hold %v: record %+v, file has %d bytes, sha256 %x", hold, rec, len(b), sum)
		}
		return b
	}
	held, again := run(true), run(false)
	if !bytes.Equal(held, again) {
		t.Fatal("held codes and codes made again give different files")
	}
	out, err := safetensors.ReadHeader(bytes.NewReader(held), int64(len(held)), "out")
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs[1:3] {
		n, k := int(s.Shape[0]), int(s.Shape[1])
		fp8, scales := refQuantize(t, data[i+1], s.DType, n, k, quant.ScaleFP32)
		wt, _ := out.Lookup(s.Name)
		st, _ := out.Lookup(strings.TrimSuffix(s.Name, "weight") + "weight_scale_inv")
		if !bytes.Equal(held[out.DataStart+wt.Begin:out.DataStart+wt.End], fp8) {
			t.Errorf("%s: FP8 codes differ from the reference", s.Name)
		}
		sb := held[out.DataStart+st.Begin : out.DataStart+st.End]
		for j, v := range scales {
			if binary.LittleEndian.Uint32(sb[4*j:]) != math.Float32bits(v) {
				t.Fatalf("%s: scale %d differs from the reference", s.Name, j)
			}
		}
	}
}

// countProgress adds up what the executor reports.
type countProgress struct{ total, done atomic.Int64 }

func (c *countProgress) Start(n int64) { c.total.Store(n) }
func (c *countProgress) Add(n int64)   { c.done.Add(n) }

// The work Execute announces is exactly the work it reports: every source
// byte read (weights whose codes are made twice, twice) and every output
// byte hashed, so a progress bar ends at 100%.
func TestProgressAddsUp(t *testing.T) {
	t.Parallel()
	var c countProgress
	if _, err := convertDir(miniSrc, filepath.Join(t.TempDir(), "out"), Options{}, ExecOptions{Jobs: 2, Progress: &c}); err != nil {
		t.Fatal(err)
	}
	if c.total.Load() == 0 || c.done.Load() != c.total.Load() {
		t.Errorf("reported %d of %d bytes of work", c.done.Load(), c.total.Load())
	}
}

// stripSources checks that each scale and code step names the weight it
// reads (its size is the step's length) and clears it, so steps compare
// with slices.Equal.
func stripSources(t *testing.T, steps []step) []step {
	t.Helper()
	out := slices.Clone(steps)
	for i, st := range out {
		if st.Kind != stepCopy && (st.Source.Name == "" || st.Source.Size() != st.Len) {
			t.Errorf("%s step %d: source %+v for %d bytes", st.Kind, i, st.Source, st.Len)
		}
		out[i].Source = safetensors.TensorInfo{}
	}
	return out
}

// sameStep compares steps whose Source is cleared.
func sameStep(a, b step) bool {
	return a.Kind == b.Kind && a.First == b.First && a.Last == b.Last && a.Src == b.Src && a.Len == b.Len && a.HoldCodes == b.HoldCodes
}

// planFile plans one output shard from its source's header: the outputs the
// recipe makes of its tensors, their layout and the steps that write them.
// It returns the outputs in the layout's data order too (the plan keeps only
// what the executor needs).
func planFile(root string, f *safetensors.File, r *Recipe, opts Options) (*filePlan, []outputTensor, error) {
	return planFileWith(root, f, r, opts, fileScales{})
}

// writes is how many output tensors the step writes.
func (s step) writes() int {
	if s.Kind == stepCopy {
		return s.Last - s.First + 1
	}
	return 1
}
