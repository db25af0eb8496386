package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
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
// the tiny one cut to 16 layers (19 shards) from --config, and the
// full-size and tiny figures from --dry-run, which plans the same replica
// without writing it. A non-empty directory needs --force; a bad scale or config is
// refused before anything is created.
func TestSynthCommand(t *testing.T) {
	t.Parallel()
	const full = "96 shards, 497,220 tensors, 1453.66 GiB"
	dir := filepath.Join(t.TempDir(), "k3")
	what, want, files := []string{"--scale", "full"}, full, 96
	again := []string{"--scale", "tiny"} // the --force rerun
	if testing.Short() {
		cfg := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(cfg, testckpt.LayersConfigJSON(t, model.ScaleTiny, 16), 0o644); err != nil {
			t.Fatal(err)
		}
		what, want, files = []string{"--config", cfg}, "19 shards, ", 19
		again = what
		dry := filepath.Join(t.TempDir(), "dry")
		for scale, want := range map[string]string{"full": full, "tiny": "96 shards, 20,142 tensors, 0.05 GiB"} {
			if out, err := runSynth(t, dry, "--scale", scale, "--header-only", "--dry-run"); err != nil || !strings.Contains(out, want) {
				t.Errorf("--scale %s --dry-run: %v, %q", scale, err, out)
			}
		}
		if _, err := os.Stat(dry); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("--dry-run created %s", dry)
		}
	}
	out, err := runSynth(t, append([]string{dir, "--header-only"}, what...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), want) { // as unwrapped
		t.Errorf("summary: %q, want %q", out, want)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != files+2 {
		t.Errorf("%s: %d entries (%v), want %d shards, the index and config.json", dir, len(ents), err, files)
	}
	if _, err := runSynth(t, dir, "--scale", "tiny"); err == nil || !strings.Contains(err.Error(), "output directory is not empty") {
		t.Errorf("non-empty dir without --force: %v", err)
	}
	if _, err := runSynth(t, append([]string{dir, "--header-only", "--force"}, again...)...); err != nil {
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
