package safetensors

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	b, err := os.ReadFile("testdata/golden/cases.json")
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
// wrote (safetensors/testdata/golden/gen_goldens.py) from the same tensors and compares
// every byte.
func TestWriterMatchesReference(t *testing.T) {
	for name, c := range loadGoldens(t) {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile("testdata/golden/" + name + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			specs := make([]TensorSpec, len(c.Tensors))
			data := map[string][]byte{}
			for i, ct := range c.Tensors {
				dt, err := parseDType(ct.DType)
				if err != nil {
					t.Fatal(err)
				}
				specs[i] = TensorSpec{Name: ct.Name, DType: dt, Shape: ct.Shape}
				if data[ct.Name], err = hex.DecodeString(ct.Data); err != nil {
					t.Fatal(err)
				}
			}
			l, err := NewFilePlan(specs, c.Metadata)
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
			f, err := OpenFile("testdata/golden/" + name + ".safetensors")
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
	l, err := NewFilePlan([]TensorSpec{{"a", F32, []int64{2}}, {"b", U8, []int64{3}}}, nil)
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
	if _, err := NewFilePlan([]TensorSpec{{"a", F32, nil}, {"a", F32, nil}}, nil); !errors.Is(err, errDuplicate) {
		t.Fatalf("duplicate names: %v", err)
	}
	if _, err := NewFilePlan([]TensorSpec{{"a", F4, []int64{3}}}, nil); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("odd F4 count: %v", err)
	}
}

func TestCommitSparse(t *testing.T) {
	l, _ := NewFilePlan([]TensorSpec{{"big", BF16, []int64{1 << 20, 1024}}}, nil)
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

// A layout whose header was dropped renders it again byte for byte,
// metadata included, and still writes the same file.
func TestDropHeaderRendersSameBytes(t *testing.T) {
	specs := []TensorSpec{
		{Name: "b.weight", DType: BF16, Shape: []int64{3, 5}},
		{Name: "a.scale", DType: F32, Shape: []int64{2}},
		{Name: "name \"quoted\" \u00e9", DType: U8, Shape: []int64{7}},
	}
	for _, meta := range []map[string]string{nil, {"format": "pt", "z": "1\n"}} {
		l, err := NewFilePlan(specs, meta)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Clone(l.Header)
		l.dropHeader()
		if l.Header != nil {
			t.Fatal("header kept")
		}
		got, err := l.HeaderBytes()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("metadata %v: rendered again %q (%v), want %q", meta, got, err, want)
		}
	}
}

// dropHeader lets go of the rendered header bytes (about as large as the
// tensors' descriptions), keeping what renders them again: for a plan that
// holds every file's layout until the file is written.
func (l *FilePlan) dropHeader() { l.Header = nil }
