package convert

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// StateDir is the directory inside DST that holds a conversion in progress:
// the plan every worker agreed on and one record per finished file. Finalize
// removes it once the manifest is written.
const StateDir = ".k3ckpt"

const (
	lockName    = "lock"
	stateName   = "plan.json"
	doneDir     = "done"
	recordExt   = ".json"
	hashBufSize = 1 << 20
	// MaxStateFile bounds state and manifest files read back (the full K3
	// plan state, with its index, is about 50 MB).
	MaxStateFile = 1 << 30
)

// FileRecord is the size and sha256 of one finished output file.
type FileRecord struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// doneRecord is FileRecord plus the plan it belongs to.
type doneRecord struct {
	Plan string `json:"plan"`
	FileRecord
}

// Manifest lists every output file with its size and sha256; written last.
type Manifest struct {
	Version  int          `json:"version"`
	Plan     string       `json:"plan"`
	Recipe   string       `json:"recipe"`
	Format   Format       `json:"format"`
	ScaleFmt string       `json:"scale_fmt"`
	Files    []FileRecord `json:"files"`

	byName map[string]int
}

// planState is what a worker leaves in StateDir so that merge (which never
// sees the source) can write the configs and manifest; the index is rebuilt
// from the finished shards' headers.
type planState struct {
	Version       string   `json:"version"`
	Plan          string   `json:"plan"`
	Recipe        string   `json:"recipe"`
	Format        Format   `json:"format"`
	ScaleFmt      string   `json:"scale_fmt"`
	Shards        []string `json:"shards"`
	Aux           []string `json:"aux"`
	Config        string   `json:"config"`
	HFQuantConfig string   `json:"hf_quant_config,omitempty"`
}

func (p *Plan) state() *planState {
	s := &planState{
		Version: planVersion, Plan: p.ID, Recipe: p.Recipe.Name, Format: p.Options.Format,
		ScaleFmt: p.Options.ScaleFmt.String(), Config: string(p.Config), HFQuantConfig: string(p.HFQuantConfig),
		Shards: []string{}, Aux: []string{},
	}
	for _, f := range p.Files {
		s.Shards = append(s.Shards, f.Name)
	}
	for _, a := range p.Aux {
		s.Aux = append(s.Aux, a.Name)
	}
	return s
}

func (s *planState) units() []string { return slices.Concat(s.Shards, s.Aux) }

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

func recordPath(dst, unit string) string {
	return filepath.Join(dst, StateDir, doneDir, url.PathEscape(unit)+recordExt)
}

func readJSON(path string, v any) error {
	f, err := fsx.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxStateFile+1))
	if err != nil {
		return err
	}
	if len(b) > MaxStateFile {
		return fmt.Errorf("%s: over %d bytes", path, MaxStateFile)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), 0o644)
}

// writeRecord records a finished file. It is renamed into place (never seen
// partial) but not synced: a record lost with a power failure only makes
// resume redo its file, and its file was synced before it was written.
func writeRecord(dst string, r doneRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path := recordPath(dst, r.Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := atomicfile.Create(path)
	if err != nil {
		return fmt.Errorf("record %s: %w", r.Name, err)
	}
	defer f.Abort()
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("record %s: %w", r.Name, err)
	}
	if err := f.CommitNoSync(); err != nil {
		return fmt.Errorf("record %s: %w", r.Name, err)
	}
	return nil
}

// ReadManifest reads DST's manifest (ErrNotExist wrapped when absent).
func ReadManifest(dst string) (*Manifest, error) {
	var m Manifest
	if err := readJSON(filepath.Join(dst, ManifestName), &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	m.byName = make(map[string]int, len(m.Files))
	for i, f := range m.Files {
		m.byName[f.Name] = i
	}
	return &m, nil
}

// Lookup finds a file's record.
func (m *Manifest) Lookup(name string) (FileRecord, bool) {
	i, ok := m.byName[name]
	if !ok {
		return FileRecord{}, false
	}
	return m.Files[i], true
}

// hashWindow is how much of a file hashFile maps at once: hashing reads the
// page cache in place (no copy into a buffer, which on a memory-bound machine
// costs as much as the hash), and unmapping each window keeps the resident
// set bounded whatever the file's size.
const hashWindow = 4 << 20

// hashFile returns a file's size and sha256, counting bytes into progress.
// buf is used when the file cannot be mapped.
func hashFile(path string, buf []byte, progress func(int64)) (FileRecord, error) {
	f, err := fsx.Open(path)
	if err != nil {
		return FileRecord{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return FileRecord{}, err
	}
	h := sha256.New()
	size := fi.Size()
	for off := int64(0); off < size; off += hashWindow {
		n := int(min(hashWindow, size-off))
		m, err := unix.Mmap(int(f.Fd()), off, n, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			if buf == nil {
				buf = make([]byte, hashBufSize)
			}
			return hashRead(f, off, h, buf, progress)
		}
		unix.Madvise(m, unix.MADV_SEQUENTIAL)
		h.Write(m)
		unix.Munmap(m)
		if progress != nil {
			progress(int64(n))
		}
	}
	return FileRecord{Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// hashRead finishes a hash with read(2) from off.
func hashRead(f *os.File, off int64, h hash.Hash, buf []byte, progress func(int64)) (FileRecord, error) {
	n := off
	for {
		m, err := f.ReadAt(buf, n)
		if m > 0 {
			h.Write(buf[:m])
			n += int64(m)
			if progress != nil {
				progress(int64(m))
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return FileRecord{}, fmt.Errorf("hash %s: %w", f.Name(), err)
		}
	}
	return FileRecord{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// prepareDest checks that DST can receive this plan before any byte is
// written: not the source directory, and empty or holding this same
// conversion (in progress or finished). Then it records the plan.
func prepareDest(p *Plan, dst string) error {
	if same, err := sameDir(p.SrcRoot, dst); err != nil {
		return err
	} else if same {
		return fmt.Errorf("%w: %s", ErrSameDir, dst)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	var st planState
	err := readJSON(filepath.Join(dst, StateDir, stateName), &st)
	switch {
	case err == nil:
		if st.Plan != p.ID {
			return fmt.Errorf("%w: %s is converting plan %.12s (recipe %s, format %s, scale %s), this is plan %.12s; use another destination",
				ErrDestination, dst, st.Plan, st.Recipe, st.Format, st.ScaleFmt, p.ID)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %v", ErrDestination, err)
	}
	m, err := ReadManifest(dst)
	switch {
	case err == nil:
		if m.Plan != p.ID {
			return fmt.Errorf("%w: %s holds a finished conversion of plan %.12s (recipe %s, format %s, scale %s), this is plan %.12s; use another destination",
				ErrDestination, dst, m.Plan, m.Recipe, m.Format, m.ScaleFmt, p.ID)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %v", ErrDestination, err)
	default:
		ents, err := os.ReadDir(dst)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), atomicfile.TempPrefix) && e.Name() != StateDir {
				return fmt.Errorf("%w: %s is not empty (%s) and holds no k3ckpt conversion", ErrDestination, dst, e.Name())
			}
		}
	}
	return writeJSON(filepath.Join(dst, StateDir, stateName), p.state())
}

// sameDir reports whether a and b name the same directory (b may not exist).
func sameDir(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}

// removeOwnTemps deletes leftovers of a killed run for these units only:
// other workers may be writing their own temporaries in the same directory.
func removeOwnTemps(dst string, units []Unit) error {
	for _, u := range units {
		dir, base := filepath.Split(filepath.Join(dst, filepath.FromSlash(u.Name)))
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), atomicfile.TempPrefix+base+"-") {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
	}
	return nil
}

// finishedRecord returns the record of a unit finished under this plan, from
// its done record or from a finished conversion's manifest.
func finishedRecord(dst, plan, unit string, m *Manifest) (FileRecord, bool) {
	var r doneRecord
	if err := readJSON(recordPath(dst, unit), &r); err == nil && r.Plan == plan && r.Name == unit {
		return r.FileRecord, true
	}
	if m != nil && m.Plan == plan {
		return m.Lookup(unit)
	}
	return FileRecord{}, false
}

// Finalize completes a conversion once every unit has been written (by one
// or many workers): it writes the index, config.json (and
// hf_quant_config.json), then the manifest, and removes StateDir. It checks
// that each unit has a record of this plan and a file of the recorded size;
// hashes were taken when each file was written (verify re-checks them).
func Finalize(dst string) (*Manifest, error) {
	// One finalizer at a time (the last workers may finish together); the
	// lock dies with its process, so a killed merge never blocks the next.
	lock, err := os.OpenFile(filepath.Join(dst, StateDir, lockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err == nil {
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			return nil, fmt.Errorf("merge %s: lock: %w", dst, err)
		}
	}
	var st planState
	if err := readJSON(filepath.Join(dst, StateDir, stateName), &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if m, merr := ReadManifest(dst); merr == nil {
				return m, nil // already finalized
			}
		}
		return nil, fmt.Errorf("merge %s: no conversion in progress: %w", dst, err)
	}
	m := &Manifest{Version: 1, Plan: st.Plan, Recipe: st.Recipe, Format: st.Format, ScaleFmt: st.ScaleFmt}
	var missing []string
	units := st.units()
	for _, u := range units {
		rec, ok := finishedRecord(dst, st.Plan, u, nil)
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
	// Temporaries of a finalizer killed earlier (we hold the lock, so no
	// other finalizer is writing these now).
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

// allDone reports whether every unit of the state in DST has a record.
func allDone(dst string, p *Plan) bool {
	for _, u := range p.Units() {
		if _, ok := finishedRecord(dst, p.ID, u.Name, nil); !ok {
			return false
		}
	}
	return true
}
