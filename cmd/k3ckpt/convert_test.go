package main

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

func runCmd(t *testing.T, cmd interface {
	SetOut(io.Writer)
	SetErr(io.Writer)
	SetArgs([]string)
	Execute() error
}, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

// The exact command the GPU comparison with NVIDIA's converter runs prints
// one JSON object with the cast's counts, and verify accepts its output. The
// source is the tiny replica cut to 4 layers: every kind of tensor the
// recipe casts, in 7 shards instead of 96.
func TestConvertNVIDIAFlagsJSON(t *testing.T) {
	t.Parallel()
	src, dst := fourLayerReplica(t), filepath.Join(t.TempDir(), "dst")
	out, _, err := runCmd(t, newConvertCmd(), src, dst, "--recipe", "modelopt-k3", "--experts", "nvfp4", "--numerics", "modelopt", "--jobs", "16", "--json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var res struct {
		Finalized bool   `json:"finalized"`
		Experts   string `json:"experts"`
		Numerics  string `json:"numerics"`
		Cast      *struct {
			Blocks     *int64 `json:"blocks"`
			OutOfRange *int64 `json:"out_of_range"`
			Lossless   *int64 `json:"lossless"`
			Lossy      *int64 `json:"lossy"`
		} `json:"nvfp4_cast"`
		ZeroScale *int64          `json:"fp8_zero_scale_blocks"`
		Report    *convert.Report `json:"quantization_report"`
	}
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value: %q", out)
	}
	if !res.Finalized || res.Experts != "nvfp4" || res.Numerics != "modelopt" || res.Cast == nil || res.ZeroScale == nil ||
		res.Cast.Blocks == nil || *res.Cast.Blocks == 0 || res.Cast.Lossless == nil || res.Cast.OutOfRange == nil || res.Cast.Lossy == nil || *res.Cast.Lossless != *res.Cast.Blocks {
		t.Fatalf("result: %s", out)
	}
	// The summary carries quantization_report.json, whose expert group
	// counts the cast's blocks as the cast does.
	b, err := os.ReadFile(filepath.Join(dst, convert.ReportName))
	if err != nil {
		t.Fatal(err)
	}
	file, err := convert.ParseReport(b)
	if err != nil || !reflect.DeepEqual(res.Report, file) {
		t.Fatalf("--json quantization_report %+v, the file's %+v (%v)", res.Report, file, err)
	}
	var experts *convert.ReportEntry
	for i, g := range file.Groups {
		if g.Group == "experts" {
			experts = &file.Groups[i]
		}
	}
	if experts == nil || experts.Blocks != *res.Cast.Blocks || experts.LossyBlocks != *res.Cast.Lossy {
		t.Fatalf("report's experts %+v, the cast's counts %d blocks, %d lossy", experts, *res.Cast.Blocks, *res.Cast.Lossy)
	}
	vout, _, err := runCmd(t, newVerifyCmd(), src, dst)
	if err != nil || !strings.Contains(vout, "NVFP4: ") || !strings.Contains(vout, "\nOK\n") || !strings.Contains(vout, convert.ReportName+" recomputed from SRC and DST: ") {
		t.Fatalf("verify: %v\n%s", err, vout)
	}
}

// merge --dry-run on a split conversion with one slice left: it names the
// slice's files as missing, exits 1 through run (so scripts can wait on it)
// and changes nothing; once the last worker has finished it exits 0.
func TestMergeDryRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := model.Synth(src, model.SynthOptions{Config: testckpt.LayersConfigJSON(t, model.ScaleTiny, 2), Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"convert", src, dst, "--worker", "0/2", "-q"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("worker 0/2: exit %d", code)
	}
	before := testckpt.TreeHashes(t, dst, nil)
	var out, errOut bytes.Buffer
	if code := run([]string{"merge", dst, "--dry-run", "--json"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d with a slice missing: %s %s", code, out.String(), errOut.String())
	}
	var st struct {
		Done, Missing []string
		Writes        []string
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(st.Missing) == 0 || len(st.Done) == 0 || !strings.Contains(errOut.String(), "would refuse") {
		t.Fatalf("status %+v, stderr %q", st, errOut.String())
	}
	if after := testckpt.TreeHashes(t, dst, nil); !maps.Equal(after, before) {
		t.Fatalf("dry run changed DST: %d files before, %d after", len(before), len(after))
	}
	if code := run([]string{"convert", src, dst, "--worker", "1/2", "-q"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("worker 1/2: exit %d", code)
	}
	out.Reset()
	if code := run([]string{"merge", dst, "--dry-run"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "finished conversion") {
		t.Fatalf("after the last worker: exit %d: %s", code, out.String())
	}
}
