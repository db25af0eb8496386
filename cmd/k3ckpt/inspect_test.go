package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/inspect"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
)

func runInspectCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runCmd(t, newInspectCmd(), args...)
}

// TestInspectCommand: the table, --json, --chart and --tensors, bad flags,
// and a damaged shard named in the error. Under -short on the 16-layer
// replica.
func TestInspectCommand(t *testing.T) {
	t.Parallel()
	dir := testckpt.Copy(t, shortReplica(t)) // damaged at the end
	shards, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(shards) < 7 {
		t.Fatalf("%s: %d shards (%v)", dir, len(shards), err)
	}
	out, _, err := runInspectCmd(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"component", "routed_experts", "dtype", "total", "no tensor data"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	out, _, err = runInspectCmd(t, dir, "--json", "--recipe", "attn-moe-dense-fp8", "--layout", "dp16")
	if err != nil {
		t.Fatal(err)
	}
	var rep inspect.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v", err)
	}
	if rep.TensorCount == 0 || rep.Recipe == nil || rep.Layout == nil || len(rep.Ranks) != 16 {
		t.Errorf("--json report incomplete: %d tensors, recipe %v, layout %v", rep.TensorCount, rep.Recipe != nil, rep.Layout != nil)
	}

	chart := filepath.Join(t.TempDir(), "mem.svg")
	if _, errOut, err := runInspectCmd(t, dir, "--chart", chart); err != nil || !strings.Contains(errOut, chart) {
		t.Fatalf("--chart: %v (%s)", err, errOut)
	}
	if b, err := os.ReadFile(chart); err != nil || !bytes.HasPrefix(b, []byte("<?xml")) {
		t.Errorf("chart file: %v", err)
	}

	// The chart's title names the recipe and experts mode its FP8 bar was
	// planned with, not the default recipe.
	for _, args := range [][]string{{"--recipe", "modelopt-k3"}, {"--experts", "nvfp4"}} {
		if _, _, err := runInspectCmd(t, append([]string{dir, "--chart", chart}, args...)...); err != nil {
			t.Fatalf("--chart %v: %v", args, err)
		}
		b, _ := os.ReadFile(chart)
		want, notWant := "FP8 = recipe modelopt-k3<", "attn-moe"
		if args[0] == "--experts" {
			want, notWant = "FP8 = recipe attn-moe-dense-fp8, routed experts NVFP4<", "modelopt"
		}
		if !bytes.Contains(b, []byte(want)) || bytes.Contains(b, []byte(notWant)) {
			t.Errorf("--chart %v: title lacks %q (or names %q)", args, want, notWant)
		}
	}

	out, _, err = runInspectCmd(t, dir, "--tensors", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Tensors []json.RawMessage `json:"tensors"`
		Files   []json.RawMessage `json:"files"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Files) != len(shards) || len(list.Tensors) != int(rep.TensorCount) {
		t.Errorf("--tensors --json: %v, %d files, %d tensors", err, len(list.Files), len(list.Tensors))
	}

	for _, bad := range [][]string{{dir, "--by", "expert"}, {dir, "--format", "gguf", "--recipe", "attn-moe-dense-fp8"}, {dir, "--recipe", "int4"}, {dir, "--layout", "tp3"}, {dir, "--pp-partition", "7,x"}} {
		if _, _, err := runInspectCmd(t, bad...); err == nil {
			t.Errorf("inspect %v: no error", bad)
		}
	}
	// Bad input: the error names the damaged file (main exits 1 on any error).
	shard := shards[6]
	if err := os.Truncate(shard, 4); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runInspectCmd(t, dir); err == nil || !strings.Contains(err.Error(), "file shorter than 8 bytes") || !strings.Contains(err.Error(), filepath.Base(shard)) {
		t.Errorf("truncated shard: %v", err)
	}
}
