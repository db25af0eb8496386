package convert

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/model"
)

// stateDir is the directory inside DST that holds a conversion in progress:
// the plan every worker agreed on and the records of the finished files.
const (
	stateDir    = ".k3ckpt"
	stateName   = "plan.json"
	doneDir     = "done"
	hashBufSize = 1 << 20
	// maxStateFile bounds state and manifest files read back.
	maxStateFile = 1 << 30
)

// fileRecord is the size and sha256 of one finished output file.
type fileRecord struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Report is a shard's share of quantization_report.json (nil: nothing
	// in it was quantized), so that a merge need not read the source.
	Report *fileReport `json:"report,omitempty"`
}

// doneRecord is fileRecord plus the plan it belongs to.
type doneRecord struct {
	Plan string `json:"plan"`
	fileRecord
	// ETag is a bucket DST's object as completed: resume keeps the object
	// while HEAD still gives it.
	ETag string `json:"etag,omitempty"`
	// Counts are what writing the file counted (nil: nothing).
	Counts *unitCounts `json:"counts,omitempty"`
}

// madeWith is what a conversion was made with, as its plan state and its
// manifest record it.
type madeWith struct {
	Plan     string       `json:"plan"`
	Recipe   string       `json:"recipe"`
	Format   model.Format `json:"format"`
	ScaleFmt string       `json:"scale_fmt"`
	// Experts and Numerics are --experts and --numerics (absent: keep and
	// deepgemm).
	Experts  string `json:"experts,omitempty"`
	Numerics string `json:"numerics,omitempty"`
	// NonFinite is "zero" for a conversion made with --nonfinite zero, so
	// that verify checks it under the same policy without being told.
	NonFinite string `json:"nonfinite,omitempty"`
}

// planState is what a worker leaves in stateDir so that merge (which never
// sees the source) can write the configs and manifest.
type planState struct {
	Version string `json:"version"`
	madeWith
	Shards        []string `json:"shards"`
	Aux           []string `json:"aux"`
	Config        string   `json:"config"`
	HFQuantConfig string   `json:"hf_quant_config,omitempty"`
	// Report says that the conversion writes quantization_report.json.
	Report bool `json:"report,omitempty"`
	// Sources are a remote source's files as the run found them: a resumed
	// run refuses sources that changed since.
	Sources []sourceVersion `json:"sources,omitempty"`
}

func (p *Plan) state() *planState {
	s := &planState{
		Version: planVersion,
		madeWith: madeWith{Plan: p.ID, Recipe: p.Recipe.Name, Format: p.Options.Format, ScaleFmt: p.Options.ScaleFmt.String(),
			Experts: p.Options.Experts.String(), Numerics: p.Options.Numerics.String(), NonFinite: recordedPolicy(p.Options.NonFinite)},
		Config: string(p.Config), HFQuantConfig: string(p.HFQuantConfig),
		Shards: []string{}, Aux: []string{}, Sources: p.sourceVersions(), Report: p.reports(),
	}
	for _, f := range p.Files {
		s.Shards = append(s.Shards, f.Name)
	}
	for _, a := range p.Aux {
		s.Aux = append(s.Aux, a.Name)
	}
	return s
}

// readJSON decodes a state or manifest file (at most maxStateFile bytes).
func readJSON(path string, v any) error {
	b, err := fsx.ReadFile(path, maxStateFile)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeState writes the run state compactly: only k3ckpt reads it, and
// indenting would scan its (large) configs again.
func writeState(path string, st *planState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return writeJSONBytes(path, b)
}

func writeJSONBytes(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return filewrite.WriteFile(path, append(b, '\n'), 0o644)
}

// dstManifest lists every output file with its size and sha256; written last.
type dstManifest struct {
	Version int `json:"version"`
	madeWith
	Files []fileRecord `json:"files"`

	// SourceUnverified lists the remote source files with no version (ETag,
	// Last-Modified or commit): a replacement of the same size during the
	// run would not show.
	SourceUnverified []string `json:"source_unverified,omitempty"`

	byName map[string]int
}

// index checks the manifest at path names plain relative paths, each once,
// and indexes them for lookup.
func (m *dstManifest) index(path string) error {
	m.byName = make(map[string]int, len(m.Files))
	for i, f := range m.Files {
		if !localName(f.Name) {
			return fmt.Errorf("manifest %s: %w: file name %q is not a path inside the destination", path, ErrDestination, f.Name)
		}
		if _, dup := m.byName[f.Name]; dup {
			return fmt.Errorf("manifest %s: %w: %s listed twice", path, ErrDestination, f.Name)
		}
		m.byName[f.Name] = i
	}
	return nil
}

// localName reports whether a slash-separated name stays inside its root:
// relative, clean, no "..", no backslashes or NULs.
func localName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "\\\x00") && path.Clean(name) == name &&
		filepath.IsLocal(filepath.FromSlash(name)) && !strings.HasPrefix(name, "/")
}

// lookup finds a file's record.
func (m *dstManifest) lookup(name string) (fileRecord, bool) {
	i, ok := m.byName[name]
	if !ok {
		return fileRecord{}, false
	}
	return m.Files[i], true
}

// hashFile returns a regular file's size and sha256, counting bytes into
// progress (which may be nil).
func hashFile(path string, progress func(int64)) (fileRecord, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return fileRecord{}, err
	}
	defer f.Close()
	h := sha256.New()
	n := hashMapped(f, fi.Size(), h, progress)
	if n < fi.Size() { // mapping refused: finish with read(2), to the end of the file
		buf := make([]byte, hashBufSize)
		for err = nil; err != io.EOF; {
			var m int
			m, err = f.ReadAt(buf, n)
			h.Write(buf[:m])
			n += int64(m)
			if progress != nil {
				progress(int64(m))
			}
			if err != nil && err != io.EOF {
				return fileRecord{}, fmt.Errorf("hash %s: %w", path, err)
			}
		}
	}
	return fileRecord{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
