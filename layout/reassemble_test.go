package layout

import (
	"testing"
)

// A reassembly reports the bytes the export dropped: the same figure the
// export's plan gave (the vision tower of a text-only dp16 export).
func TestReassembleReportsDroppedBytes(t *testing.T) {
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
