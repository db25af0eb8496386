package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo keeps the README's first command true: it builds the real binary and
// runs `k3ckpt demo`, which must walk every step and end with a lossless
// reassembly of the converted replica.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs every subcommand")
	}
	bin := filepath.Join(t.TempDir(), "k3ckpt")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "demo")
	out, err := exec.Command(bin, "demo", "--dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	s := string(out)
	steps := demoSteps(dir, true)
	for i := range steps {
		if !strings.Contains(s, fmt.Sprintf("step %d/%d", i+1, len(steps))) {
			t.Errorf("step %d did not run", i+1)
		}
	}
	for _, want := range []string{"byte-identical to " + filepath.Join(dir, "k3-tiny-fp8"), "demo finished"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// --json runs the steps quietly: one JSON object, each step in it.
	jout, err := exec.Command(bin, "demo", "--json").Output()
	if err != nil {
		t.Fatalf("demo --json: %v", err)
	}
	if m := decodeSchema(t, "demo --json", string(jout)); len(m["steps"].([]any)) != len(steps) {
		t.Errorf("demo --json: %d steps, want %d", len(m["steps"].([]any)), len(steps))
	}
	for _, p := range []string{"k3-tiny-fp8/model.safetensors.index.json", "dp16-memory.svg", "pp16/stage-15/config.json", "dcp8/rank-15/layout.json"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("demo did not write %s: %v", p, err)
		}
	}
}
