package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// quantConverted is a real conversion (data, not only headers) of the tiny
// replica cut to 4 layers, with its quantization_report.json.
func quantConverted(t *testing.T) string {
	cfg := testckpt.LayersConfigJSON(t, model.ScaleTiny, 4)
	src := testckpt.Dir(t, "tiny-4-layers-data", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: cfg})
	})
	dst := filepath.Join(t.TempDir(), "out")
	ck, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := convert.Lookup(defaultRecipe)
	if err != nil {
		t.Fatal(err)
	}
	p, err := convert.NewPlan(ck, nil, r, convert.Options{Format: model.ModelOpt})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := convert.Execute(context.Background(), p, dst, convert.ExecOptions{Jobs: 2}); err != nil || res.Report == nil {
		t.Fatalf("convert: %v (report %v)", err, res)
	}
	return dst
}

// inspect of a converted checkpoint shows its quantization_report.json: in
// the JSON as the file holds it, and as a table within 80 columns.
func TestInspectShowsQuantReport(t *testing.T) {
	t.Parallel()
	dir := quantConverted(t)
	b, err := os.ReadFile(filepath.Join(dir, convert.ReportName))
	if err != nil {
		t.Fatal(err)
	}
	want, err := convert.ParseReport(b)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Inspect(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep.QuantReport, want) {
		t.Fatalf("inspect's report %+v, the file's %+v", rep.QuantReport, want)
	}
	var js bytes.Buffer
	if err := writeJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Q *convert.Report `json:"quantization_report"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || !reflect.DeepEqual(back.Q, want) {
		t.Fatalf("--json quantization_report %+v (%v), want the file's", back.Q, err)
	}
	var text bytes.Buffer
	if err := WriteText(&text, rep, 0, false); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	i := strings.Index(out, "error on record ("+convert.ReportName)
	if i < 0 {
		t.Fatalf("no report table in:\n%s", out)
	}
	table := out[i:]
	for _, line := range strings.Split(table, "\n") {
		if n := utf8.RuneCountInString(line); n > 80 {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
	for _, col := range []string{"group", "tensors", "max abs", "rel fro", "SQNR dB", "lossy"} {
		if !strings.Contains(table, col) {
			t.Errorf("no %q column:\n%s", col, table)
		}
	}
	for _, g := range append(want.Groups, want.Total) {
		name := g.Group
		if name == "" {
			name = "total"
		}
		if !strings.Contains(table, "│ "+name+" ") || !strings.Contains(table, sci(g.MaxAbsError)) || !strings.Contains(table, sqnr(g)) {
			t.Errorf("group %s (max abs %s, SQNR %s) missing from:\n%s", name, sci(g.MaxAbsError), sqnr(g), table)
		}
	}
	// A report of another schema is an error naming the file, not a guess.
	if err := os.WriteFile(filepath.Join(dir, convert.ReportName), bytes.Replace(b, []byte(`"schema": 1`), []byte(`"schema": 2`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Inspect(dir, Options{}); err == nil || !strings.Contains(err.Error(), convert.ReportName) {
		t.Errorf("inspect of a schema-2 report: %v", err)
	}
}
