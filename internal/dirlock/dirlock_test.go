package dirlock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary act as a second process holding a lock: with
// DIRLOCK_HOLD=dir it takes the lock, prints "locked" and waits to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("DIRLOCK_HOLD"); dir != "" {
		l, err := Acquire(dir, LockName)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		fmt.Println("locked")
		time.Sleep(time.Minute)
		l.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSecondLockerInProcess(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, LockName)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir, LockName)
	want := fmt.Sprintf("DST %s is in use by pid %d", dir, os.Getpid())
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second Acquire: %v, want ErrInUse and %q", err, want)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, LockName)); !os.IsNotExist(err) {
		t.Fatalf("lock file left after Release: %v", err)
	}
	l2, err := Acquire(dir, LockName)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	l2.Release()
}

func TestSecondLockerProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DIRLOCK_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	buf := make([]byte, 64)
	n, _ := out.Read(buf) // the child prints once it holds the lock (or fails)
	if !strings.HasPrefix(string(buf[:n]), "locked") {
		t.Fatalf("child: %q", buf[:n])
	}
	_, err = Acquire(dir, LockName)
	if want := "in use by pid " + strconv.Itoa(cmd.Process.Pid); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want ErrInUse and %q", err, want)
	}
	// Killed without a chance to release: the lock goes with the process
	// where the system drops it (flock); the leftover file is reused.
	cmd.Process.Kill()
	cmd.Wait()
	l, err := Acquire(dir, LockName)
	if err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, LockName)); statErr == nil && !flockAvailable {
			t.Skip("no flock here: a killed holder's lock file stays until removed")
		}
		t.Fatalf("after the holder was killed: %v", err)
	}
	b, _ := os.ReadFile(l.path)
	if strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q, want our pid", b)
	}
	l.Release()
}

// TestHeld: a lock file of the caller's naming is held while its Lock is,
// and neither held nor left behind after Release.
func TestHeld(t *testing.T) {
	p := filepath.Join(t.TempDir(), "worker-0-of-2.lock")
	if Held(p) {
		t.Fatal("a missing lock file is held")
	}
	l, err := Acquire(filepath.Split(p))
	if err != nil {
		t.Fatal(err)
	}
	if !Held(p) {
		t.Error("a held lock file is not reported held")
	}
	if _, err := Acquire(filepath.Split(p)); !errors.Is(err, ErrInUse) {
		t.Errorf("second Acquire: %v, want ErrInUse", err)
	}
	l.Release()
	if Held(p) {
		t.Error("a released lock file is held")
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("lock file left after Release: %v", err)
	}
}
