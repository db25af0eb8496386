package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// tensorData is one source tensor's bytes, addressed relative to its start.
type tensorData = io.ReaderAt

// fileTensor is a tensor stored whole in a safetensors file, read from the
// file or from a stream of it (see rebindTensor).
type fileTensor struct {
	*io.SectionReader
	f *safetensors.File
	t safetensors.TensorInfo
}

func newFileTensor(f *safetensors.File, t safetensors.TensorInfo) fileTensor {
	return fileTensor{SectionReader: f.Section(t), f: f, t: t}
}

// sourceFile is one shard of the source checkpoint (name relative to its
// root, and __metadata__), kept so a reassembly can write it back.
type sourceFile struct {
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

type sourceInfo struct {
	TotalSize int64        `json:"total_size"` // the bytes of all source tensors
	Tensors   int          `json:"tensors"`
	Files     []sourceFile `json:"files"`
	// IndexMetadata holds the index's metadata keys besides total_size.
	IndexMetadata map[string]any `json:"index_metadata,omitempty"`
	// IndexNoFinalNewline records an index that ends without a newline (as
	// the released checkpoint's does), or none at all; every index written
	// from this source takes the same form.
	IndexNoFinalNewline bool `json:"index_no_final_newline,omitempty"`
}

// Source is what an export or a reassembly reads: a checkpoint, or the output
// directory of an earlier export (whose tensors it rebuilds on the fly).
type Source struct {
	// Root is the path it was opened from.
	Root string
	// Specs lists every tensor available, in source-file order.
	Specs  []safetensors.TensorSpec
	fileOf []string // the source shard of each tensor
	info   sourceInfo
	// missing names tensors of the original checkpoint that an export source
	// no longer holds (dropped by its layout).
	missing []string

	data    []tensorData
	files   map[string]*safetensors.File // a checkpoint source's shards by name (nil: an export source)
	aux     map[string][]byte
	closers []io.Closer
	stamps  []string // the files read, for resume fingerprints
	remote  *remote.Source
	// AuxUnlisted is set for an https:// source, which cannot be listed:
	// its side files other than config.json are not carried over.
	AuxUnlisted bool
}

// Close releases the files the source opened.
func (s *Source) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c.Close())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// config is config.json (nil when absent), as the original checkpoint's.
func (s *Source) config() []byte { return s.aux[model.ConfigName] }

// Model reads the model dimensions from the source's config.json.
func (s *Source) Model() (Model, error) {
	if s.config() == nil {
		return Model{}, fmt.Errorf("%w: %s has no %s", errManifest, s.Root, model.ConfigName)
	}
	c, err := model.ParseConfig(s.config())
	if err != nil {
		return Model{}, fmt.Errorf("%s: %w", filepath.Join(s.Root, model.ConfigName), err)
	}
	return ModelOf(c), nil
}

// maxAuxTotal bounds the side files of a source together: they are held in
// memory and written to every output directory.
const maxAuxTotal = 256 << 20

// notSideFile reports the side-file names this package does not carry over:
// safetensors files, and the manifest and SHA256SUMS it writes itself.
func notSideFile(name string) bool {
	return name == manifestName || name == sumsName || strings.HasSuffix(name, ".safetensors")
}

// readAux reads the side files of a local directory (model.SideFiles),
// following links by the checkpoint rule (fsx.Root: inside the directory,
// or a hub cache snapshot's repository folder).
func readAux(dir string, shards []string) (map[string][]byte, error) {
	root, err := fsx.NewRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("side files of %s: %w", dir, err)
	}
	side, err := model.SideFiles(dir, shards)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	var total int64
	for _, sf := range side {
		if notSideFile(sf.Name) {
			continue
		}
		path := filepath.Join(dir, filepath.FromSlash(sf.Name))
		real, err := root.Resolve(sf.Name)
		if err != nil {
			if errors.Is(err, fsx.ErrOutside) {
				return nil, fmt.Errorf("%w: side file %s: %w", errLink, path, err)
			}
			return nil, fmt.Errorf("side file %s: %w", path, err)
		}
		b, err := fsx.ReadFile(real, min(safetensors.MaxAuxSize, maxAuxTotal-total))
		if err != nil {
			return nil, fmt.Errorf("side file %s (side files are held in memory, %d MiB each and %d MiB together at most): %w",
				path, safetensors.MaxAuxSize>>20, maxAuxTotal>>20, err)
		}
		total += int64(len(b))
		out[sf.Name] = b
	}
	return out, nil
}

// stampOf identifies a file's version for resume fingerprints: name, size
// and modification time (local) or version (remote), else the name alone.
func stampOf(name string, ra io.ReaderAt) string {
	if rf, ok := ra.(*remote.File); ok {
		return fmt.Sprintf("%s %d %s", name, rf.Size(), rf.Version())
	}
	s, err := fsx.StampReader(ra)
	if err != nil || s == (fsx.Stamp{}) {
		return name
	}
	return fmt.Sprintf("%s %d %d", name, s.Size, s.MTime)
}

// OpenSource opens a checkpoint (directory, index or single file), or an
// export directory holding rank-NN / stage-NN subdirectories with manifests.
func OpenSource(path string) (*Source, error) {
	if dirs, err := exportDirs(path); err == nil && len(dirs) > 0 {
		return openExport(path, dirs)
	}
	c, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	s, err := OpenCheckpoint(c)
	if err != nil {
		return nil, err
	}
	s.Root = path
	return s, nil
}

// OpenCheckpoint makes a Source of an opened checkpoint, local or remote
// (https://, hf://: side files from the hub's listing, only config.json
// from an https:// directory); the Source closes it.
func OpenCheckpoint(c *safetensors.Checkpoint) (_ *Source, err error) {
	s := &Source{Root: c.Root, closers: []io.Closer{c}, files: map[string]*safetensors.File{}, remote: c.Remote}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for _, f := range c.Files {
		s.files[f.Path] = f
		s.stamps = append(s.stamps, stampOf(f.Path, f.ReaderAt()))
		s.info.Files = append(s.info.Files, sourceFile{Name: f.Path, Metadata: f.Metadata})
		for _, t := range f.Tensors {
			s.Specs = append(s.Specs, safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape})
			s.fileOf = append(s.fileOf, f.Path)
			s.data = append(s.data, newFileTensor(f, t))
			s.info.TotalSize += t.Size()
		}
	}
	s.info.Tensors = len(s.Specs)
	s.info.IndexNoFinalNewline = !c.IndexNewline
	if idx := c.Index(); idx != nil {
		s.info.IndexMetadata = idx.Metadata
	}
	if s.remote != nil {
		if s.aux, s.AuxUnlisted, err = readRemoteAux(c); err != nil {
			return nil, err
		}
	} else if st, serr := os.Stat(c.Root); serr == nil && st.IsDir() {
		if s.aux, err = readAux(c.Root, slices.Collect(maps.Keys(s.files))); err != nil {
			return nil, err
		}
	} else {
		b, rerr := c.ReadAux(model.ConfigName)
		switch {
		case rerr == nil:
			s.aux = map[string][]byte{model.ConfigName: b}
		case !errors.Is(rerr, os.ErrNotExist) && !errors.Is(rerr, safetensors.ErrNotFound):
			return nil, rerr
		}
	}
	return s, nil
}

// stageKey is the config.json key recording a stage checkpoint's layer range.
const stageKey = "k3ckpt_stage"

func decodeJSONObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}
