package main

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// A converted checkpoint taken through shard and reassemble --check passes
// verify against the original source: no bookkeeping is left in the
// output. Two reassemblies give identical trees, and the shard tree is
// replaced by another partition with --restart (its config.json, annotated
// with the old stages, claimed by its manifest). The replica is the tiny one
// cut to 32 layers: two per stage by default, so --pp-partition can ask for
// another split.
func TestReassembledTreeVerifies(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	tmp := t.TempDir()
	cfg := testckpt.LayersConfigJSON(t, model.ScaleTiny, 32)
	src := testckpt.Dir(t, "replica-tiny-32", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: cfg, HeaderOnly: true})
	})
	fp8 := filepath.Join(tmp, "fp8") // read only after its conversion: shard and reassemble --check
	st, out, out2 := filepath.Join(tmp, "st"), filepath.Join(tmp, "out"), filepath.Join(tmp, "out2")
	for _, args := range [][]string{
		{"convert", src, fp8, "-q"},
		{"shard", fp8, st, "-q"},
		{"reassemble", st, out, "--check", fp8, "-q"},
		{"verify", src, out},
		{"reassemble", st, out2, "-q"},
	} {
		if o, e, code := k3(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, o, e)
		}
	}
	if a, b := testckpt.TreeHashes(t, out, nil), testckpt.TreeHashes(t, out2, nil); len(a) == 0 || !maps.Equal(a, b) {
		t.Errorf("two reassemblies differ")
	}
	const other = "3,1,2,2,2,2,2,2,2,2,2,2,2,2,2,2"
	if _, e, code := k3("shard", fp8, st, "--pp-partition", other, "-q"); code == 0 || !strings.Contains(e, "--restart") {
		t.Errorf("another partition over a finished shard: exit %d: %s", code, e)
	}
	if _, e, code := k3("shard", fp8, st, "--pp-partition", other, "--restart", "-q"); code != 0 {
		t.Errorf("another partition with --restart: exit %d: %s", code, e)
	}
}
