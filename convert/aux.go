package convert

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// auxFile is a side file (tokenizer, chat template, custom code) copied as is.
type auxFile struct {
	Name string // relative to the checkpoint root, with forward slashes
	Size int64
	Mode fs.FileMode // the source's permission bits, which the copy keeps

	stamp fsx.Stamp
}

// errPartialSource: SRC is part of a larger checkpoint (one of its shards).
var errPartialSource = errors.New("source is part of a larger checkpoint")

// replacedNames are side files the conversion rewrites or must not carry
// over (a stale hf_quant_config.json would describe the wrong formats).
var replacedNames = map[string]bool{
	model.ConfigName: true, HFQuantConfigName: true, safetensors.IndexName: true, ManifestName: true,
}

// listAux finds the side files to copy: model.SideFiles less the files the
// conversion rewrites, links resolved as shards' (fsx.Root). A root shard the
// checkpoint does not hold, or an index it was not opened through, means SRC
// is one file of a larger checkpoint: refused (its siblings make a broken tree).
func listAux(src *safetensors.Checkpoint) ([]auxFile, error) {
	shards := make([]string, len(src.Files))
	for i, f := range src.Files {
		shards[i] = f.Path
	}
	if src.IndexName == "" && len(src.Files) == 1 {
		if _, err := os.Stat(filepath.Join(src.Root, safetensors.IndexName)); err == nil {
			return nil, fmt.Errorf("%w: %s is one shard of the checkpoint indexed by %s; convert the directory %s instead",
				errPartialSource, filepath.Join(src.Root, src.Files[0].Path), filepath.Join(src.Root, safetensors.IndexName), src.Root)
		}
	}
	root, err := fsx.NewRoot(src.Root)
	if err != nil {
		return nil, fmt.Errorf("list side files of %s: %w", src.Root, err)
	}
	side, err := model.SideFiles(src.Root, shards)
	if err != nil {
		return nil, err
	}
	aux := make([]auxFile, 0, len(side))
	for _, sf := range side {
		if replacedNames[sf.Name] {
			continue
		}
		path := filepath.Join(src.Root, filepath.FromSlash(sf.Name))
		if !strings.Contains(sf.Name, "/") && strings.HasSuffix(sf.Name, ".safetensors") {
			return nil, fmt.Errorf("%w: %s is not among the shards planned (%d, from %s); convert the directory %s, or move the other files away",
				errPartialSource, path, len(src.Files), sourceDesc(src), src.Root)
		}
		real, err := root.Resolve(sf.Name)
		if err != nil {
			return nil, fmt.Errorf("side file %s: %w", path, err)
		}
		st, err := os.Stat(real)
		if err != nil {
			return nil, err
		}
		aux = append(aux, auxFile{Name: sf.Name, Size: st.Size(), Mode: st.Mode().Perm(), stamp: fsx.StampOf(st)})
	}
	return aux, nil
}

func sourceDesc(src *safetensors.Checkpoint) string {
	if src.IndexName != "" {
		return src.IndexName
	}
	if len(src.Files) == 1 {
		return src.Files[0].Path + " alone"
	}
	return "the directory listing"
}
