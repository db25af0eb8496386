package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// shardExportReassemble synthesizes a replica from the config JSON cfg
// (after edit changes it), shards it per stage (--even), exports it with the
// family's testdata layout layouts/ep4-tp4.json, and checks that both sets
// of pieces reassemble byte-identical to the source. It returns the source,
// shard and export directories for the caller's own checks.
func shardExportReassemble(t *testing.T, cfg []byte, family string, edit func(map[string]any)) (src, st, ex string) {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	cfgPath := filepath.Join(tmp, "config.json")
	src, st, ex = filepath.Join(tmp, "src"), filepath.Join(tmp, "st"), filepath.Join(tmp, "ex")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	layoutPath := filepath.Join("..", "..", "model", "testdata", family, "layouts", "ep4-tp4.json")
	for _, args := range [][]string{
		{"synth", "-q", "--config", cfgPath, src},
		{"shard", "-q", "--even", src, st},
		{"export", "-q", "--layout", layoutPath, src, ex},
	} {
		if o, e, code := k3(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, o, e)
		}
	}
	for _, pieces := range []string{st, ex} {
		o, e, code := k3("reassemble", pieces, filepath.Join(tmp, "re-"+filepath.Base(pieces)), "--check", src)
		if code != 0 || !strings.Contains(o+e, "byte-identical to") {
			t.Errorf("reassemble %s --check: exit %d: %s%s", pieces, code, o, e)
		}
	}
	return src, st, ex
}

// openPair opens a conversion's source and output, closed when t ends.
func openPair(t *testing.T, src, dst string) (in, out *safetensors.Checkpoint) {
	t.Helper()
	in, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	out, err = safetensors.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	return in, out
}
