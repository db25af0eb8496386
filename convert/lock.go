package convert

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrInUse: another process is working on DST.
var ErrInUse = errors.New("destination in use")

// ownerName, inside StateDir, says which process holds DST (for the error
// another process gets).
const ownerName = "owner"

// A run holds DST for its whole duration: exclusively when one process does
// the whole conversion or finalizes it, shared by the workers of a split
// (each also holding its slice exclusively). The lock belongs to the process,
// so a killed run never blocks the next. lockFile is the platform's
// non-blocking advisory lock (flock on Unix).

// destLock is a held lock; release gives it back.
type destLock struct{ f *os.File }

func (l *destLock) release() {
	if l != nil && l.f != nil {
		unlockFile(l.f)
		l.f.Close()
		l.f = nil
	}
}

// lockDest locks DST itself (the directory, so no file is left behind).
func lockDest(dst string, exclusive bool) (*destLock, error) {
	f, err := os.Open(dst)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dst, err)
	}
	if err := lockFile(f, exclusive); err != nil {
		f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("%w: %s is in use by %s; wait for it to finish or stop it", ErrInUse, dst, owner(dst))
		}
		return nil, fmt.Errorf("lock %s: %w", dst, err)
	}
	return &destLock{f: f}, nil
}

// lockSlice locks worker slice i/n of DST exclusively, refusing while
// workers of another split (another N) run: their slices overlap this one's
// and each would remove the other's temporaries.
func lockSlice(dst string, i, n int) (*destLock, error) {
	dir := filepath.Join(dst, StateDir)
	name := fmt.Sprintf("worker-%d-of-%d.lock", i, n)
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dst, err)
	}
	if err := lockFile(f, true); err != nil {
		f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("%w: worker %d/%d of %s is already running (%s)", ErrInUse, i, n, dst, owner(dst))
		}
		return nil, fmt.Errorf("lock %s: %w", dst, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		f.Close()
		return nil, err
	}
	suffix := fmt.Sprintf("-of-%d.lock", n)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "worker-") || strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		g, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		err = lockFile(g, false)
		g.Close() // closing releases the probe
		if errors.Is(err, errWouldBlock) {
			unlockFile(f)
			f.Close()
			return nil, fmt.Errorf("%w: %s is being converted by workers of another split (%s); use the same --worker N",
				ErrInUse, dst, strings.TrimSuffix(strings.TrimPrefix(e.Name(), "worker-"), ".lock"))
		}
	}
	return &destLock{f: f}, nil
}

// recordOwner notes this process in StateDir for the error others get.
func recordOwner(dst string) {
	host, _ := os.Hostname()
	os.WriteFile(filepath.Join(dst, StateDir, ownerName), fmt.Appendf(nil, "pid %d on %s\n", os.Getpid(), host), 0o644)
}

// owner describes who holds DST, as recorded.
func owner(dst string) string {
	b, err := os.ReadFile(filepath.Join(dst, StateDir, ownerName))
	if err != nil || len(b) > 256 {
		return "another k3ckpt process"
	}
	return strings.TrimSpace(string(b))
}
