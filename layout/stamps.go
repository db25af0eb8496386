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
// (size, modification and change time, device and inode) taken right after
// the commit and the sha256 of their bytes as they streamed out. A resumed
// run keeps a file only while its stamp is the recorded one: a file written
// to since, or replaced, is written again. A kept file's sum, for the
// directory's SHA256SUMS, is the recorded one: hashing the kept files again
// would re-read everything written (1.45 TB for K3), while the stamp costs
// one stat per file. The record goes when the directory is finished (stamps
// differ between runs, and verify would take the record for a stray file).
// The name starts with a dot, so no reader of the directory (side files,
// shard listings) takes it for data.
const stampsName = ".k3ckpt-stamps"

// maxStampsFile bounds the record read back (a directory of a few hundred
// files records a few tens of KB).
const maxStampsFile = 16 << 20

// stampRecord is the content of stampsName.
type stampRecord struct {
	// Plan is the fingerprint of the plan whose run committed the files.
	Plan string `json:"plan"`
	// Names is every name the run writes, recorded before it writes any:
	// what --restart may remove (see ownership).
	Names []string `json:"names,omitempty"`
	// Files maps file names to their stamps at commit.
	Files map[string]fsx.Stamp `json:"files"`
	// Sums maps the same names to the sha256 of their bytes as written
	// (absent in a record of an older k3ckpt: its files are written again).
	Sums map[string]string `json:"sums,omitempty"`
}

// readStamps reads dir's record; nil when it is absent or unreadable (then
// no file of dir counts as committed by a run).
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

// recordCommit stamps a file just committed, with the sha256 of its bytes
// as written, and rewrites the record. A run killed between the commit and
// the record writes that file again.
func (dr *dirRun) recordCommit(of *outFile, sum string) error {
	name := of.name
	fi, err := os.Stat(dr.path(of))
	if err != nil {
		return err
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	dr.stamps.Files[name] = fsx.StampOf(fi)
	dr.stamps.Sums[name] = sum
	return dr.writeStamps()
}

// writeStamps writes the record (dr.mu held, or no writer running yet).
func (dr *dirRun) writeStamps() error {
	b, err := json.Marshal(dr.stamps)
	if err != nil {
		return err
	}
	return filewrite.WriteFile(filepath.Join(dr.dir, stampsName), b, 0o644)
}

// committed reports whether name's current stamp is the one recorded at its
// commit by a run of this plan, with its sha256 when needSum.
func committed(rec *stampRecord, name string, now fsx.Stamp, needSum bool) bool {
	if rec == nil {
		return false
	}
	s, ok := rec.Files[name]
	return ok && s == now && (rec.Sums[name] != "" || !needSum)
}
