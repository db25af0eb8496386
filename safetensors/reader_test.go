package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile assembles a file from a header string and n data bytes.
func rawFile(header string, n int) []byte {
	b := make([]byte, 8, 8+len(header)+n)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, n)...)
}

func withLen(n uint64, rest string) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, n)
	return append(b, rest...)
}

// TestMalformed holds one malformed file per rejection class.
func TestMalformed(t *testing.T) {
	cases := []struct {
		name string
		file []byte
		want error
	}{
		{"empty file", nil, errTooSmall},
		{"seven bytes", []byte{1, 2, 3, 4, 5, 6, 7}, errTooSmall},
		{"header over limit", withLen(maxHeaderSize+1, "{}"), errHeaderTooLarge},
		{"header length huge", withLen(1<<62, "{}"), errHeaderTooLarge},
		{"header past end", withLen(100, "{}"), errHeaderTruncated},
		{"not utf8", rawFile("{\"\xff\":1}", 0), errHeaderUTF8},
		{"not json", rawFile("nope", 0), errHeaderJSON},
		{"json array", rawFile("[1,2]", 0), errHeaderJSON},
		{"truncated json", rawFile(`{"a":{"dtype":"F32"`, 0), errHeaderJSON},
		{"entry not object", rawFile(`{"a":3}`, 0), errHeaderJSON},
		{"trailing garbage", rawFile(`{} x`, 0), errHeaderJSON},
		{"metadata not object", rawFile(`{"__metadata__":"x"}`, 0), errMetadata},
		{"metadata non-string value", rawFile(`{"__metadata__":{"a":1}}`, 0), errMetadata},
		{"metadata nested", rawFile(`{"__metadata__":{"a":{"b":"c"}}}`, 0), errMetadata},
		{"unknown dtype", rawFile(`{"a":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}}`, 4), errDType},
		{"negative shape", rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), errShape},
		{"fractional shape", rawFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), errShape},
		{"exponent shape", rawFile(`{"a":{"dtype":"F32","shape":[1e3],"data_offsets":[0,4]}}`, 4), errShape},
		{"overflowing entry", rawFile(`{"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}}`, 4), errShape},
		{"overflowing product", rawFile(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), errShape},
		{"shape whose bit count wraps to 0", rawFile(`{"a":{"dtype":"F64","shape":[288230376151711744],"data_offsets":[0,0]}}`, 0), errShape},
		{"shape not array", rawFile(`{"a":{"dtype":"F32","shape":3,"data_offsets":[0,4]}}`, 4), errShape},
		{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4), errMissingField},
		{"missing shape", rawFile(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4), errMissingField},
		{"missing offsets", rawFile(`{"a":{"dtype":"F32","shape":[1]}}`, 4), errMissingField},
		{"offsets hole", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 12), errOffsets},
		{"offsets overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), errOffsets},
		{"offsets reversed", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, 4), errOffsets},
		{"offsets not starting at zero", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), errOffsets},
		{"offsets three entries", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, 4), errOffsets},
		{"offsets negative", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, 4), errOffsets},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), ErrSizeMismatch},
		{"fractional bytes F4", rawFile(`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2), ErrSizeMismatch},
		{"fractional bytes F6", rawFile(`{"a":{"dtype":"F6_E2M3","shape":[3],"data_offsets":[0,3]}}`, 3), ErrSizeMismatch},
		{"trailing bytes", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 5), errFileSize},
		{"truncated data", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), errFileSize},
		{"duplicate tensor", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), errDuplicate},
		{"duplicate field", rawFile(`{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number 1.", rawFile(`{"a":{"x":1.,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number 01", rawFile(`{"a":{"x":01,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number -.5", rawFile(`{"a":{"x":-.5,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number .5", rawFile(`{"a":{"x":.5,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number +1", rawFile(`{"a":{"x":+1,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number 1e", rawFile(`{"a":{"x":1e,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number 1e+", rawFile(`{"a":{"x":1e+,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number -", rawFile(`{"a":{"x":-,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number 1.e3", rawFile(`{"a":{"x":1.e3,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number 1e400", rawFile(`{"a":{"x":1e400,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number 0x10", rawFile(`{"a":{"x":0x10,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: escape \\x41", rawFile(`{"a":{"x":"\x41","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: escape \\u12", rawFile(`{"a":{"x":"\u12","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: escape \\u+123", rawFile(`{"a":{"x":"\u+123","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: lone surrogate", rawFile(`{"a":{"x":"\ud800","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: escape in key", rawFile(`{"a":{"x":{"\q":1},"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: literal tru", rawFile(`{"a":{"x":tru,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: literal nul", rawFile(`{"a":{"x":nul,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"ignored value: number in array 1.", rawFile(`{"a":{"x":[0,1.],"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
		{"deep nesting", rawFile(`{"a":{"x":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`,"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), errHeaderJSON},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := ReadHeader(bytes.NewReader(c.file), int64(len(c.file)), "bad.safetensors")
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v (file %v), want %v", err, f != nil, c.want)
			}
			if !strings.Contains(err.Error(), "bad.safetensors") {
				t.Fatalf("error does not name the file: %v", err)
			}
		})
	}
}

func TestErrorNamesTensor(t *testing.T) {
	b := rawFile(`{"layers.3.w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4)
	_, err := ReadHeader(bytes.NewReader(b), int64(len(b)), "x.safetensors")
	if err == nil || !strings.Contains(err.Error(), "tensor layers.3.w") || !strings.Contains(err.Error(), "file x.safetensors") {
		t.Fatalf("error %v should name file and tensor", err)
	}
}

func TestAcceptsReferenceQuirks(t *testing.T) {
	for _, h := range []string{
		`{}`,
		`{"__metadata__":null}`,
		` {"a" : {"shape":[],"dtype":"F32","data_offsets":[0,4],"extra":{"x":[1,2.5,true,null]}}}   `,
		`{"b":{"dtype":"U8","shape":[1],"data_offsets":[4,5]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`,
		`{"\u00e9\ud83d\ude00":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`,
		// Every JSON number and escape form is taken in ignored values.
		`{"a":{"x":[-0,0,0.5e-3,1E+2,1e-400,-12.5E3,123456789012345678901234567890,"\u00e9\/\b\f\n\r\t\"\\"],"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`,
	} {
		n := 0
		if strings.Contains(h, "[0,4]") {
			n = 4
		}
		if strings.Contains(h, "[4,5]") {
			n = 5
		}
		b := rawFile(h, n)
		f, err := ReadHeader(bytes.NewReader(b), int64(len(b)), "ok")
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		for i := 1; i < len(f.Tensors); i++ {
			if f.Tensors[i].Begin < f.Tensors[i-1].End {
				t.Fatalf("not in offset order: %+v", f.Tensors)
			}
		}
	}
}

// countingReaderAt records the furthest byte read, to prove data is never touched.
type countingReaderAt struct {
	r        *bytes.Reader
	maxEnd   int64
	requests int
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.requests++
	c.maxEnd = max(c.maxEnd, off+int64(len(p)))
	return c.r.ReadAt(p, off)
}

func TestHeaderOnlyReads(t *testing.T) {
	b := rawFile(`{"a":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]}}`, 1000)
	c := &countingReaderAt{r: bytes.NewReader(b)}
	f, err := ReadHeader(c, int64(len(b)), "x")
	if err != nil {
		t.Fatal(err)
	}
	if c.maxEnd != f.DataStart {
		t.Fatalf("read up to %d, header ends at %d", c.maxEnd, f.DataStart)
	}
}

func writeTestFile(t testing.TB, dir, name string, specs []TensorSpec) {
	t.Helper()
	l, err := NewFilePlan(specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Create(filepath.Join(dir, name), l)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range l.Tensors {
		tw, _ := w.Tensor(ti.Name)
		tw.Write(bytes.Repeat([]byte{byte(len(ti.Name))}, int(ti.Size())))
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
}

// twoShardCheckpoint writes a small sharded checkpoint with an index.
func twoShardCheckpoint(t testing.TB) string {
	dir := t.TempDir()
	writeTestFile(t, dir, "model-00001-of-00002.safetensors", []TensorSpec{{"a", F32, []int64{2, 3}}, {"b", BF16, []int64{4}}})
	writeTestFile(t, dir, "model-00002-of-00002.safetensors", []TensorSpec{{"c", U8, []int64{5}}})
	idx := &Index{TotalSize: 24 + 8 + 5, WeightMap: map[string]string{
		"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}}
	if err := WriteIndex(filepath.Join(dir, IndexName), idx); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"x"}`), 0o644)
	return dir
}

func TestOpenCheckpoint(t *testing.T) {
	dir := twoShardCheckpoint(t)
	for _, p := range []string{dir, filepath.Join(dir, IndexName)} {
		c, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Files) != 2 || c.NumTensors() != 3 || c.Index() == nil {
			t.Fatalf("%s: %d files %d tensors", p, len(c.Files), c.NumTensors())
		}
		f, ti, ok := c.Lookup("c")
		if !ok || f.Path != "model-00002-of-00002.safetensors" || ti.Size() != 5 {
			t.Fatalf("lookup c: %v %+v", ok, ti)
		}
		cfg, err := c.ReadAux("config.json")
		if err != nil || !strings.Contains(string(cfg), "model_type") {
			t.Fatalf("config: %v", err)
		}
		if _, err := c.ReadAux("missing.json"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing aux: %v", err)
		}
		c.Close()
	}
	c, err := Open(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	if err != nil || c.NumTensors() != 1 || c.Index() != nil {
		t.Fatalf("single file: %v", err)
	}
	c.Close()
}

func TestIndexRejections(t *testing.T) {
	const f1, f2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	good := map[string]string{"a": f1, "b": f1, "c": f2}
	cases := []struct {
		name  string
		edit  func(dir string, wm map[string]string) int64
		wants string
	}{
		{"wrong total_size", func(dir string, wm map[string]string) int64 { return 1 }, "total_size"},
		{"tensor missing from shard", func(dir string, wm map[string]string) int64 { wm["zz"] = f2; return 37 }, "missing from the shard"},
		{"shard tensor not indexed", func(dir string, wm map[string]string) int64 { delete(wm, "b"); return 37 }, "not in the index"},
		{"tensor in wrong shard", func(dir string, wm map[string]string) int64 { wm["c"] = f1; wm["a"] = f2; return 37 }, "invalid index: "},
		{"escaping path", func(dir string, wm map[string]string) int64 { wm["c"] = "../" + f2; return 37 }, "leaves the checkpoint"},
		{"absolute path", func(dir string, wm map[string]string) int64 { wm["c"] = "/etc/passwd"; return 37 }, "absolute"},
		{"stray shard", func(dir string, wm map[string]string) int64 {
			writeTestFile(t, dir, "extra.safetensors", []TensorSpec{{"q", U8, []int64{1}}})
			return 37
		}, "not in model.safetensors.index.json"},
		{"symlink out", func(dir string, wm map[string]string) int64 {
			out := t.TempDir()
			writeTestFile(t, out, "evil.safetensors", []TensorSpec{{"c", U8, []int64{5}}})
			os.Remove(filepath.Join(dir, f2))
			os.Symlink(filepath.Join(out, "evil.safetensors"), filepath.Join(dir, f2))
			return 37
		}, "outside"},
		{"missing shard", func(dir string, wm map[string]string) int64 {
			os.Remove(filepath.Join(dir, f2))
			return 37
		}, f2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := twoShardCheckpoint(t)
			wm := map[string]string{}
			for k, v := range good {
				wm[k] = v
			}
			total := c.edit(dir, wm)
			b, _ := (&Index{TotalSize: total, WeightMap: wm}).Marshal()
			os.WriteFile(filepath.Join(dir, IndexName), b, 0o644)
			_, err := Open(dir)
			if err == nil || !strings.Contains(err.Error(), c.wants) {
				t.Fatalf("got %v, want an error mentioning %q", err, c.wants)
			}
			if werr := walkAll(t, dir); werr == nil || werr.Error() != err.Error() {
				t.Errorf("Walk: %v, Open: %v", werr, err)
			}
		})
	}
	// Duplicate keys in the JSON itself.
	dup := `{"metadata":{"total_size":1},"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}`
	if _, err := parseIndex([]byte(dup), "i"); !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestIndexRoundTrip(t *testing.T) {
	idx := &Index{TotalSize: 42, WeightMap: map[string]string{"b": "f2", "a": "f1"}, Metadata: map[string]any{"format": "pt"}}
	b, err := idx.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"metadata\": {\n    \"format\": \"pt\",\n    \"total_size\": 42\n  },\n  \"weight_map\": {\n    \"a\": \"f1\",\n    \"b\": \"f2\"\n  }\n}"
	if string(b) != want {
		t.Fatalf("got\n%s", b)
	}
	back, err := parseIndex(b, "x")
	if err != nil || back.TotalSize != 42 || back.WeightMap["b"] != "f2" || back.Metadata["format"] != "pt" {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}

func TestDuplicateAcrossFilesWithoutIndex(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir, "a.safetensors", []TensorSpec{{"x", U8, []int64{1}}})
	writeTestFile(t, dir, "b.safetensors", []TensorSpec{{"x", U8, []int64{1}}})
	_, err := Open(dir)
	if !errors.Is(err, errDuplicate) {
		t.Fatalf("got %v", err)
	}
	if werr := walkAll(t, dir); werr == nil || werr.Error() != err.Error() {
		t.Errorf("Walk: %v, Open: %v", werr, err)
	}
}

func TestIndexDuplicateAcrossShards(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, dir, "a.safetensors", []TensorSpec{{"x", U8, []int64{1}}})
	writeTestFile(t, dir, "b.safetensors", []TensorSpec{{"x", U8, []int64{1}}})
	for _, sorted := range []bool{true, false} {
		idx := `{"metadata":{"total_size":2},"weight_map":{"x":"a.safetensors","x":"b.safetensors"}}`
		if !sorted {
			idx = `{"metadata":{"total_size":2},"weight_map":{"x":"a.safetensors","w":"b.safetensors","x":"b.safetensors"}}`
		}
		os.WriteFile(filepath.Join(dir, IndexName), []byte(idx), 0o644)
		if _, err := Open(dir); !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), "twice") && !strings.Contains(err.Error(), "missing") {
			t.Fatalf("sorted=%v: %v", sorted, err)
		}
	}
}

// TestIndexEscapesLikePython pins the index encoder to json.dumps' default
// (ensure_ascii): `json.dumps({"é😀\x7f\"": "f"})` in Python gives the key
// below.
func TestIndexEscapesLikePython(t *testing.T) {
	b, err := (&Index{TotalSize: 1, WeightMap: map[string]string{"é😀\x7f\"\n": "f"}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if want := `"\u00e9\ud83d\ude00\u007f\"\n": "f"`; !strings.Contains(string(b), want) {
		t.Fatalf("got %s, want a line with %s", b, want)
	}
	back, err := parseIndex(b, "i")
	if err != nil || back.WeightMap["é😀\x7f\"\n"] != "f" {
		t.Fatalf("round trip: %v %v", err, back)
	}
}

func TestIndexRejectsMalformedJSON(t *testing.T) {
	for _, s := range []string{
		`{"metadata":{"total_size":0},"weight_map":{"a":"x.safetensors",},}`,
		`{"metadata":{"total_size":0},"weight_map":{"a":"x.safetensors",}}`,
		`{"metadata":{"total_size":0},"weight_map":{"a":"x.safetensors"},}`,
		`{"metadata":{"total_size":0},"metadata":{"total_size":5},"weight_map":{}}`,
		`{"metadata":{"total_size":0} "weight_map":{}}`,
		`{"metadata":{"total_size":0},"weight_map":{"a":"x.safetensors" "b":"x.safetensors"}}`,
	} {
		if _, err := parseIndex([]byte(s), "i"); !errors.Is(err, ErrIndex) {
			t.Errorf("%s: accepted (%v)", s, err)
		}
	}
	// A trailing comma, the usual slip of a hand edit, is named as one.
	for _, s := range []string{
		`{"metadata":{"total_size":0},"weight_map":{"a":"x.safetensors",}}`,
		`{"metadata":{"total_size":0},"weight_map":{"a":"x.safetensors"},}`,
		"{\"metadata\":{\"total_size\":0},\"weight_map\":{\"a\":\"x.safetensors\",\n  }}",
	} {
		if _, err := parseIndex([]byte(s), "i"); err == nil || !strings.Contains(err.Error(), "trailing comma before '}'") {
			t.Errorf("%q: %v, want a trailing comma named", s, err)
		}
	}
	if _, err := parseIndex([]byte(` { "metadata" : {"total_size":0} , "weight_map" : { "a" : "x.safetensors" , "b":"x.safetensors" } } `), "i"); err != nil {
		t.Fatalf("whitespace: %v", err)
	}
}
