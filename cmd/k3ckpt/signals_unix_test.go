//go:build unix

package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
)

// SIGINT, SIGTERM and SIGHUP stop every writing command alike while it
// writes: exit 128+n, one wording, no temporary and no lock left, and the
// same command run again finishes the job.
func TestStopSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	src := smallReplica(t)
	for _, c := range []struct {
		cmd string
		sig syscall.Signal
	}{{"shard", syscall.SIGINT}, {"shard", syscall.SIGTERM}, {"shard", syscall.SIGHUP}, {"convert", syscall.SIGHUP}, {"export", syscall.SIGTERM}} {
		t.Run(c.cmd+"-"+signalName(c.sig), func(t *testing.T) {
			t.Parallel() // each its own child and DST; the replica is only read
			dst := filepath.Join(t.TempDir(), "out")
			args := []string{c.cmd, src, dst, "-q"}
			if c.cmd == "export" {
				args = append(args, "--layout", "dp16")
			}
			child := exec.Command(os.Args[0], args...)
			child.Env = append(os.Environ(), "K3CKPT_TEST_AS_MAIN=1")
			var stderr bytes.Buffer
			child.Stderr = &stderr
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			// Signal once the run holds DST's lock and writes.
			deadline := time.Now().Add(time.Minute)
			for !hasTemp(dst) && time.Now().Before(deadline) {
				time.Sleep(2 * time.Millisecond)
			}
			if err := child.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			err := child.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(c.sig) {
				t.Fatalf("exit %v, want %d; stderr %s", err, 128+int(c.sig), stderr.String())
			}
			want := "k3ckpt: " + c.cmd + " interrupted (" + signalName(c.sig) + "): the files finished so far are kept; run the same command again to continue (--restart starts over)\n"
			if !strings.HasSuffix(stderr.String(), want) {
				t.Errorf("stderr %q, want it to end in %q", stderr.String(), want)
			}
			if left := leftovers(t, dst); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			if _, e, code := k3(args...); code != 0 {
				t.Errorf("rerun: exit %d: %s", code, e)
			}
		})
	}
}

// hasTemp reports whether a temporary exists under dir.
func hasTemp(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), filewrite.TempPrefix) {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// leftovers lists the temporaries and lock files under dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), filewrite.TempPrefix) || d.Name() == dirlock.LockName {
			out = append(out, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}
