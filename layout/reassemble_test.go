package layout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	st "github.com/k3ckpt/k3ckpt/safetensors"
)

// A reassembly reports the bytes the export dropped: the same figure the
// export's plan gave (the vision tower of a text-only dp16 export).
func TestReassembleReportsDroppedBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	bf, _ := fixtures(t)
	dst, ep := export(t, bf, "dp16", Options{TextOnly: true, WeightShard: true}, ExportOptions{})
	if ep.DroppedBytes <= 0 || len(ep.Dropped) == 0 {
		t.Fatalf("the export dropped %d tensors, %d bytes: want a text-only export that drops some", len(ep.Dropped), ep.DroppedBytes)
	}
	rp := reassemblePlan(t, dst)
	if rp.DroppedBytes != ep.DroppedBytes || len(rp.Dropped) != len(ep.Dropped) {
		t.Errorf("reassembly: %d tensors, %d bytes dropped; the export dropped %d tensors, %d bytes", len(rp.Dropped), rp.DroppedBytes, len(ep.Dropped), ep.DroppedBytes)
	}
}

// A manifest listing a source file twice is refused when the export is
// opened, naming the file: reassembly would otherwise plan the shard twice
// and write an index whose total_size disagrees with its shards.
func TestManifestDuplicateSourceFile(t *testing.T) {
	t.Parallel()
	_, _, dst, _ := ownedFixture(t)
	path := filepath.Join(dst, "rank-00", manifestName)
	b := must(os.ReadFile(path))(t)
	var m map[string]any
	check(t, json.Unmarshal(b, &m))
	src := m["source"].(map[string]any)
	files := src["files"].([]any)
	src["files"] = append(files, files[0])
	check(t, os.WriteFile(path, must(json.Marshal(m))(t), 0o644))
	name := files[0].(map[string]any)["name"].(string)
	if _, err := OpenSource(dst); !errors.Is(err, errManifest) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicated source file: %v", err)
	}
}

// Compare fails on the first byte that differs, naming the tensor and the
// byte's offset, on a tensor missing from the reference, and on one whose
// dtype or shape differs.
func TestCompareMismatch(t *testing.T) {
	specs := []st.TensorSpec{
		{Name: "a", DType: st.BF16, Shape: []int64{4, 8}},
		{Name: "b", DType: st.F32, Shape: []int64{16}},
	}
	one := func(string) string { return "model.safetensors" }
	ref, _ := fakeSource(t, nil, specs, one)
	same, _ := fakeSource(t, nil, specs, one)
	if n, err := Compare(context.Background(), ref, same); err != nil || n != 64+64 {
		t.Fatalf("equal sources: %d bytes, %v", n, err)
	}
	diff, _ := fakeSource(t, nil, specs, one)
	b := make([]byte, 64)
	b[37] = 1
	diff.data[slices.IndexFunc(diff.Specs, func(s st.TensorSpec) bool { return s.Name == "b" })] = bytes.NewReader(b)
	if _, err := Compare(context.Background(), ref, diff); !errors.Is(err, errMismatch) || !strings.Contains(err.Error(), "tensor b: first difference at byte 37") {
		t.Errorf("one byte changed: %v", err)
	}
	extra, _ := fakeSource(t, nil, append(specs, st.TensorSpec{Name: "c", DType: st.U8, Shape: []int64{1}}), one)
	if _, err := Compare(context.Background(), ref, extra); !errors.Is(err, errMismatch) || !strings.Contains(err.Error(), "tensor c of mem is not in mem") {
		t.Errorf("tensor missing from the reference: %v", err)
	}
	reshaped, _ := fakeSource(t, nil, []st.TensorSpec{specs[0], {Name: "b", DType: st.F32, Shape: []int64{4, 4}}}, one)
	if _, err := Compare(context.Background(), ref, reshaped); !errors.Is(err, errMismatch) || !strings.Contains(err.Error(), "tensor b: F32 [16] in mem, F32 [4 4] in mem") {
		t.Errorf("tensor of another shape: %v", err)
	}
}
