package main

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
)

// A converted checkpoint taken through shard and reassemble --check passes
// verify against the original source: no bookkeeping is left in the
// output. Two reassemblies give identical trees, and the shard tree is
// replaced by another partition with --restart (its config.json, annotated
// with the old stages, claimed by its manifest).
func TestReassembledTreeVerifies(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	tmp := t.TempDir()
	src := headerOnlyReplica(t)
	fp8 := converted(t, "default") // read only: shard and reassemble --check
	st, out, out2 := filepath.Join(tmp, "st"), filepath.Join(tmp, "out"), filepath.Join(tmp, "out2")
	for _, args := range [][]string{
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
	if _, e, code := k3("shard", fp8, st, "--even", "-q"); code == 0 || !strings.Contains(e, "--restart") {
		t.Errorf("another partition over a finished shard: exit %d: %s", code, e)
	}
	if _, e, code := k3("shard", fp8, st, "--even", "--restart", "-q"); code != 0 {
		t.Errorf("another partition with --restart: exit %d: %s", code, e)
	}
}
