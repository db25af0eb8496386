package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

func TestSynthCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k3")
	out, err := runSynth(t, dir, "--scale", "full", "--header-only")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "96 shards, 497,220 tensors, 1453.66 GiB") {
		t.Errorf("summary: %q", out)
	}
	if _, err := runSynth(t, dir, "--scale", "tiny"); !errors.Is(err, model.ErrOutputExists) {
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
