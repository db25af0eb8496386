//go:build unix

package dirlock

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// With DIRLOCK_NOWRITE=dir the test binary is TestPidWriteFails's child.
func init() {
	if dir := os.Getenv("DIRLOCK_NOWRITE"); dir != "" {
		os.Exit(holdNoWrite(dir))
	}
}

// holdNoWrite is the DIRLOCK_NOWRITE child: with a file size limit of
// 0 the pid cannot be written to the lock file (EFBIG; Go ignores SIGXFSZ).
func holdNoWrite(dir string) int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		fmt.Println("getrlimit:", err)
		return 3
	}
	lim.Cur = 0
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		fmt.Println("setrlimit:", err)
		return 3
	}
	l, err := Acquire(dir, LockName)
	if err != nil {
		fmt.Println("error:", err)
		return 0
	}
	l.Release()
	fmt.Println("locked")
	return 0
}

// TestPidWriteFails: when the holder's pid cannot be written to the lock
// file, Acquire fails naming the file, and leaves no lock file behind.
func TestPidWriteFails(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DIRLOCK_NOWRITE="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	p := filepath.Join(dir, LockName)
	if got := string(out); !strings.HasPrefix(got, "error: lock "+p+": ") {
		t.Fatalf("Acquire with the pid unwritable: %q, want an error naming %s", got, p)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("lock file left behind: %v", err)
	}
}
