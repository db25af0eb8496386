package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runSynth(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newSynthCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// synth writes a replica and prints its figures: the full-size one (497,220
// tensors in 96 sparse files, seconds of CPU) without -short; under -short
// the tiny one, and the full-size figures from --dry-run, which plans the
// same replica without writing it. A non-empty directory needs --force; a
// bad scale or config is refused before anything is created.
func TestSynthCommand(t *testing.T) {
	t.Parallel()
	const full = "96 shards, 497,220 tensors, 1453.66 GiB"
	dir := filepath.Join(t.TempDir(), "k3")
	scale, want := "full", full
	if testing.Short() {
		scale, want = "tiny", "96 shards, 20,142 tensors, 0.05 GiB"
		dry := filepath.Join(t.TempDir(), "dry")
		if out, err := runSynth(t, dry, "--scale", "full", "--header-only", "--dry-run"); err != nil || !strings.Contains(out, full) {
			t.Errorf("--scale full --dry-run: %v, %q", err, out)
		}
		if _, err := os.Stat(dry); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("--dry-run created %s", dry)
		}
	}
	out, err := runSynth(t, dir, "--scale", scale, "--header-only")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, want) {
		t.Errorf("summary: %q, want %q", out, want)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 96+2 {
		t.Errorf("%s: %d entries (%v), want 96 shards, the index and config.json", dir, len(ents), err)
	}
	if _, err := runSynth(t, dir, "--scale", "tiny"); err == nil || !strings.Contains(err.Error(), "output directory is not empty") {
		t.Errorf("non-empty dir without --force: %v", err)
	}
	if _, err := runSynth(t, dir, "--scale", "tiny", "--header-only", "--force"); err != nil {
		t.Errorf("--force: %v", err)
	}
	if _, err := runSynth(t, dir, "--scale", "medium"); err == nil || !strings.Contains(err.Error(), "medium") {
		t.Errorf("bad scale: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(bad, []byte(`{"model_type": "kimi_k3", "text_config": {"model_type": "kimi_linear"}}`), 0o644)
	out2 := filepath.Join(t.TempDir(), "o")
	if _, err := runSynth(t, out2, "--config", bad); err == nil || !strings.Contains(err.Error(), "config: text_config.num_hidden_layers: missing") {
		t.Errorf("bad config: %v", err)
	}
	if _, err := os.Stat(out2); !errors.Is(err, os.ErrNotExist) {
		t.Error("bad config created the output directory")
	}
}
