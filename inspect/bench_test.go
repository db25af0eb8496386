package inspect

import (
	"testing"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// BenchmarkInspectFull is the end-to-end figure: open the full-size K3
// replica (96 files, 497,220 tensors, ~76 MB of headers + the index) and
// account it by component and dtype, with the shape check against config.json.
// inspect/testdata/ledger_vs_inspect.py sets the CLI side by side with the
// Python ledger (json_loads.py) on the same directory and prints the ratios.
func BenchmarkInspectFull(b *testing.B) {
	dir := fullReplica(b)
	var rep *Report
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if rep, err = Inspect(dir, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rep.BytesRead)/1e6, "MB_read")
}

// BenchmarkOpenFull is the codec's share of BenchmarkInspectFull: opening and
// validating the headers and the index, nothing else.
func BenchmarkOpenFull(b *testing.B) {
	dir := fullReplica(b)
	b.ReportAllocs()
	for b.Loop() {
		ck, err := safetensors.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		ck.Close()
	}
}

// BenchmarkAuditFullFake is inspect's own share of BenchmarkInspectFull: the
// accounting and the shape check of the full-size headers, already parsed
// (the in-memory fake), with no reading or codec validation.
func BenchmarkAuditFullFake(b *testing.B) {
	fk := fullFake(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := audit(fakeHeaders(fk), "fake", Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInspectFullDP16Steps is the chart's work: the recipe planned once
// and dp16 planned for five memory steps.
func BenchmarkInspectFullDP16Steps(b *testing.B) {
	dir := fullReplica(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Inspect(dir, Options{Layout: "dp16", Steps: true}); err != nil {
			b.Fatal(err)
		}
	}
}
