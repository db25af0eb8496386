package layout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/k3ckpt/k3ckpt/internal/atomicfile"
	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// markerName is the file an output directory holds while a run writes it:
// the fingerprint of the plan being written. It starts with a dot, so no
// reader of the directory takes it for a side file.
const markerName = ".k3ckpt-partial"

// dirRun is the state of one output directory during Execute.
type dirRun struct {
	d          *DirPlan
	dir        string
	todo       []*outFile // files still to write
	left       atomic.Int32
	completion []byte // layout.json (export) or the index (reassembly)
	finished   bool
	cleaned    int
	changed    int // files committed earlier, modified since, written again

	mu     sync.Mutex   // guards stamps once writers run
	stamps *stampRecord // the files committed, for the record
}

func (dr *dirRun) completionName() string {
	if dr.d.man != nil {
		return manifestName
	}
	return safetensors.IndexName
}

// prepareDir makes an output directory ready and says what is left to write:
//   - absent or empty: everything;
//   - restart: its entries are removed first (subdirectories only when they
//     hold nothing but the plan's side files);
//   - holding the run marker of this very plan (a killed run): temporaries are
//     removed; a file is kept when its size and header are the plan's and its
//     stamp is the one recorded when it was committed (stampsName), else
//     written again;
//   - this plan's finished output (no marker, its record of committed files
//     is this plan's): nothing when the completion record, the side files
//     and every file are as planned and as committed; else resumed as above,
//     writing again what changed since;
//   - anything else (another plan's marker, record or files) is refused.
func prepareDir(p *Plan, d *DirPlan, dir string, restart bool) (*dirRun, error) {
	dr := &dirRun{d: d, dir: dir}
	var err error
	if d.man != nil {
		dr.completion, err = d.man.marshal()
	} else {
		dr.completion, err = d.indexBytes()
	}
	if err != nil {
		return nil, err
	}
	fp := fingerprint(p, d, dr.completion)
	dr.stamps = &stampRecord{Plan: fp, Files: map[string]fsx.Stamp{}}
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		ents = nil
	case err != nil:
		return nil, err
	}
	if restart && len(ents) > 0 {
		if err := emptyDir(dir, ents, d.side); err != nil {
			return nil, err
		}
		ents = nil
	}
	if n, err := atomicfile.RemoveTemps(dir); err != nil {
		return nil, err
	} else {
		dr.cleaned = n
	}
	rec, err := readStamps(dir)
	if err != nil {
		return nil, err
	}
	if rec != nil && rec.Plan != fp {
		rec = nil
	}
	marker, err := os.ReadFile(filepath.Join(dir, markerName))
	switch {
	case err == nil:
		if string(marker) != fp {
			return nil, fmt.Errorf("%w: %s holds an unfinished run of a different plan (source, layout or options changed); pass --restart to discard it", ErrOutputExists, dir)
		}
		return dr, dr.keepDone(rec)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	left := 0
	for _, e := range ents {
		if !transient(e.Name()) {
			left++
		}
	}
	if left > 0 {
		if rec == nil {
			if dr.completionMatches() {
				return nil, fmt.Errorf("%w: %s holds this plan's output but no record of its files as committed (%s), so they cannot be checked without reading them all; pass --restart to write it again", ErrOutputExists, dir, stampsName)
			}
			return nil, fmt.Errorf("%w: %s holds %d entries that are not a run of this plan (remove them or pass --restart)", ErrOutputExists, dir, left)
		}
		if dr.complete(rec) {
			dr.finished = true
			return dr, nil
		}
		// This plan's finished output, changed since: resume it.
		if err := atomicfile.WriteFile(filepath.Join(dir, markerName), []byte(fp), 0o644); err != nil {
			return nil, err
		}
		return dr, dr.keepDone(rec)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, markerName), []byte(fp), 0o644); err != nil {
		return nil, err
	}
	dr.todo = d.files
	return dr, nil
}

// transient reports the entries of an output directory that no plan writes:
// temporaries of a killed run and DST's lock.
func transient(name string) bool { return isTemp(name) || name == dirlock.LockName }

func isTemp(name string) bool {
	return len(name) >= len(atomicfile.TempPrefix) && name[:len(atomicfile.TempPrefix)] == atomicfile.TempPrefix
}

// emptyDir removes the entries of dir, refusing to touch a subdirectory
// unless it holds nothing but side files of the plan (a checkpoint's
// subfolders, carried over) and temporaries.
func emptyDir(dir string, ents []os.DirEntry, side map[string][]byte) error {
	for _, e := range ents {
		if e.IsDir() && !onlySideFiles(dir, e.Name(), side) {
			return fmt.Errorf("%w: %s holds a directory %s with files this plan does not write; not touching it", ErrOutputExists, dir, e.Name())
		}
	}
	for _, e := range ents {
		if e.Name() == dirlock.LockName {
			continue
		}
		rm := os.Remove
		if e.IsDir() {
			rm = os.RemoveAll
		}
		if err := rm(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// onlySideFiles reports whether the subdirectory sub of dir holds only
// planned side files and temporaries.
func onlySideFiles(dir, sub string, side map[string][]byte) bool {
	ok := true
	err := filepath.WalkDir(filepath.Join(dir, sub), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if _, planned := side[filepath.ToSlash(rel)]; !planned && !isTemp(d.Name()) {
			ok = false
			return filepath.SkipAll
		}
		return nil
	})
	return ok && err == nil
}

// keepDone keeps the files of an earlier run that are as planned and as
// committed (rec), queues the others (removing any that are there), and
// writes the record of the kept ones.
func (dr *dirRun) keepDone(rec *stampRecord) error {
	for _, of := range dr.d.files {
		path := filepath.Join(dr.dir, of.name)
		ok, now, err := matchesPlan(path, of)
		if err != nil {
			return err
		}
		if ok && committed(rec, of.name, now) {
			dr.stamps.Files[of.name] = now
			continue
		}
		if ok && rec != nil && rec.Files[of.name] != (fsx.Stamp{}) {
			dr.changed++
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		dr.todo = append(dr.todo, of)
	}
	return dr.writeStamps()
}

// completionMatches reports whether the directory holds the plan's
// completion record byte for byte.
func (dr *dirRun) completionMatches() bool {
	b, err := fsx.ReadFile(filepath.Join(dr.dir, dr.completionName()), int64(len(dr.completion)))
	return err == nil && bytes.Equal(b, dr.completion)
}

// complete reports whether the directory already holds the finished plan:
// its completion record and side files byte for byte, and every file as
// planned and as committed.
func (dr *dirRun) complete(rec *stampRecord) bool {
	if !dr.completionMatches() {
		return false
	}
	for _, of := range dr.d.files {
		ok, now, err := matchesPlan(filepath.Join(dr.dir, of.name), of)
		if err != nil || !ok || !committed(rec, of.name, now) {
			return false
		}
	}
	for name, want := range dr.d.side {
		b, err := fsx.ReadFile(filepath.Join(dr.dir, filepath.FromSlash(name)), int64(len(want)))
		if err != nil || !bytes.Equal(b, want) {
			return false
		}
	}
	return true
}

// matchesPlan reports whether path is a regular file of the planned size
// whose header is the planned header, and returns its stamp. Files reach
// their final name only complete (atomically), so this tells a finished
// file from a missing one; the stamp tells whether it changed since.
func matchesPlan(path string, of *outFile) (bool, fsx.Stamp, error) {
	f, err := fsx.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, fsx.Stamp{}, nil
	}
	if err != nil {
		return false, fsx.Stamp{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, fsx.Stamp{}, err
	}
	if st.Size() != of.lay.Size {
		return false, fsx.Stamp{}, nil
	}
	hdr := make([]byte, len(of.lay.Header))
	if _, err := io.ReadFull(f, hdr); err != nil {
		return false, fsx.Stamp{}, nil
	}
	return bytes.Equal(hdr, of.lay.Header), fsx.StampOf(st), nil
}

// fingerprint identifies what a directory's run writes: the completion
// record, every file's name and header, and the source files as opened
// (name, size, modification time), so a rerun after the source changed does
// not resume.
func fingerprint(p *Plan, d *DirPlan, completion []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%d\n", p.Op, d.Dir, len(completion))
	h.Write(completion)
	for _, of := range d.files {
		fmt.Fprintf(h, "%s %d %d\n", of.name, of.lay.Size, len(of.lay.Header))
		h.Write(of.lay.Header)
	}
	for _, s := range p.src.stamps {
		fmt.Fprintln(h, s)
	}
	return hex.EncodeToString(h.Sum(nil)) + "\n"
}
