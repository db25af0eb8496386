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
	path := filepath.Join(dst, safetensors.IndexName)
	f, err := atomicfile.Create(path)
	if err != nil {
		return FileRecord{}, err
	}
	defer f.Abort()
	h := sha256.New()
	if err := streamIndex(io.MultiWriter(f.File, h), dst, shards); err != nil {
		return FileRecord{}, fmt.Errorf("index %s: %w", path, err)
	}
	size, err := f.Seek(0, io.SeekCurrent) // written sequentially: the position is the size
	if err != nil {
		return FileRecord{}, err
	}
	if err := f.Commit(); err != nil {
		return FileRecord{}, err
	}
	return FileRecord{Name: safetensors.IndexName, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
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
	return finalize(dst)
}

// finalize is Finalize for a caller that holds DST exclusively.
func finalize(dst string) (*Manifest, error) {
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
	recs, err := loadRecords(dst)
	if err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	var missing []string
	units := st.units()
	for _, u := range units {
		if !localName(u) {
			return nil, fmt.Errorf("merge %s: %w: the recorded plan names %q, not a path inside it", dst, ErrDestination, u)
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
		m.Files = append(m.Files, rec)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("merge %s: %w: %d of %d files not done (first: %s)", dst, ErrIncomplete, len(missing), len(units), missing[0])
	}
	// Temporaries of a finalizer killed earlier (we hold DST, so no other
	// finalizer is writing these now).
	stale := []Unit{{Name: safetensors.IndexName}, {Name: ConfigName}, {Name: HFQuantConfigName}, {Name: ManifestName}}
	if err := removeOwnTemps(dst, stale); err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	rec, err := writeIndex(dst, st.Shards)
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
