package layout

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
