package convert

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// finalNames are the files Finalize writes, the index first.
var finalNames = []unit{{Name: safetensors.IndexName}, {Name: model.ConfigName}, {Name: HFQuantConfigName}, {Name: ReportName}, {Name: ManifestName}}

// metaFiles are the configs Finalize writes (besides the index and the manifest).
func metaFiles(config, hfq []byte) map[string][]byte {
	m := map[string][]byte{model.ConfigName: config}
	if len(hfq) > 0 {
		m[HFQuantConfigName] = hfq
	}
	return m
}

// streamIndex writes the index of the output shards, streamed from their headers.
func streamIndex(w io.Writer, dst string, shards []string) error {
	_, err := safetensors.WriteShardIndex(w, dst, shards)
	return err
}

// stageFile is stage for a file of known bytes.
func stageFile(path string, data []byte) (*filewrite.Temp, fileRecord, error) {
	return stage(path, "write", func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// stage writes what render streams under a temporary name for path, hashing
// and syncing it, and leaves the rename to the caller; on error nothing is
// left and the error names what (e.g. "index") and path.
func stage(path, what string, render func(io.Writer) error) (*filewrite.Temp, fileRecord, error) {
	f, err := filewrite.CreateTemp(path)
	if err != nil {
		return nil, fileRecord{}, err
	}
	h := sha256.New()
	err = render(io.MultiWriter(f.File, h))
	var size int64
	if err == nil {
		size, err = f.Seek(0, io.SeekCurrent) // written sequentially: the position is the size
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Abort()
		return nil, fileRecord{}, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return f, fileRecord{Name: filepath.Base(path), Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// earlyFiles are an index and configs staged under temporary names, so that
// finalizing only renames them: a whole run's, staged while the shards are
// written (none depends on their data), or a merge's.
type earlyFiles struct {
	d     *destination
	done  chan struct{}
	files []*filewrite.Temp // the index first
	recs  []fileRecord
	err   error
}

// stageEarly starts writing p's index and configs into DST (a bucket DST's
// into its state directory, uploaded on commit).
func stageEarly(p *Plan, d *destination) *earlyFiles {
	return stageFiles(d, plannedIndex(p), metaFiles(p.Config, p.HFQuantConfig))
}

// stageFiles starts writing the index render streams and the configs meta.
func stageFiles(d *destination, render func(io.Writer) error, meta map[string][]byte) *earlyFiles {
	e := &earlyFiles{d: d, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		e.err = e.add(stage(filepath.Join(d.dir, safetensors.IndexName), "index", render))
		for _, name := range slices.Sorted(maps.Keys(meta)) {
			if e.err == nil {
				e.err = e.add(stageFile(filepath.Join(d.dir, name), meta[name]))
			}
		}
	}()
	return e
}

func (e *earlyFiles) add(f *filewrite.Temp, rec fileRecord, err error) error {
	if err == nil {
		e.files, e.recs = append(e.files, f), append(e.recs, rec)
	}
	return err
}

// commit renames the staged files into place, the index first, durably, and
// returns their records.
func (e *earlyFiles) commit() ([]fileRecord, error) {
	<-e.done
	if e.err != nil {
		return nil, e.err
	}
	if e.d.remote() {
		for i, f := range e.files {
			if err := e.d.obj.PutFile(e.recs[i].Name, f.File); err != nil {
				return nil, err
			}
		}
		e.abort() // the local copies
		return e.recs, nil
	}
	for _, f := range e.files {
		// Synced when staged: one directory sync below covers the renames.
		if err := f.CommitNoSync(); err != nil {
			return nil, err
		}
	}
	if err := filewrite.SyncDir(e.d.dir); err != nil {
		return nil, err
	}
	return e.recs, nil
}

// abort removes the staged files (nothing once committed).
func (e *earlyFiles) abort() {
	<-e.done
	for _, f := range e.files {
		f.Abort()
	}
}

// Finalize completes a conversion once every unit has been written (by one or
// many workers): it writes the index and configs, then the manifest, and
// removes the state, holding DST's lock (errInUse while another run or a
// worker runs). Each unit needs a record of this plan and a file of the
// recorded size. A bucket DST is finalized from its state directory
// (stateRoot; "": the default one).
func Finalize(dst, stateRoot string) (*dstManifest, error) {
	d, err := openDestination(context.Background(), dst, stateRoot, 0)
	if err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	if _, err := os.Stat(d.dir); err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	return finalizeLocked(d, 0)
}

// finalizeLocked takes DST's lock (waiting up to wait) and, when no worker
// still runs, finalizes from the plan state and done records in DST.
func finalizeLocked(d *destination, wait time.Duration) (*dstManifest, error) {
	dst := d.dir
	lock, err := acquireDest(dst, wait)
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	defer lock.Release()
	if err := checkNoWorkers(dst); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	var st planState
	if err := readJSON(filepath.Join(dst, stateDir, stateName), &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if m, merr := d.readManifest(); merr == nil {
				return m, nil // already finalized
			}
		}
		return nil, fmt.Errorf("merge %s: no conversion in progress: %w", d.name, err)
	}
	if err := d.claim(); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	recs, err := loadRecords(dst)
	if err != nil {
		return nil, fmt.Errorf("merge %s: %w", d.name, err)
	}
	return finalize(d, &st, recs, nil)
}

// unitsDone splits the units of DST's recorded plan into those done (a
// record of this plan and a file of the recorded size) and those missing.
func unitsDone(d *destination, st *planState, recs records) (done []fileRecord, missing []string, err error) {
	for _, u := range slices.Concat(st.Shards, st.Aux) {
		if !localName(u) {
			return nil, nil, fmt.Errorf("merge %s: %w: the recorded plan names %q, not a path inside it", d.name, ErrDestination, u)
		}
		rec, ok := recs.finished(st.Plan, u, nil)
		if !ok {
			missing = append(missing, u)
			continue
		}
		ok, err := d.present(u, rec.Size, recs[u].ETag)
		if err != nil {
			return nil, nil, fmt.Errorf("merge %s: %w", d.name, err)
		}
		if !ok {
			missing = append(missing, u)
			continue
		}
		done = append(done, rec)
	}
	return done, missing, nil
}

// finalize is Finalize for a caller that holds DST exclusively, with its plan
// state st and done records recs: a whole run's from memory, with the files
// it staged early; a merge's as read from DST, staging them now.
func finalize(d *destination, st *planState, recs records, early *earlyFiles) (*dstManifest, error) {
	dst := d.dir
	m := &dstManifest{Version: 1, madeWith: st.madeWith}
	for _, v := range st.Sources {
		if v.ETag == "" {
			m.SourceUnverified = append(m.SourceUnverified, v.Name)
		}
	}
	done, missing, err := unitsDone(d, st, recs)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("merge %s: %w: %d of %d files not done (first: %s)", d.name, ErrIncomplete, len(missing), len(done)+len(missing), missing[0])
	}
	if early == nil {
		// A killed finalizer's temporaries (a whole run removed them at its start).
		if err := removeOwnTemps(dst, finalNames); err != nil {
			return nil, fmt.Errorf("merge %s: %w", dst, err)
		}
		early = stageFiles(d, mergedIndex(d, st), metaFiles([]byte(st.Config), []byte(st.HFQuantConfig)))
		defer early.abort()
	}
	staged, err := early.commit()
	if err != nil {
		return nil, fmt.Errorf("merge %s: %w", d.name, err)
	}
	m.Files = slices.Concat(done, staged)
	if st.Report {
		rec, err := writeReport(dst, st.Shards, done) // a bucket's: staged in its state directory
		if err == nil && d.remote() {
			err = d.obj.PutLocal(ReportName, filepath.Join(dst, ReportName))
		}
		if err != nil {
			return nil, fmt.Errorf("merge %s: %w", d.name, err)
		}
		m.Files = append(m.Files, rec)
	}
	slices.SortFunc(m.Files, func(a, b fileRecord) int { return cmp.Compare(a.Name, b.Name) })
	if err := d.writeManifest(m); err != nil {
		return nil, fmt.Errorf("merge %s: %w", d.name, err)
	}
	if err := d.unclaim(); err != nil {
		return nil, fmt.Errorf("merge %s: %w", d.name, err)
	}
	if err := os.RemoveAll(filepath.Join(dst, stateDir)); err != nil {
		return nil, fmt.Errorf("merge %s: %w", d.name, err)
	}
	if err := filewrite.SyncDir(dst); err != nil {
		return nil, err
	}
	if err := m.index(d.path(ManifestName)); err != nil {
		return nil, err
	}
	return m, nil
}

// mergedIndex renders a merge's index: rebuilt from the written shards'
// headers, or a bucket's from the planned index its workers staged.
func mergedIndex(d *destination, st *planState) func(io.Writer) error {
	if !d.remote() {
		return func(w io.Writer) error { return streamIndex(w, d.dir, st.Shards) }
	}
	return func(w io.Writer) error {
		f, err := os.Open(filepath.Join(d.dir, stateDir, safetensors.IndexName))
		if err != nil {
			return fmt.Errorf("the index its workers staged: %w", err)
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	}
}

// plannedIndex renders p's index from the planned layouts: the bytes a merge
// rebuilds from the written headers.
func plannedIndex(p *Plan) func(io.Writer) error {
	names := make([]string, len(p.Files))
	layouts := make([]*safetensors.FilePlan, len(p.Files))
	for i, f := range p.Files {
		names[i], layouts[i] = f.Name, f.Layout
	}
	return func(w io.Writer) error {
		_, err := safetensors.WriteFilePlanIndex(w, names, layouts)
		return err
	}
}

// mergeStatus is what merge would do to DST now, found without writing or
// locking anything (k3ckpt merge --dry-run): workers may still be running.
type mergeStatus struct {
	Dst  string `json:"dst"`
	Plan string `json:"plan"`
	// Finalized: DST holds a finished conversion (a manifest, no state).
	Finalized bool `json:"finalized"`
	// Done and Missing split the plan's files (shards and side files).
	Done    []string `json:"done"`
	Missing []string `json:"missing"`
	// Running names a worker slice whose lock is held ("" when none).
	Running string `json:"running,omitempty"`
	// Writes are the files merge would write, in order, once nothing is
	// missing or running.
	Writes []string `json:"writes"`
	// Ready: merge would finalize DST now.
	Ready bool `json:"-"`
}

// StatusOfMerge reports what Finalize would do to DST (a bucket DST's state
// in stateRoot, "" for the default), changing nothing.
func StatusOfMerge(dst, stateRoot string) (*mergeStatus, error) {
	d, err := openDestination(context.Background(), dst, stateRoot, 0)
	if err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	var st planState
	if err := readJSON(filepath.Join(d.dir, stateDir, stateName), &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if m, merr := d.readManifest(); merr == nil {
				s := &mergeStatus{Dst: dst, Plan: m.Plan, Finalized: true, Done: []string{}, Missing: []string{}, Writes: []string{}}
				for _, f := range m.Files {
					s.Done = append(s.Done, f.Name)
				}
				return s, nil
			}
		}
		return nil, fmt.Errorf("merge %s: no conversion in progress: %w", dst, err)
	}
	recs, err := loadRecords(d.dir)
	if err != nil {
		return nil, fmt.Errorf("merge %s: %w", dst, err)
	}
	done, missing, err := unitsDone(d, &st, recs)
	if err != nil {
		return nil, err
	}
	s := &mergeStatus{Dst: dst, Plan: st.Plan, Done: []string{}, Missing: append([]string{}, missing...), Running: heldSlices(d.dir, "")}
	for _, r := range done {
		s.Done = append(s.Done, r.Name)
	}
	skip := map[string]bool{HFQuantConfigName: st.HFQuantConfig == "", ReportName: !st.Report}
	for _, u := range finalNames {
		if !skip[u.Name] {
			s.Writes = append(s.Writes, u.Name)
		}
	}
	s.Ready = len(s.Missing) == 0 && s.Running == ""
	return s, nil
}

// String says it in a sentence or two.
func (s *mergeStatus) String() string {
	if s.Finalized {
		return fmt.Sprintf("%s is a finished conversion (plan %.12s): merge has nothing to do", s.Dst, s.Plan)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (plan %.12s): %d of %d files done", s.Dst, s.Plan, len(s.Done), len(s.Done)+len(s.Missing))
	if len(s.Missing) > 0 {
		fmt.Fprintf(&b, "; missing: %s", strings.Join(s.Missing[:min(5, len(s.Missing))], ", "))
		if len(s.Missing) > 5 {
			fmt.Fprintf(&b, " and %d more", len(s.Missing)-5)
		}
	}
	if s.Running != "" {
		fmt.Fprintf(&b, "; worker %s is still running", s.Running)
	}
	if s.Ready {
		fmt.Fprintf(&b, "\nmerge would write %s", strings.Join(s.Writes, ", "))
	} else {
		b.WriteString("\nmerge would refuse until every file is done and no worker runs")
	}
	return b.String()
}
