package layout

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// stampsName is each output directory's record, while a run writes it, of
// the names the run writes and of the files it committed, with their stamps
// (fsx.Stamp) and the sha256 of their bytes as they streamed out. A resumed
// run keeps a file only while its stamp is the recorded one, and reuses its
// sum rather than re-read everything written. The record goes when the
// directory is finished (stamps differ between runs).
const stampsName = ".k3ckpt-stamps"

const maxStampsFile = 16 << 20

type stampRecord struct {
	Plan string `json:"plan"` // the fingerprint of the plan being written
	// Names is every name the run writes, recorded before it writes any:
	// what --restart may remove (see ownership).
	Names []string             `json:"names,omitempty"`
	Files map[string]fsx.Stamp `json:"files"`          // stamps at commit
	Sums  map[string]string    `json:"sums,omitempty"` // sha256 as written
}

// readStamps reads dir's record; nil when it is absent or unreadable.
func readStamps(dir string) (*stampRecord, error) {
	b, err := fsx.ReadFile(filepath.Join(dir, stampsName), maxStampsFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r stampRecord
	if decodeStrict(b, &r) != nil || r.Files == nil {
		return nil, nil
	}
	return &r, nil
}

// recordCommit stamps a file just committed, with its sha256, and rewrites
// the record. A run killed between the two writes that file again.
func (dr *dirRun) recordCommit(of *outFile, sum string) error {
	fi, err := os.Stat(dr.path(of))
	if err != nil {
		return err
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	dr.stamps.Files[of.name], dr.stamps.Sums[of.name] = fsx.StampOf(fi), sum
	return dr.writeStamps()
}

func (dr *dirRun) writeStamps() error {
	b, err := json.Marshal(dr.stamps)
	if err != nil {
		return err
	}
	return filewrite.WriteFile(filepath.Join(dr.dir, stampsName), b, 0o644)
}

// committed reports whether name's stamp now is the one recorded at its
// commit, with its sha256 when needSum.
func committed(rec *stampRecord, name string, now fsx.Stamp, needSum bool) bool {
	if rec == nil {
		return false
	}
	s, ok := rec.Files[name]
	return ok && s == now && (rec.Sums[name] != "" || !needSum)
}
