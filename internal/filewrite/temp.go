package filewrite

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// TempPrefix starts the name of every temporary, so that cleanup and resume
// can recognise leftovers of a killed run.
const TempPrefix = ".k3tmp-"

// defaultPerm is the most a file made by CreateTemp may be readable: by all,
// like cp's, not os.CreateTemp's 0600. The umask and LimitPerm take from it.
const defaultPerm = 0o644

// limit caps the permission bits of the files CreateTemp makes (LimitPerm).
var limit atomic.Uint32

func init() { limit.Store(uint32(defaultPerm)) }

// LimitPerm caps the permission bits of every file CreateTemp and WriteFile
// make from now on in this process at m (0o644 at most), and returns how to
// restore the cap it replaced: no output is more readable than its source.
func LimitPerm(m os.FileMode) (restore func()) {
	old := limit.Swap(uint32(m.Perm() & defaultPerm))
	return func() { limit.Store(old) }
}

// Temp is a file being written under a temporary name in its final name's
// directory, synced and renamed over the final name, so that a crash leaves
// at most a temporary behind, never a partial file. Callers that write at
// arbitrary offsets use one directly.
type Temp struct {
	*os.File
	final string
	perm  os.FileMode // the bits it was created with, umask and limit applied
	done  bool
}

// CreateTemp opens a new temporary for the final path, with defaultPerm less
// the umask and the LimitPerm cap.
func CreateTemp(path string) (*Temp, error) {
	dir, base := filepath.Split(path) // Join of "" and the name is the name in "."
	perm := os.FileMode(limit.Load())
	for range 100 {
		name := filepath.Join(dir, TempPrefix+base+"-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			os.Remove(name)
			return nil, err
		}
		return &Temp{File: f, final: path, perm: st.Mode().Perm()}, nil
	}
	return nil, fmt.Errorf("create a temporary for %s: too many names taken", path)
}

// Chmod sets the file's permission bits to m, within those it was created
// with (never past the umask and LimitPerm); execute bits are kept where the
// matching read bit is.
func (f *Temp) Chmod(m os.FileMode) error {
	allowed := f.perm | (f.perm&0o444)>>2
	return f.File.Chmod(m.Perm() & allowed)
}

// Commit syncs the temporary, renames it to the final name and syncs the
// directory. On failure the temporary is removed.
func (f *Temp) Commit() error { return f.commit(true) }

// CommitNoSync renames the temporary into place without fsync: for small
// records whose loss in a power failure only means redoing some work.
func (f *Temp) CommitNoSync() error { return f.commit(false) }

// fsync and syncDir are the two syncs of a Commit (tests count them).
var (
	fsync   = (*os.File).Sync
	syncDir = SyncDir
)

// SyncDir fsyncs a directory so that a rename inside it is durable (a no-op
// where the system cannot: see syncDirectory).
func SyncDir(dir string) error { return syncDirectory(dir) }

func (f *Temp) commit(durable bool) error {
	if f.done {
		return fmt.Errorf("commit %s: already committed or aborted", f.final)
	}
	f.done = true
	tmp := f.File.Name()
	if durable {
		if err := fsync(f.File); err != nil {
			f.File.Close()
			os.Remove(tmp)
			return fmt.Errorf("sync %s: %w", f.final, err)
		}
	}
	if err := f.File.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("close %s: %w", f.final, err)
	}
	if err := os.Rename(tmp, f.final); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s: %w", f.final, err)
	}
	if !durable {
		return nil
	}
	return syncDir(filepath.Dir(f.final))
}

// Abort closes and removes the temporary; after Commit it does nothing.
func (f *Temp) Abort() error {
	if f.done {
		return nil
	}
	f.done = true
	tmp := f.File.Name()
	f.File.Close()
	return os.Remove(tmp)
}

// WriteFile writes data to path through a Temp: temporary, fsync, rename,
// directory fsync.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := CreateTemp(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	return f.Commit()
}

// RemoveTemps deletes leftovers of killed runs in dir (non-recursive) and
// returns how many it removed.
func RemoveTemps(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}
