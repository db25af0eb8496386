// Package atomicfile writes files so that a final name only ever holds a
// complete, synced file: bytes go to a temporary in the same directory, which is
// fsynced and renamed over the final name, and the directory is synced after.
// A crash leaves at most a temporary (named with TempPrefix) behind, never a
// partial file under the final name.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TempPrefix starts the name of every temporary, so that cleanup and resume can
// recognise (and remove) leftovers of a killed run.
const TempPrefix = ".k3tmp-"

// DefaultPerm is the mode of files made by Create: readable by all, like a
// file made by cp, rather than CreateTemp's private 0600.
const DefaultPerm = 0o644

// File is a file being written under a temporary name.
type File struct {
	*os.File
	final string
	done  bool
}

// Create opens a new temporary for the final path.
func Create(path string) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempPrefix+base+"-*")
	if err != nil {
		return nil, err
	}
	// CreateTemp makes 0600 files; a checkpoint is meant to be shared.
	if err := f.Chmod(DefaultPerm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{File: f, final: path}, nil
}

// Final is the name the file gets on Commit.
func (f *File) Final() string { return f.final }

// Commit syncs the temporary, renames it to the final name and syncs the
// directory. On failure the temporary is removed.
func (f *File) Commit() error { return f.commit(true) }

// CommitNoSync renames the temporary into place without fsync: for small
// records whose loss in a power failure only means redoing some work, never a
// partial file under the final name.
func (f *File) CommitNoSync() error { return f.commit(false) }

// fsync and syncDir are the two syncs of a Commit (tests count them).
var (
	fsync   = (*os.File).Sync
	syncDir = SyncDir
)

func (f *File) commit(durable bool) error {
	if f.done {
		return errors.New("atomicfile: already committed or aborted")
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

// Abort closes and removes the temporary. It is safe to call after Commit (a
// no-op then), so callers can defer it.
func (f *File) Abort() error {
	if f.done {
		return nil
	}
	f.done = true
	tmp := f.File.Name()
	f.File.Close()
	return os.Remove(tmp)
}

// WriteFile writes data to path atomically.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := Create(path)
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
