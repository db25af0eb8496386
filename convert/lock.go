package convert

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
)

// errInUse: another process is working on DST.
var errInUse = dirlock.ErrInUse

// How runs share DST. A whole run, or a merge, holds DST's lock throughout
// and checks that no worker slice is held. A worker of a split (--worker
// I/N) holds DST's lock only while it records the plan and takes its
// slice's lock, held for the rest of its run: the workers of one split run
// side by side, while a second whole run, the same slice twice or a worker
// of another split (whose slices overlap) are refused. Every lock belongs
// to its process: a killed run never blocks the next.

// lockWait bounds a worker's wait for DST's lock, which others hold briefly.
const lockWait = 30 * time.Second

// acquireDest takes DST's lock, waiting up to wait while it is taken.
func acquireDest(dst string, wait time.Duration) (*dirlock.Lock, error) {
	deadline := time.Now().Add(wait)
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		l, err := dirlock.Acquire(dst, dirlock.LockName)
		if err == nil || !errors.Is(err, dirlock.ErrInUse) || time.Now().Add(delay).After(deadline) {
			return l, err
		}
		time.Sleep(delay)
	}
}

const slicePrefix, sliceSuffix = "worker-", ".lock"

// splitSuffix ends a worker's record of its split, which outlives its lock.
const splitSuffix = ".split"

// lockSlice locks worker slice i/n of DST exclusively (the caller holds
// DST's lock), refusing while workers of another split run or are recorded.
func lockSlice(dst string, i, n int) (*dirlock.Lock, error) {
	id, ofN, dir := fmt.Sprintf("%d-of-%d", i, n), fmt.Sprintf("-of-%d", n), filepath.Join(dst, stateDir)
	otherRunning := func() error {
		if held := heldSlices(dst, ofN); held != "" {
			return fmt.Errorf("%w: %s is being converted by workers of another split (worker %s); use the same --worker N", errInUse, dst, held)
		}
		return nil
	}
	if err := otherRunning(); err != nil {
		return nil, err
	}
	// A recorded worker of another split, running or not.
	if other := findSlice(dst, splitSuffix, ofN, nil); other != "" {
		return nil, fmt.Errorf("%w: --worker %d/%d: %s was split by earlier workers as %s; every worker of one conversion takes the same N (finish it with that split, or delete %s to start over)",
			ErrWorker, i, n, dst, strings.Replace(other, "-of-", "/", 1), dst)
	}
	l, err := dirlock.Acquire(dir, slicePrefix+id+sliceSuffix)
	if errors.Is(err, errInUse) {
		return nil, fmt.Errorf("%w: worker %d/%d of %s is already running", errInUse, i, n, dst)
	}
	if err != nil {
		return nil, err
	}
	if err := otherRunning(); err != nil { // one may have started since
		l.Release()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, slicePrefix+id+splitSuffix), nil, 0o644); err != nil {
		l.Release()
		return nil, fmt.Errorf("record the split of %s: %w", dst, err)
	}
	return l, nil
}

// heldSlices names ("I-of-N") a worker slice of DST whose lock a live
// process holds, skipping ids ending in except ("" when none is held).
func heldSlices(dst, except string) string { return findSlice(dst, sliceSuffix, except, dirlock.Held) }

// findSlice names the first worker file of DST (ending in suffix, its id not
// in except) that ok (nil: any) accepts, "" when none.
func findSlice(dst, suffix, except string, ok func(path string) bool) string {
	dir := filepath.Join(dst, stateDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		n := e.Name()
		id, worker := strings.CutPrefix(n, slicePrefix)
		id, ofSuffix := strings.CutSuffix(id, suffix)
		if worker && ofSuffix && (except == "" || !strings.HasSuffix(id, except)) && (ok == nil || ok(filepath.Join(dir, n))) {
			return id
		}
	}
	return ""
}

// checkNoWorkers refuses while any worker slice of DST is held.
func checkNoWorkers(dst string) error {
	if held := heldSlices(dst, ""); held != "" {
		return fmt.Errorf("%w: worker %s of %s is still running; wait for the workers to finish", errInUse, held, dst)
	}
	return nil
}
