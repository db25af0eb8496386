package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
)

// TestCommandsAlike: shard's summary names shard; verify -q prints nothing
// on success (the exit status says it) and still prints violations.
func TestCommandsAlike(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	dir := headerOnlyReplica(t)
	tmp := t.TempDir()
	out, errOut, code := k3("shard", dir, filepath.Join(tmp, "pp"), "--dry-run")
	if code != 0 || !strings.HasPrefix(out, "shard "+dir+": layout pp16") {
		t.Errorf("shard --dry-run: exit %d, starts %.80q (%s)", code, out, errOut)
	}
	if out, _, _ := k3("export", dir, filepath.Join(tmp, "e"), "--layout", "dp16", "--dry-run"); !strings.HasPrefix(out, "export ") {
		t.Errorf("export --dry-run starts %.80q", out)
	}

	// Both modes on the small replica: what is printed does not depend on
	// the layer count.
	small := smallReplica(t)
	dst := testckpt.Dir(t, "alike-small-fp8", func(d string) error {
		if _, e, code := k3("convert", small, filepath.Join(d, "out"), "-q"); code != 0 {
			return fmt.Errorf("convert: %s", e)
		}
		return nil
	}) + "/out"
	if out, errOut, code := k3("verify", small, dst, "-q"); code != 0 || out != "" {
		t.Errorf("verify -q: exit %d, stdout %q (%s)", code, out, errOut)
	}
	if out, _, code := k3("verify", small, dst); code != 0 || !strings.Contains(out, "\nOK\n") {
		t.Errorf("verify: exit %d, stdout %q", code, out)
	}
}

// TestCastScope: the cast's counts cover the whole output, and say which
// files they leave out when some are not known.
func TestCastScope(t *testing.T) {
	if s := castScope(&convert.Result{Written: []string{"a"}, Skipped: []string{"b"}}); s != "MXFP4→NVFP4 cast of the output" {
		t.Errorf("resumed run: %q", s)
	}
	s := castScope(&convert.Result{Written: []string{"a"}, Skipped: []string{"b", "c"}, Uncounted: 2})
	if !strings.Contains(s, "less the 2 files kept from a finished conversion") {
		t.Errorf("files from a manifest: %q", s)
	}
}
