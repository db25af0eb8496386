package convert

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

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
	s.Writes = []string{safetensors.IndexName, model.ConfigName}
	if st.HFQuantConfig != "" {
		s.Writes = append(s.Writes, HFQuantConfigName)
	}
	if st.Report {
		s.Writes = append(s.Writes, ReportName)
	}
	s.Writes = append(s.Writes, ManifestName)
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
