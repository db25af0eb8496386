package convert

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// finalNames are the files Finalize writes, the index first.
var finalNames = []Unit{{Name: safetensors.IndexName}, {Name: ConfigName}, {Name: HFQuantConfigName}, {Name: ManifestName}}

// metaFiles are the configs Finalize writes (besides the index and the manifest).
func metaFiles(config, hfq []byte) map[string][]byte {
	m := map[string][]byte{ConfigName: config}
	if len(hfq) > 0 {
		m[HFQuantConfigName] = hfq
	}
	return m
}

// streamIndex writes the index of the output shards, rebuilt from their
// headers by the codec (no half-million-entry map is built).
func streamIndex(w io.Writer, dst string, shards []string) error {
	_, err := safetensors.WriteShardIndex(w, dst, shards)
	return err
}

// writeIndex writes DST's index atomically and returns its record.
func writeIndex(dst string, shards []string) (FileRecord, error) {
	f, rec, err := stageIndex(dst, func(w io.Writer) error { return streamIndex(w, dst, shards) })
	if err != nil {
		return FileRecord{}, err
	}
	return rec, f.Commit()
}

// stageIndex writes the index that render streams under a temporary name
// and syncs it, leaving the rename to commitIndex; on error nothing is left.
func stageIndex(dst string, render func(io.Writer) error) (*atomicfile.File, FileRecord, error) {
	path := filepath.Join(dst, safetensors.IndexName)
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, FileRecord{}, err
	}
	h := sha256.New()
	err = render(io.MultiWriter(f.File, h)) // the index renderer buffers its writes
	var size int64
	if err == nil {
		size, err = f.Seek(0, io.SeekCurrent) // written sequentially: the position is the size
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Abort()
		return nil, FileRecord{}, fmt.Errorf("index %s: %w", path, err)
	}
	return f, FileRecord{Name: safetensors.IndexName, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// earlyIndex is a whole run's index, written from the plan's layouts while
// the shards are written (it does not depend on their data), so that
// finalizing the run only renames it: the bytes are those writeIndex would
// rebuild from the written headers.
type earlyIndex struct {
	done chan struct{}
	f    *atomicfile.File
	rec  FileRecord
	err  error
}

// stageEarlyIndex starts writing p's index into dst.
func stageEarlyIndex(p *Plan, dst string) *earlyIndex {
	e := &earlyIndex{done: make(chan struct{})}
	names := make([]string, len(p.Files))
	layouts := make([]*safetensors.Layout, len(p.Files))
	for i, f := range p.Files {
		names[i], layouts[i] = f.Name, f.Layout
	}
	go func() {
		defer close(e.done)
		e.f, e.rec, e.err = stageIndex(dst, func(w io.Writer) error {
			_, err := safetensors.WriteLayoutIndex(w, names, layouts)
			return err
		})
	}()
	return e
}

// commit renames the staged index into place and returns its record.
func (e *earlyIndex) commit() (FileRecord, error) {
	<-e.done
	if e.err != nil {
		return FileRecord{}, e.err
	}
	return e.rec, e.f.Commit()
}

// abort removes the staged index (nothing once committed).
func (e *earlyIndex) abort() {
	<-e.done
	if e.f != nil {
		e.f.Abort()
	}
}

// Finalize completes a conversion once every unit has been written (by one
// or many workers): it writes the index, config.json (and
// hf_quant_config.json), then the manifest, and removes StateDir. It holds
// DST's lock, and fails with ErrInUse while another run or a worker runs. It
// checks that each unit has a record of this plan and a file of the recorded
// size; hashes were taken when each file was written (verify re-checks them).
func Finalize(dst string) (*Manifest, error) {
	if _, err := os.Stat(dst); err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	return finalizeLocked(dst, 0)
}

// finalizeLocked takes DST's lock (waiting up to wait) and, when no worker
// still runs, finalizes.
func finalizeLocked(dst string, wait time.Duration) (*Manifest, error) {
	lock, err := acquireDest(dst, wait)
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	defer lock.Release()
	if err := checkNoWorkers(dst); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	return finalize(dst, nil)
}

// unitsDone splits the units of DST's recorded plan into those done (a
// record of this plan and a file of the recorded size) and those missing.
func unitsDone(dst string, st *planState) (done []FileRecord, missing []string, err error) {
	recs, err := loadRecords(dst)
	if err != nil {
		return nil, nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	for _, u := range st.units() {
		if !localName(u) {
			return nil, nil, fmt.Errorf("merge %s: %w: the recorded plan names %q, not a path inside it", dst, ErrDestination, u)
		}
		rec, ok := recs.finished(st.Plan, u, nil)
		if !ok {
			missing = append(missing, u)
			continue
		}
		fi, err := os.Stat(filepath.Join(dst, filepath.FromSlash(u)))
		if err != nil || fi.Size() != rec.Size {
			missing = append(missing, u)
			continue
		}
		done = append(done, rec)
	}
	return done, missing, nil
}

// finalize is Finalize for a caller that holds DST exclusively; a run that
// staged its index early passes it (nil: the index is rebuilt from the
// written headers).
func finalize(dst string, index *earlyIndex) (*Manifest, error) {
	var st planState
	if err := readJSON(filepath.Join(dst, StateDir, stateName), &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if m, merr := ReadManifest(dst); merr == nil {
				return m, nil // already finalized
			}
		}
		return nil, fmt.Errorf("merge %s: no conversion in progress: %w", dst, err)
	}
	m := &Manifest{Version: 1, Plan: st.Plan, Recipe: st.Recipe, Format: st.Format, ScaleFmt: st.ScaleFmt, Experts: st.Experts, Numerics: st.Numerics}
	done, missing, err := unitsDone(dst, &st)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("merge %s: %w: %d of %d files not done (first: %s)", dst, ErrIncomplete, len(missing), len(done)+len(missing), missing[0])
	}
	m.Files = done
	// Temporaries of a finalizer killed earlier (we hold DST, so no other
	// finalizer is writing these now).
	stale := finalNames
	if index != nil {
		stale = stale[1:] // the run removed stale ones before staging its own
	}
	if err := removeOwnTemps(dst, stale); err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	var rec FileRecord
	if index != nil {
		rec, err = index.commit()
	} else {
		rec, err = writeIndex(dst, st.Shards)
	}
	if err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	m.Files = append(m.Files, rec)
	for name, b := range metaFiles([]byte(st.Config), []byte(st.HFQuantConfig)) {
		if err := atomicfile.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			return nil, fmt.Errorf("merge %s: %w", dst, err)
		}
		sum := sha256.Sum256(b)
		m.Files = append(m.Files, FileRecord{Name: name, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])})
	}
	slices.SortFunc(m.Files, func(a, b FileRecord) int { return cmp.Compare(a.Name, b.Name) })
	if err := writeJSON(filepath.Join(dst, ManifestName), m); err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	if err := os.RemoveAll(filepath.Join(dst, StateDir)); err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	if err := atomicfile.SyncDir(dst); err != nil {
		return nil, err
	}
	return ReadManifest(dst)
}
