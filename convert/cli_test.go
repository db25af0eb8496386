package convert

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
)

// The tests in this file run the real k3ckpt binary as a subprocess, so that
// a kill -9, a file size limit or a full disk hit it as they would in
// production.

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

func buildCLI(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the k3ckpt binary")
	}
	cliOnce.Do(func() {
		cliPath = filepath.Join(testRoot, "k3ckpt")
		// go test puts its own toolchain first on the PATH of the tests.
		out, err := exec.Command("go", "build", "-o", cliPath, "github.com/k3ckpt/k3ckpt/cmd/k3ckpt").CombinedOutput()
		if err != nil {
			cliErr = errors.New(string(out))
		}
	})
	if cliErr != nil {
		t.Fatalf("go build ./cmd/k3ckpt: %v", cliErr)
	}
	return cliPath
}

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(buildCLI(t), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func countEntries(dir string, pred func(string) bool) int {
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if pred(e.Name()) {
			n++
		}
	}
	return n
}

// doneCount is how many finished files DST's done records list.
func doneCount(dst string) int {
	recs, _ := loadRecords(dst)
	return len(recs)
}

// finalsComplete checks that every file under a final name in a killed
// conversion is complete: byte-identical to the uninterrupted run's.
func finalsComplete(t *testing.T, dst string) int {
	t.Helper()
	ref := treeHashes(t, tinyRef(t))
	n := 0
	for name, h := range treeHashes(t, dst) {
		if strings.HasPrefix(name, stateDir+"/") || strings.HasPrefix(filepath.Base(name), ".k3tmp-") || name == dirlock.LockName {
			continue
		}
		n++
		if ref[name] != h {
			t.Errorf("%s is under its final name but differs from the complete file", name)
		}
	}
	return n
}

// Kill -9 the converter at several points, resume, and compare every byte
// with an uninterrupted run.
func TestKillAndResume(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	// Kill when this many files are recorded done (0: as soon as the first
	// temporary exists, i.e. in the middle of writing the first file).
	for _, after := range []int{0, 3, 40, 95} {
		dst := filepath.Join(t.TempDir(), "out")
		cmd := exec.Command(bin, "convert", tinySrc(t), dst, "--format", "deepseek", "--jobs", "2", "--json")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		killed := false
	poll:
		for {
			select {
			case <-exited:
				break poll
			default:
			}
			var reached bool
			if after == 0 {
				reached = countEntries(dst, func(n string) bool { return strings.HasPrefix(n, ".k3tmp-") }) > 0
			} else {
				reached = doneCount(dst) >= after
			}
			if reached {
				cmd.Process.Signal(syscall.SIGKILL)
				<-exited
				killed = true
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
		if !killed {
			t.Logf("after %d: the conversion finished before the kill", after)
		}
		finals := finalsComplete(t, dst)
		_, stderr, code := runCLI(t, "convert", tinySrc(t), dst, "--format", "deepseek", "--jobs", "2", "--resume", "--json")
		if code != 0 {
			t.Fatalf("resume after kill at %d: exit %d: %s", after, code, stderr)
		}
		sameTree(t, dst, tinyRef(t))
		t.Logf("killed after %d records: %d complete files survived, resume finished the rest", after, finals)
	}
}

// N worker processes on one destination, then byte-identical to one run.
func TestWorkerProcesses(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	dst := filepath.Join(t.TempDir(), "out")
	const n = 3
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(bin, "convert", tinySrc(t), dst, "--format", "deepseek", "--jobs", "1", "--json", "--worker", []string{"0/3", "1/3", "2/3"}[i])
			cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
			errs[i] = cmd.Run()
		}()
	}
	wg.Wait()
	finalized := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("worker %d: %v: %s", i, errs[i], outs[i].String())
		}
		var r struct{ Finalized bool }
		if err := json.Unmarshal(outs[i].Bytes(), &r); err != nil {
			t.Fatalf("worker %d output: %v: %s", i, err, outs[i].String())
		}
		if r.Finalized {
			finalized++
		}
	}
	if finalized == 0 {
		t.Error("no worker finalized")
	}
	sameTree(t, dst, tinyRef(t))
	// merge of a finished conversion is a no-op success.
	if _, stderr, code := runCLI(t, "merge", dst); code != 0 {
		t.Errorf("merge: %d %s", code, stderr)
	}
}

// tinyRef is the library default conversion (Options{}: the deepseek
// convention); the CLI defaults to modelopt, so the CLI tests that compare
// with tinyRef ask for --format deepseek.

// A write error (file size limit, then a full disk) is a clear error, exit
// status 1, and leaves no temporary and no partial file. The size limit sits
// above the run state's plan.json and below the largest shards.
func TestWriteErrors(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	if _, err := exec.LookPath("prlimit"); err == nil {
		dst := filepath.Join(t.TempDir(), "out")
		cmd := exec.Command("prlimit", "--fsize=300000", bin, "convert", tinySrc(t), dst, "--format", "deepseek", "--jobs", "2")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "file too large") || !strings.Contains(string(out), ".safetensors") {
			t.Errorf("file size limit: %v: %s", err, out)
		}
		if temps := tempsUnder(t, dst); len(temps) > 0 {
			t.Errorf("temporaries left: %v", temps)
		}
		finalsComplete(t, dst)
	} else {
		t.Log("no prlimit: file size limit case skipped")
	}

	mnt := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", mnt).Run(); err != nil {
		t.Skipf("cannot mount a small tmpfs (needs root): %v", err)
	}
	defer exec.Command("umount", mnt).Run()
	dst := filepath.Join(mnt, "out")
	// Refused before the first byte, with both figures.
	stdout, stderr, code := runCLI(t, "convert", tinySrc(t), dst, "--format", "deepseek", "--jobs", "2")
	if code != 1 || !strings.Contains(stderr, "not enough free space") || !strings.Contains(stderr, "bytes) free, the conversion writes") || stdout != "" {
		t.Errorf("space check: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if got := finalsComplete(t, dst); got != 0 {
		t.Errorf("space check: %d files written before refusing", got)
	}
	// Overridden, the disk fills: a clean error and no partial file.
	stdout, stderr, code = runCLI(t, "convert", tinySrc(t), dst, "--format", "deepseek", "--jobs", "2", "--no-space-check")
	if code != 1 || !strings.Contains(stderr, "no space left on device") || stdout != "" {
		t.Errorf("disk full: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if temps := tempsUnder(t, dst); len(temps) > 0 {
		t.Errorf("temporaries left on the full disk: %v", temps)
	}
	finalsComplete(t, dst)
}

func TestCLIDryRunAndVerify(t *testing.T) {
	t.Parallel()
	buildCLI(t) // skipped under -short before the tiny replica is built
	dst := filepath.Join(t.TempDir(), "never")
	stdout, stderr, code := runCLI(t, "convert", tinySrc(t), dst, "--dry-run", "--format", "modelopt")
	if code != 0 || !strings.Contains(stdout, "952 quantized") || !strings.Contains(stdout, "model-00096-of-000096.safetensors") {
		t.Fatalf("dry run: %d %s %s", code, stdout, stderr)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Error("--dry-run created DST")
	}
	stdout, _, code = runCLI(t, "verify", tinySrc(t), tinyRef(t), "--json")
	var rep VerifyReport
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || !rep.OK || len(rep.Tensors) != 952 {
		t.Fatalf("verify: exit %d: %.300s", code, stdout)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	copyTree(t, tinyRef(t), bad)
	patch(t, filepath.Join(bad, "model-00002-of-000096.safetensors"), 5000, 0x00)
	if _, _, code := runCLI(t, "verify", tinySrc(t), bad); code != 1 {
		t.Errorf("verify of a damaged conversion: exit %d", code)
	}
	if _, stderr, code := runCLI(t, "convert", tinySrc(t), bad+"2", "--worker", "3/3"); code != 1 || !strings.Contains(stderr, "worker") {
		t.Errorf("--worker 3/3: %d %s", code, stderr)
	}
}

// Ctrl-C (SIGINT) or SIGTERM says how to continue, and running the same
// command again (no flag) resumes: finished files are kept, not rewritten.
// --restart writes everything again.
func TestInterruptThenRerunResumes(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	dst := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "convert", tinySrc(t), dst, "--format", "deepseek", "--jobs", "1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	interrupted := false
wait:
	for {
		select {
		case <-exited:
			break wait
		default:
		}
		if doneCount(dst) >= 3 {
			cmd.Process.Signal(syscall.SIGINT)
			<-exited
			interrupted = true
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
	if !interrupted {
		t.Skip("the conversion finished before the interrupt")
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(stderr.String(), "run the same command again to continue") {
		t.Fatalf("interrupt: exit %d, stderr %q", code, stderr.String())
	}
	kept := doneCount(dst)
	stdout, errOut, code := runCLI(t, "convert", tinySrc(t), dst, "--format", "deepseek", "--jobs", "2", "--json")
	var res struct{ Written, Skipped []string }
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil {
		t.Fatalf("rerun: exit %d %s %s", code, stdout, errOut)
	}
	if len(res.Skipped) < kept || len(res.Written) == 0 {
		t.Errorf("rerun kept %d files (%d were done), wrote %d", len(res.Skipped), kept, len(res.Written))
	}
	sameTree(t, dst, tinyRef(t))
	// A rerun on the finished DST writes nothing; --restart writes it all.
	stdout, _, code = runCLI(t, "convert", tinySrc(t), dst, "--format", "deepseek", "--json")
	if json.Unmarshal([]byte(stdout), &res) != nil || code != 0 || len(res.Written) != 0 {
		t.Errorf("rerun on a finished DST: exit %d, wrote %v", code, res.Written)
	}
	stdout, _, code = runCLI(t, "convert", tinySrc(t), dst, "--format", "deepseek", "--json", "--restart")
	if json.Unmarshal([]byte(stdout), &res) != nil || code != 0 || len(res.Skipped) != 0 || len(res.Written) == 0 {
		t.Errorf("--restart: exit %d, skipped %v", code, res.Skipped)
	}
	sameTree(t, dst, tinyRef(t))
	if _, stderr, code := runCLI(t, "convert", tinySrc(t), dst, "--worker", "0/4294967296"); code != 1 || !strings.Contains(stderr, "worker") {
		t.Errorf("--worker 0/4294967296: exit %d %s", code, stderr)
	}
}
