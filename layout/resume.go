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
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// markerName is the file an output directory holds while a run writes it:
// the fingerprint of the plan being written (a dot file: no side file).
const markerName = ".k3ckpt-partial"

type dirRun struct {
	dirState
	dir     string
	cleaned int

	mu     sync.Mutex   // guards stamps once writers run
	stamps *stampRecord // the files committed, for the record
}

// completionName is the file written last in d's directory, marking it
// finished: layout.json for an export, the index for a reassembly.
func (d *dirPlan) completionName() string {
	if d.man != nil {
		return manifestName
	}
	return safetensors.IndexName
}

// prepareDir makes an output directory ready and says what is left to write.
// Whatever the flags, it refuses a link, and a directory holding anything no
// run of the tool wrote (see ownership). Then:
//   - absent or empty: everything;
//   - restart: the files the tool wrote are removed, everything is written;
//   - this plan's run marker (a killed run): temporaries are removed; a file
//     is kept when its size and header are the plan's and its stamp and
//     sha256 are those recorded at its commit (stampsName);
//   - this plan's finished output (its completion record byte for byte): a
//     file is kept when its size and header are the plan's and SHA256SUMS
//     lists it (its bytes are checked by reassemble --check and verify);
//   - another plan's marker or record is refused (--restart replaces it).
func prepareDir(p *Plan, d *dirPlan, dir string, restart bool) (*dirRun, error) {
	dr := &dirRun{dirState: dirState{d: d}, dir: dir}
	var err error
	if dr.completion, err = d.completionBytes(); err != nil {
		return nil, err
	}
	fp := fingerprint(p, d, dr.completion)
	dr.stamps = &stampRecord{Plan: fp, Names: dr.d.plannedNames(), Files: map[string]fsx.Stamp{}, Sums: map[string]string{}}
	exists, err := checkOutputDir(dir)
	if err != nil {
		return nil, err
	}
	if !exists {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		return dr, dr.start()
	}
	want, err := d.memoryFiles(dr.completion)
	if err != nil {
		return nil, err
	}
	prev, err := readStamps(dir)
	if err != nil {
		return nil, err
	}
	// This plan's completion record, written last, claims the plan's files.
	have, rerr := fsx.ReadFile(filepath.Join(dir, d.completionName()), int64(len(dr.completion)))
	done := rerr == nil && bytes.Equal(have, dr.completion)
	var finished []string
	if done {
		finished = dr.stamps.Names
	}
	c := claimsOf(dir, prev, want, finished, d.man != nil)
	own, err := survey(dir, c)
	if err != nil {
		return nil, err
	}
	if len(own.foreign) > 0 {
		return nil, own.foreignError(dir, dr.d.completionName())
	}
	if restart {
		if err := removeOwned(dir, own.owned); err != nil {
			return nil, err
		}
		return dr, dr.start()
	}
	if dr.cleaned, err = filewrite.RemoveTemps(dir); err != nil {
		return nil, err
	}
	rec := prev
	if rec != nil && rec.Plan != fp {
		rec = nil
	}
	marker, err := os.ReadFile(filepath.Join(dir, markerName))
	switch {
	case err == nil:
		if string(marker) != fp {
			return nil, fmt.Errorf("%w: %s holds an unfinished run of a different plan (source, layout or options changed); pass --restart to discard it", errOutputExists, dir)
		}
		return dr, dr.keepDone(rec, false)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	switch {
	case prev != nil && rec == nil, c.other:
		return nil, fmt.Errorf("%w: %s holds the output of a different plan (source, layout or options changed); pass --restart to replace it", errOutputExists, dir)
	case done && dr.complete(rec):
		// Finished; a record left by a run killed as it finished goes.
		if err := os.Remove(filepath.Join(dir, stampsName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		dr.finished = true
		return dr, nil
	case done || rec != nil:
		// This plan's output, changed since: resume it.
		if err := filewrite.WriteFile(filepath.Join(dir, markerName), []byte(fp), 0o644); err != nil {
			return nil, err
		}
		return dr, dr.keepDone(rec, rec == nil)
	}
	// Only bookkeeping, or files byte for byte as this plan writes them.
	return dr, dr.start()
}

// start begins a run from nothing: the marker, then the record of every
// name the run writes (before it writes any), then every file to write.
func (dr *dirRun) start() error {
	if err := filewrite.WriteFile(filepath.Join(dr.dir, markerName), []byte(dr.stamps.Plan), 0o644); err != nil {
		return err
	}
	dr.todo = dr.d.files
	return dr.writeStamps()
}

func isTemp(name string) bool { return strings.HasPrefix(name, filewrite.TempPrefix) }

// keepDone keeps the files of an earlier run that are as planned (size and
// header) and as rec recorded their commit, or, with asPlanned (this plan's
// finished output, which keeps no record), that its SHA256SUMS lists (a
// reassembly's, which has none: as planned); it removes and queues the
// others and writes the record of the kept ones.
func (dr *dirRun) keepDone(rec *stampRecord, asPlanned bool) error {
	var listed map[string]string
	sums := dr.d.hasSums()
	if asPlanned && sums {
		listed = listedSums(fsx.ReadFile(filepath.Join(dr.dir, sumsName), maxSumsFile))
	}
	for _, of := range dr.d.files {
		path := filepath.Join(dr.dir, of.name)
		ok, now, err := matchesPlan(path, of)
		if err != nil {
			return err
		}
		keep, sum := false, ""
		switch {
		case ok && asPlanned:
			sum = listed[of.name]
			keep = sum != "" || !sums
		case ok && committed(rec, of.name, now, sums):
			sum, keep = rec.Sums[of.name], true
		}
		if keep {
			dr.stamps.Files[of.name] = now
			dr.stamps.Sums[of.name] = sum
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

// complete reports whether the directory, whose completion record is the
// plan's, holds the finished plan: its side files and SHA256SUMS byte for
// byte, and every file as planned (and as committed, when rec records it).
func (dr *dirRun) complete(rec *stampRecord) bool {
	for _, of := range dr.d.files {
		ok, now, err := matchesPlan(filepath.Join(dr.dir, of.name), of)
		if err != nil || !ok || (rec != nil && !committed(rec, of.name, now, dr.d.hasSums())) {
			return false
		}
	}
	for name, want := range dr.d.side {
		b, err := fsx.ReadFile(filepath.Join(dr.dir, filepath.FromSlash(name)), int64(len(want)))
		if err != nil || !bytes.Equal(b, want) {
			return false
		}
	}
	if !dr.d.hasSums() {
		return true
	}
	path := filepath.Join(dr.dir, sumsName)
	have, err := fsx.ReadFile(path, maxSumsFile)
	if err != nil {
		return false
	}
	listed, err := parseSums(have, path)
	if err != nil {
		return false
	}
	want, err := dr.d.sumsFile(dr.completion, listed)
	return err == nil && bytes.Equal(have, want)
}

// matchesPlan reports whether path is a regular file of the planned size
// and header, and returns its stamp (files reach their name only complete).
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
// record, every file's name and header, and the source files as opened, so
// a rerun after the source changed does not resume.
func fingerprint(p *Plan, d *dirPlan, completion []byte) string {
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
