package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorsSayWhatToDo runs the mistakes a new user makes and checks that
// each error says what to do, in the flags' terms. Under -short on the
// 16-layer replica.
func TestErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	dir := shortReplica(t)
	tmp := t.TempDir()
	dst := filepath.Join(tmp, "out")
	for _, c := range []struct {
		args      []string
		want      []string
		notWanted []string
	}{
		// A missing argument shows the usage line.
		{[]string{"convert"}, []string{"accepts 2 arg(s), received 0", "usage: k3ckpt convert SRC DST [flags]"}, nil},
		{[]string{"inspect"}, []string{"usage: k3ckpt inspect PATH|URL [flags]"}, nil},
		{[]string{"convert", dir, "--bogus"}, []string{"unknown flag: --bogus", "k3ckpt convert --help"}, nil},
		// The suggestion is indented, not a literal \t.
		{[]string{"convrt"}, []string{"Did you mean this?\n  convert\n"}, []string{`\t`}},
		// config.json for SRC: pass the directory.
		{[]string{"inspect", filepath.Join(dir, "config.json")}, []string{"pass the checkpoint directory (" + dir + ")"}, nil},
		{[]string{"convert", filepath.Join(dir, "config.json"), dst, "--dry-run"}, []string{"pass the checkpoint directory"}, nil},
		// Incompatible flags are not an "unknown format".
		{[]string{"convert", dir, dst, "--dry-run", "--experts", "nvfp4", "--format", "deepseek"},
			[]string{"--experts nvfp4 does not combine with --format deepseek", "only --format modelopt"}, []string{"unknown format"}},
		{[]string{"inspect", dir, "--recipe", "modelopt-k3", "--experts", "nvfp4", "--format", "compressed-tensors"},
			[]string{"only --format modelopt"}, []string{"unknown format"}},
		{[]string{"convert", dir, dst, "--dry-run", "--numerics", "modelopt", "--scale-fmt", "ue8m0"},
			[]string{"use --scale-fmt fp32 or --numerics deepgemm"}, []string{"unknown format"}},
		{[]string{"convert", dir, dst, "--dry-run", "--experts", "nvfp5"}, []string{`--experts: unknown experts mode "nvfp5" (known: keep, nvfp4`}, []string{"unknown format"}},
	} {
		_, errOut, code := k3(c.args...)
		if code == 0 {
			t.Errorf("%q: exit 0", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%q: error lacks %q:\n%s", c.args, w, errOut)
			}
		}
		for _, w := range c.notWanted {
			if strings.Contains(errOut, w) {
				t.Errorf("%q: error says %q:\n%s", c.args, w, errOut)
			}
		}
	}
	// A flag value's case does not matter.
	for _, args := range [][]string{
		{"convert", dir, dst, "--dry-run", "--experts", "NVFP4", "--recipe", "ModelOpt-K3", "--json"},
		{"inspect", dir, "--by", "DType", "--layout", "DP16"},
		{"synth", filepath.Join(tmp, "s"), "--scale", "TINY", "--dry-run"},
	} {
		out, errOut, code := k3(args...)
		if code != 0 {
			t.Errorf("%q: exit %d: %s", args, code, errOut)
		} else if args[0] == "convert" && !strings.Contains(out, `"experts": "nvfp4"`) {
			t.Errorf("%q: plan does not cast the experts:\n%.300s", args, out)
		}
	}
}

// TestDestinationErrors: a DST of unrelated files is not called a
// conversion; a DST with an unfinished run of another plan says how to go
// on, also to a --restart. Under -short on the 16-layer replica.
func TestDestinationErrors(t *testing.T) {
	t.Parallel()
	dir := shortReplica(t)
	other := filepath.Join(t.TempDir(), "notes")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := k3("convert", dir, other)
	if code == 0 || strings.Contains(errOut, "different conversion") || !strings.Contains(errOut, "holds no k3ckpt conversion") ||
		!strings.Contains(errOut, "choose another, or empty this one") {
		t.Errorf("unrelated files: exit %d:\n%s", code, errOut)
	}

	dst := filepath.Join(t.TempDir(), "half")
	if _, errOut, code := k3("convert", dir, dst, "--worker", "0/8", "-q"); code != 0 {
		t.Fatalf("first slice: exit %d: %s", code, errOut)
	}
	for _, restart := range []bool{false, true} {
		args := []string{"convert", dir, dst, "--recipe", "modelopt-k3"}
		if restart {
			args = append(args, "--restart")
		}
		_, errOut, code := k3(args...)
		if code == 0 || strings.Contains(errOut, "different conversion") || !strings.Contains(errOut, "rerun the command that started it") ||
			!strings.Contains(errOut, "delete that directory") || strings.Contains(errOut, "--restart starts over only") != restart {
			t.Errorf("another plan's run, --restart %v: exit %d:\n%s", restart, code, errOut)
		}
	}
}
