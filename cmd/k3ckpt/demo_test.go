package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDemo keeps the README's first command true: it runs `k3ckpt demo`,
// which must walk every step and end with a lossless reassembly of the
// converted replica. The test binary is the k3ckpt binary here
// (K3CKPT_TEST_AS_MAIN, see init): the demo runs each step as a child of its
// own executable, so every step is a real invocation of the same main, and
// no second build of the package is needed. TestDemoJSON checks --json.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every subcommand")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "demo")
	var out bytes.Buffer
	text := exec.Command(os.Args[0], "demo", "--dir", dir)
	text.Env = append(os.Environ(), "K3CKPT_TEST_AS_MAIN=1")
	text.Stdout, text.Stderr = &out, &out
	if err := text.Run(); err != nil {
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
	for _, p := range []string{"k3-tiny-fp8/model.safetensors.index.json", "dp16-memory.svg", "pp16/stage-15/config.json", "dcp8/rank-15/layout.json"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("demo did not write %s: %v", p, err)
		}
	}
}

// TestDemoJSON: `demo --json` runs the same steps as the text demo
// (TestDemo runs them for real), each with -q and its output dropped, in a
// temporary directory it removes, and prints one JSON object with every
// step's command. The steps are recorded here, not run: what --json adds is
// how the demo runs them and what it prints.
func TestDemoJSON(t *testing.T) {
	t.Parallel()
	var ran [][]string
	var tmp string
	cmd := newDemoCmd(func(self string, args []string, stdout, stderr io.Writer) error {
		if self == "" || stdout != io.Discard || stderr == io.Discard {
			t.Errorf("step %v: self %q, stdout %v, stderr %v: want the executable, output dropped, errors kept", args, self, stdout, stderr)
		}
		ran = append(ran, args)
		return nil
	})
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("demo --json: %v\n%s", err, errOut.String())
	}
	if len(ran) == 0 {
		t.Fatal("demo --json ran no step")
	}
	// The steps' paths are under the demo's temporary directory: the first
	// step's argument is its replica, dir/k3-tiny.
	tmp = filepath.Dir(ran[0][1])
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("demo --json left %s behind (%v)", tmp, err)
	}
	steps := demoSteps(tmp, false)
	if len(ran) != len(steps) {
		t.Fatalf("demo --json ran %d steps, want %d", len(ran), len(steps))
	}
	for i, s := range steps {
		if want := append(slices.Clone(s.args), "-q"); !slices.Equal(ran[i], want) {
			t.Errorf("step %d ran %q, want %q", i+1, ran[i], want)
		}
	}
	m := decodeSchema(t, "demo --json", out.String())
	js, _ := m["steps"].([]any)
	if len(js) != len(steps) || m["kept"] != false || m["dir"] != nil {
		t.Fatalf("demo --json: %d steps (want %d), kept %v, dir %v", len(js), len(steps), m["kept"], m["dir"])
	}
	for i, s := range steps {
		st, _ := js[i].(map[string]any)
		args, _ := st["args"].([]any)
		got := make([]string, len(args))
		for j, a := range args {
			got[j], _ = a.(string)
		}
		if _, ok := st["seconds"].(float64); !ok || st["step"] != s.what || !slices.Equal(got, s.args) {
			t.Errorf("demo --json step %d: %v, want %q %q and its seconds", i+1, st, s.what, s.args)
		}
	}
}
