package layout

import (
	"bytes"
	"slices"
	"testing"

	st "github.com/k3ckpt/k3ckpt/safetensors"
)

// headerOnly serves a safetensors header followed by zeros, so a source file
// can be planned against without its bytes.
type headerOnly struct{ hdr []byte }

func (h headerOnly) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off < int64(len(h.hdr)) {
		copy(p, h.hdr[off:])
	}
	return len(p), nil
}

func headerFile(t *testing.T, name string, specs []st.TensorSpec) *st.File {
	t.Helper()
	l, err := st.NewFilePlan(specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := st.ReadHeader(headerOnly{l.Header}, l.Size, name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A hand-made output file: runs are worked out from the canonical order
// (F32, BF16, U8; by name within a dtype), independently of the planner.
func TestPlanStepsRuns(t *testing.T) {
	t.Parallel()
	bf, u8 := st.BF16, st.U8
	a := headerFile(t, "a.safetensors", []st.TensorSpec{
		{Name: "a1", DType: bf, Shape: []int64{4}},
		{Name: "a2", DType: bf, Shape: []int64{4}},
		{Name: "a3", DType: bf, Shape: []int64{8, 4}}, // held as a slice
		{Name: "a4", DType: bf, Shape: []int64{4}},
		{Name: "a5", DType: bf, Shape: []int64{4}}, // not held
		{Name: "a6", DType: bf, Shape: []int64{4}},
		{Name: "e1", DType: u8, Shape: []int64{16}},
		{Name: "e2", DType: u8, Shape: []int64{16}},
	})
	// b1 starts, in b, at the very offset where a6 ends in a: only the source
	// file tells the two apart.
	a6, ok := a.Lookup("a6")
	if !ok {
		t.Fatal("no a6")
	}
	var b *st.File
	for n := int64(4); b == nil || b.DataStart+2*n != a.DataStart+a6.End; n += 4 {
		if n > 1<<16 {
			t.Fatal("no padding lines b1 up with a6's end")
		}
		b = headerFile(t, "b.safetensors", []st.TensorSpec{
			{Name: "b0", DType: bf, Shape: []int64{n}},
			{Name: "b1", DType: bf, Shape: []int64{4}},
		})
	}
	whole := func(f *st.File, name string) outTensor {
		ti, ok := f.Lookup(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		return outTensor{spec: st.TensorSpec{Name: name, DType: ti.DType, Shape: ti.Shape}, src: newFileTensor(f, ti), shape: ti.Shape, held: heldReplica}
	}
	slice := whole(a, "a3")
	slice.held, slice.axis, slice.start, slice.stop = HeldSlice, 0, 0, 4
	slice.spec.Shape = []int64{4, 4}
	mem := outTensor{spec: st.TensorSpec{Name: "m", DType: st.F32, Shape: []int64{2}}, src: bytes.NewReader(make([]byte, 8)), shape: []int64{2}}
	// Source order of the file's tensors (how planRank appends them).
	of := &outFile{name: "out.safetensors", tensors: []outTensor{
		whole(a, "a1"), whole(a, "a2"), slice, whole(a, "a4"), whole(a, "a6"), whole(a, "e1"), whole(a, "e2"), whole(b, "b1"), mem,
	}}
	if err := of.plan(); err != nil {
		t.Fatal(err)
	}
	lay, err := of.layout()
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, lt := range lay.Tensors {
		order = append(order, lt.Name)
	}
	// m (F32) first; BF16 a1 a2 a3 a4 a6 b1; U8 e1 e2.
	if want := []string{"m", "a1", "a2", "a3", "a4", "a6", "b1", "e1", "e2"}; !slices.Equal(order, want) {
		t.Fatalf("layout order %v, want %v", order, want)
	}
	at := func(f *st.File, name string) int64 {
		ti, ok := f.Lookup(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		return f.DataStart + ti.Begin
	}
	want := []fileStep{
		{first: 0, last: 0, tensor: 8}, // computed in memory
		{first: 1, last: 2, tensor: -1, src: a, off: at(a, "a1"), n: 16},
		{first: 3, last: 3, tensor: 2},                                  // a slice is written alone
		{first: 4, last: 4, tensor: -1, src: a, off: at(a, "a4"), n: 8}, // a3 lies between a2 and a4 in the source
		{first: 5, last: 5, tensor: -1, src: a, off: at(a, "a6"), n: 8}, // a5, not held, lies between a4 and a6
		{first: 6, last: 6, tensor: -1, src: b, off: at(b, "b1"), n: 8}, // another source file
		// a6 and e1 are contiguous in a, but b1 lies between them in the output.
		{first: 7, last: 8, tensor: -1, src: a, off: at(a, "e1"), n: 32},
	}
	if !slices.Equal(of.steps, want) {
		t.Errorf("steps\n got %+v\nwant %+v", of.steps, want)
	}
}

// Every file of every rank of tiny exports (planned from headers; under
// -short two ranks of dp2-dcp8 alone): the steps write each tensor once, in the layout's
// order; a run holds only whole tensors of one source file, contiguous and
// in order on both sides, and is as long as allowed.
func TestPlanStepsExports(t *testing.T) {
	t.Parallel()
	bf16, fp8 := tinyCatalogs()
	files := layerFiles(int(tinyDims.layers))
	cases := []struct {
		name  string
		specs []st.TensorSpec
		o     Options
	}{
		{"pp16", bf16, Options{}},
		{"dp16", fp8, Options{TextOnly: true, WeightShard: true, VocabTP: true}},
		{"dp2-dcp8", fp8, Options{TextOnly: true, VocabTP: true}},
	}
	var eo ExportOptions
	if testing.Short() {
		cases = cases[2:] // dp2-dcp8: FP8, slices and runs of several tensors
		eo.Ranks = []int{0, 15}
	}
	for _, c := range cases {
		s, _ := fakeSource(t, nil, c.specs, files)
		l, err := builtinLayout(c.name, tinyDims.model(), c.o)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := PlanExport(s, l, eo)
		if err != nil {
			t.Fatal(err)
		}
		runs, multi := 0, 0
		for _, d := range plan.Dirs {
			for _, of := range d.files {
				if of.verbatim != nil {
					continue
				}
				lay, err := of.layout()
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(lay.Header, of.lay.Header) {
					t.Errorf("%s: planned header differs from a fresh layout", of.name)
				}
				checkFileSteps(t, of, lay)
				for _, fs := range of.steps {
					if fs.tensor < 0 {
						runs++
						if fs.last > fs.first {
							multi++
						}
					}
				}
			}
		}
		if c.name != "pp16" && multi == 0 {
			t.Errorf("%s: no run of several tensors among %d runs", c.name, runs)
		}
	}
}

func checkFileSteps(t *testing.T, of *outFile, lay *st.FilePlan) {
	t.Helper()
	idx := map[string]int{}
	for i, ot := range of.tensors {
		idx[ot.spec.Name] = i
	}
	next := 0
	for k, fs := range of.steps {
		if fs.first != next || fs.last < fs.first {
			t.Fatalf("%s: step %d covers [%d, %d], want to start at %d", of.name, k, fs.first, fs.last, next)
		}
		next = fs.last + 1
		if fs.tensor >= 0 {
			if fs.last != fs.first || of.tensors[fs.tensor].spec.Name != lay.Tensors[fs.first].Name {
				t.Errorf("%s: step %d writes %s at %s", of.name, k, of.tensors[fs.tensor].spec.Name, lay.Tensors[fs.first].Name)
			}
			continue
		}
		var n int64
		for i := fs.first; i <= fs.last; i++ {
			ot := of.tensors[idx[lay.Tensors[i].Name]]
			ft, ok := ot.src.(fileTensor)
			if !ok || ot.held == HeldSlice || ot.pack != nil || ft.f != fs.src {
				t.Errorf("%s: run %d..%d holds %s, not a whole tensor of %s", of.name, fs.first, fs.last, ot.spec.Name, fs.src.Path)
				continue
			}
			if ft.f.DataStart+ft.t.Begin != fs.off+n {
				t.Errorf("%s: run %d..%d: %s not contiguous in %s", of.name, fs.first, fs.last, ot.spec.Name, fs.src.Path)
			}
			n += ft.t.Size()
		}
		if n != fs.n {
			t.Errorf("%s: run %d..%d: %d bytes, step says %d", of.name, fs.first, fs.last, n, fs.n)
		}
		// Maximal: a next run that goes on where this one ends in the same
		// source could only be kept apart by the size limit.
		if k+1 < len(of.steps) {
			nx := of.steps[k+1]
			if nx.tensor < 0 && nx.src == fs.src && nx.off == fs.off+fs.n && fs.n+lay.Tensors[nx.first].Size() <= maxRunBytes {
				t.Errorf("%s: runs %d..%d and %d..%d could be one", of.name, fs.first, fs.last, nx.first, nx.last)
			}
		}
	}
	if next != len(lay.Tensors) {
		t.Errorf("%s: steps write %d of %d tensors", of.name, next, len(lay.Tensors))
	}
}
