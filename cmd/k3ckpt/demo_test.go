package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo keeps the README's first command true: it runs `k3ckpt demo`,
// which must walk every step and end with a lossless reassembly of the
// converted replica, and `k3ckpt demo --json` beside it. The test binary is
// the k3ckpt binary here (K3CKPT_TEST_AS_MAIN, see init): the demo runs each
// step as a child of its own executable, so every step is a real invocation
// of the same main, and no second build of the package is needed.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every subcommand")
	}
	t.Parallel()
	self := func(args ...string) *exec.Cmd {
		c := exec.Command(os.Args[0], args...)
		c.Env = append(os.Environ(), "K3CKPT_TEST_AS_MAIN=1")
		return c
	}
	dir := filepath.Join(t.TempDir(), "demo")
	var out, jout, jerr bytes.Buffer
	text, js := self("demo", "--dir", dir), self("demo", "--json")
	text.Stdout, text.Stderr = &out, &out
	js.Stdout, js.Stderr = &jout, &jerr
	// The two runs are independent (--json uses its own temporary
	// directory): they run side by side.
	if err := js.Start(); err != nil {
		t.Fatal(err)
	}
	err := text.Run()
	jerrWait := js.Wait()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	s := out.String()
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
	if jerrWait != nil {
		t.Fatalf("demo --json: %v\n%s", jerrWait, jerr.String())
	}
	if m := decodeSchema(t, "demo --json", jout.String()); len(m["steps"].([]any)) != len(steps) {
		t.Errorf("demo --json: %d steps, want %d", len(m["steps"].([]any)), len(steps))
	}
	for _, p := range []string{"k3-tiny-fp8/model.safetensors.index.json", "dp16-memory.svg", "pp16/stage-15/config.json", "dcp8/rank-15/layout.json"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("demo did not write %s: %v", p, err)
		}
	}
}
