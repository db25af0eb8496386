package convert

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
)

// dstManifest lists every output file with its size and sha256; written last.
type dstManifest struct {
	Version  int          `json:"version"`
	Plan     string       `json:"plan"`
	Recipe   string       `json:"recipe"`
	Format   model.Format `json:"format"`
	ScaleFmt string       `json:"scale_fmt"`
	// Experts and Numerics are the --experts and --numerics the files were
	// made with (absent: keep and deepgemm).
	Experts  string `json:"experts,omitempty"`
	Numerics string `json:"numerics,omitempty"`
	// NonFinite is "zero" for a conversion made with --nonfinite zero, so
	// that verify checks it under the same policy without being told.
	NonFinite string       `json:"nonfinite,omitempty"`
	Files     []fileRecord `json:"files"`

	// SourceUnverified lists the remote source files whose server offered
	// nothing to verify their content by (no ETag, Last-Modified or commit):
	// had one been replaced during the run by another of its size, the
	// output would not show it.
	SourceUnverified []string `json:"source_unverified,omitempty"`

	byName map[string]int
}

// index checks the manifest at path names plain relative paths, each once,
// and indexes them for Lookup.
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

// Lookup finds a file's record.
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
