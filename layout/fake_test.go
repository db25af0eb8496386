package layout

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	st "github.com/k3ckpt/k3ckpt/safetensors"
)

// fakeData serves a safetensors header followed by zeros and counts the
// reads that reach past the header (tensor data).
type fakeData struct {
	hdr       []byte
	dataReads *atomic.Int64
}

func (h fakeData) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off < int64(len(h.hdr)) {
		copy(p, h.hdr[off:])
	}
	if off+int64(len(p)) > int64(len(h.hdr)) && h.dataReads != nil {
		h.dataReads.Add(1)
	}
	return len(p), nil
}

// fakeSource is a header-only source held in memory: the tensors in files
// named by fileOf (in the order first seen), every data byte zero. It reads
// nothing from disk; dataReads counts the reads of tensor data.
func fakeSource(t testing.TB, cfg []byte, specs []st.TensorSpec, fileOf func(string) string) (*Source, *atomic.Int64) {
	t.Helper()
	var order []string
	byFile := map[string][]st.TensorSpec{}
	for _, s := range specs {
		f := fileOf(s.Name)
		if _, ok := byFile[f]; !ok {
			order = append(order, f)
		}
		byFile[f] = append(byFile[f], s)
	}
	reads := new(atomic.Int64)
	src := &Source{Root: "mem", files: map[string]*st.File{}, aux: map[string][]byte{}}
	for _, name := range order {
		lay, err := st.NewFilePlan(byFile[name], map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		f, err := st.ReadHeader(fakeData{hdr: lay.Header, dataReads: reads}, lay.Size, name)
		if err != nil {
			t.Fatal(err)
		}
		src.files[name] = f
		src.info.Files = append(src.info.Files, sourceFile{Name: name, Metadata: f.Metadata})
		for _, ti := range f.Tensors {
			src.Specs = append(src.Specs, st.TensorSpec{Name: ti.Name, DType: ti.DType, Shape: ti.Shape})
			src.fileOf = append(src.fileOf, name)
			src.data = append(src.data, newFileTensor(f, ti))
			src.info.TotalSize += ti.Size()
		}
	}
	src.info.Tensors = len(src.Specs)
	if cfg != nil {
		src.aux[model.ConfigName] = cfg
	}
	reads.Store(0)
	return src, reads
}

// layerFiles places layer l in shard l+1 and the model-level tensors in
// three shards after the layers (embedding, lm_head and final norms;
// the projector; the vision tower), as the released checkpoint does.
func layerFiles(layers int) func(string) string {
	n := layers + 3
	name := func(i int) string { return fmt.Sprintf(model.ShardNameFormat, i, n) }
	return func(s string) string {
		tn := model.K3Classifier().ParseName(s)
		switch {
		case tn.Layer >= 0:
			return name(tn.Layer + 1)
		case tn.Group.String() == "mm_projector":
			return name(layers + 2)
		case tn.Group.String() == "vision_tower":
			return name(layers + 3)
		}
		return name(layers + 1)
	}
}

// bareConfig turns a multimodal config.json into the bare kimi_linear text
// config it nests (text_config at the top level).
func bareConfig(t testing.TB, mm []byte) []byte {
	t.Helper()
	obj, err := decodeJSONObject(mm)
	if err != nil {
		t.Fatal(err)
	}
	text, ok := obj["text_config"].(map[string]any)
	if !ok {
		t.Fatal("config has no text_config")
	}
	b, err := encodeJSON(text)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bareName is a multimodal tensor name under a bare kimi_linear's prefix
// ("" for vision, which a bare text checkpoint lacks).
func bareName(name string) string {
	if rest, ok := strings.CutPrefix(name, "language_model."); ok {
		return rest
	}
	return ""
}

// must returns v once the test has been stopped on err:
// must(os.ReadFile(p))(t).
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// check stops the test on a setup error.
func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// e2e skips a test that writes the tiny replica under -short.
func e2e(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end on the tiny replica; run without -short")
	}
}

// jsonText returns the layout as indented JSON (the format loadLayout reads).
func (l *Layout) jsonText() ([]byte, error) { return encodeJSON(l) }
