package safetensors

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type goldenCase struct {
	Tensors []struct {
		Name  string  `json:"name"`
		DType string  `json:"dtype"`
		Shape []int64 `json:"shape"`
		Data  string  `json:"data"`
	} `json:"tensors"`
	Metadata map[string]string `json:"metadata"`
}

func loadGoldens(t testing.TB) map[string]goldenCase {
	t.Helper()
	b, err := os.ReadFile("../testdata/safetensors/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Cases map[string]goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Cases) < 10 {
		t.Fatalf("only %d golden cases", len(m.Cases))
	}
	return m.Cases
}

// TestWriterMatchesReference rebuilds every file that Python safetensors 0.8
// wrote (testdata/safetensors/gen_goldens.py) from the same tensors and compares
// every byte.
func TestWriterMatchesReference(t *testing.T) {
	for name, c := range loadGoldens(t) {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile("../testdata/safetensors/" + name + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			specs := make([]TensorSpec, len(c.Tensors))
			data := map[string][]byte{}
			for i, ct := range c.Tensors {
				dt, err := ParseDType(ct.DType)
				if err != nil {
					t.Fatal(err)
				}
				specs[i] = TensorSpec{Name: ct.Name, DType: dt, Shape: ct.Shape}
				if data[ct.Name], err = hex.DecodeString(ct.Data); err != nil {
					t.Fatal(err)
				}
			}
			l, err := NewLayout(specs, c.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), name+".safetensors")
			w, err := Create(path, l)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			// Write in reverse order to prove order does not matter.
			for _, s := range slices.Backward(specs) {
				tw, err := w.Tensor(s.Name)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tw.Write(data[s.Name]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Commit(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("bytes differ from the reference\n got %q\nwant %q", got[:min(len(got), 300)], want[:min(len(want), 300)])
			}
			// And the reader reads the reference file back to the same tensors.
			f, err := OpenFile("../testdata/safetensors/" + name + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(f.Tensors) != len(specs) {
				t.Fatalf("read %d tensors, want %d", len(f.Tensors), len(specs))
			}
			for _, s := range specs {
				ti, ok := f.Lookup(s.Name)
				if !ok || ti.DType != s.DType || !slices.Equal(ti.Shape, s.Shape) {
					t.Fatalf("tensor %q read as %+v", s.Name, ti)
				}
				buf := make([]byte, ti.Size())
				if _, err := f.Section(ti).ReadAt(buf, 0); err != nil && ti.Size() > 0 {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, data[s.Name]) {
					t.Fatalf("tensor %q data differs", s.Name)
				}
			}
			if len(c.Metadata) > 0 && !mapsEqual(f.Metadata, c.Metadata) {
				t.Fatalf("metadata %v, want %v", f.Metadata, c.Metadata)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestWriterRejectsMiscounts(t *testing.T) {
	l, err := NewLayout([]TensorSpec{{"a", F32, []int64{2}}, {"b", U8, []int64{3}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "x.safetensors")
	w, err := Create(path, l)
	if err != nil {
		t.Fatal(err)
	}
	tw, _ := w.Tensor("a")
	if _, err := tw.Write(make([]byte, 9)); !errors.Is(err, ErrWrite) {
		t.Fatalf("overlong write: %v", err)
	}
	if _, err := w.Tensor("a"); !errors.Is(err, ErrWrite) {
		t.Fatalf("second open: %v", err)
	}
	if _, err := w.Tensor("zzz"); !errors.Is(err, ErrWrite) {
		t.Fatalf("unknown tensor: %v", err)
	}
	tw.Write(make([]byte, 8))
	if err := w.Commit(); !errors.Is(err, ErrWrite) || !strings.Contains(err.Error(), "tensor b") {
		t.Fatalf("commit with missing bytes: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Fatalf("left behind %v", ents)
	}
	if _, err := NewLayout([]TensorSpec{{"a", F32, nil}, {"a", F32, nil}}, nil); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate names: %v", err)
	}
	if _, err := NewLayout([]TensorSpec{{"a", F4, []int64{3}}}, nil); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("odd F4 count: %v", err)
	}
}

func TestCopyFileRange(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.safetensors")
	payload := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	l, _ := NewLayout([]TensorSpec{{"x", U8, []int64{int64(len(payload))}}}, nil)
	w, _ := Create(src, l)
	tw, _ := w.Tensor("x")
	tw.Write(payload)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, _ := f.Lookup("x")
	dst := filepath.Join(dir, "dst.safetensors")
	w2, _ := Create(dst, l)
	tw2, _ := w2.Tensor("x")
	if n, err := tw2.ReadFrom(f.Section(ti)); err != nil || n != int64(len(payload)) {
		t.Fatalf("ReadFrom: %d %v", n, err)
	}
	if err := w2.Commit(); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Fatal("copy differs")
	}
}

func TestCommitSparse(t *testing.T) {
	l, _ := NewLayout([]TensorSpec{{"big", BF16, []int64{1 << 20, 1024}}}, nil)
	path := filepath.Join(t.TempDir(), "s.safetensors")
	w, _ := Create(path, l)
	if err := w.CommitSparse(); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Size != l.Size || f.Tensors[0].Size() != 2<<30 {
		t.Fatalf("size %d", f.Size)
	}
}

// TestSpanCopy copies three tensors that lie back to back in a source file with
// one span writer (one copy_file_range), and checks a short span is caught.
func TestSpanCopy(t *testing.T) {
	dir := t.TempDir()
	specs := []TensorSpec{{"a", F32, []int64{3}}, {"b", F32, []int64{5}}, {"c", F32, []int64{2}}, {"z", U8, []int64{4}}}
	writeTestFile(t, dir, "src.safetensors", specs)
	src, err := OpenFile(filepath.Join(dir, "src.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	a, _ := src.Lookup("a")
	c, _ := src.Lookup("c")
	l, _ := NewLayout(specs, nil)
	dst := filepath.Join(dir, "dst.safetensors")
	w, _ := Create(dst, l)
	sw, err := w.Span("a", "c")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Tensor("b"); !errors.Is(err, ErrWrite) {
		t.Fatalf("tensor inside an open span: %v", err)
	}
	run := io.NewSectionReader(src.ReaderAt(), src.DataStart+a.Begin, c.End-a.Begin)
	if n, err := sw.ReadFrom(run); err != nil || n != c.End-a.Begin {
		t.Fatalf("span copy: %d %v", n, err)
	}
	zw, _ := w.Tensor("z")
	zw.ReadFrom(src.Section(mustLookup(t, src, "z")))
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(filepath.Join(dir, "src.safetensors"))
	y, _ := os.ReadFile(dst)
	if !bytes.Equal(x, y) {
		t.Fatal("span copy differs")
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644", st.Mode().Perm())
	}
	// A span written short leaves its last tensor incomplete: Commit names it.
	w2, _ := Create(filepath.Join(dir, "short.safetensors"), l)
	sw2, _ := w2.Span("a", "c")
	sw2.Write(make([]byte, 12+20+4))
	for _, n := range []string{"z"} {
		tw, _ := w2.Tensor(n)
		tw.Write(make([]byte, 4))
	}
	if err := w2.Commit(); !errors.Is(err, ErrWrite) || !strings.Contains(err.Error(), "tensor c") {
		t.Fatalf("short span: %v", err)
	}
	if _, err := w.Span("c", "a"); !errors.Is(err, ErrWrite) {
		t.Fatalf("reversed span: %v", err)
	}
}

func mustLookup(t *testing.T, f *File, name string) TensorInfo {
	t.Helper()
	ti, ok := f.Lookup(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	return ti
}

// A layout whose header was dropped renders it again byte for byte,
// metadata included, and still writes the same file.
func TestDropHeaderRendersSameBytes(t *testing.T) {
	specs := []TensorSpec{
		{Name: "b.weight", DType: BF16, Shape: []int64{3, 5}},
		{Name: "a.scale", DType: F32, Shape: []int64{2}},
		{Name: "name \"quoted\" \u00e9", DType: U8, Shape: []int64{7}},
	}
	for _, meta := range []map[string]string{nil, {"format": "pt", "z": "1\n"}} {
		l, err := NewLayout(specs, meta)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Clone(l.Header)
		l.DropHeader()
		if l.Header != nil {
			t.Fatal("header kept")
		}
		got, err := l.HeaderBytes()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("metadata %v: rendered again %q (%v), want %q", meta, got, err, want)
		}
	}
}
