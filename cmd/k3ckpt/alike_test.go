package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
)

// TestCommandsAlike: shard's summary names shard; verify -q prints nothing
// on success (the exit status says it) and still prints violations.
func TestCommandsAlike(t *testing.T) {
	dir := headerOnlyReplica(t)
	tmp := t.TempDir()
	out, errOut, code := k3("shard", dir, filepath.Join(tmp, "pp"), "--dry-run")
	if code != 0 || !strings.HasPrefix(out, "shard "+dir+": layout pp16") {
		t.Errorf("shard --dry-run: exit %d, starts %.80q (%s)", code, out, errOut)
	}
	if out, _, _ := k3("export", dir, filepath.Join(tmp, "e"), "--layout", "dp16", "--dry-run"); !strings.HasPrefix(out, "export ") {
		t.Errorf("export --dry-run starts %.80q", out)
	}

	dst := filepath.Join(tmp, "fp8")
	if _, errOut, code := k3("convert", dir, dst, "-q"); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errOut)
	}
	if out, errOut, code := k3("verify", dir, dst, "-q"); code != 0 || out != "" {
		t.Errorf("verify -q: exit %d, stdout %q (%s)", code, out, errOut)
	}
	if out, _, code := k3("verify", dir, dst); code != 0 || !strings.Contains(out, "\nOK\n") {
		t.Errorf("verify: exit %d, stdout %q", code, out)
	}
}

// TestCastScope: after a resumed run the cast's counts are said to be this
// run's files only.
func TestCastScope(t *testing.T) {
	if s := castScope(&convert.Result{Written: []string{"a"}}); s != "MXFP4→NVFP4 cast of the files written" {
		t.Errorf("fresh run: %q", s)
	}
	s := castScope(&convert.Result{Written: []string{"a"}, Skipped: []string{"b", "c"}})
	if !strings.Contains(s, "1 file written by this run") || !strings.Contains(s, "2 files kept from an earlier run") {
		t.Errorf("resumed run: %q", s)
	}
}
