package model

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// sideFile is a file of a checkpoint directory that is not tensor data
// (config.json, the tokenizer, custom code…), which conversions carry over.
type sideFile struct {
	// Name is the path relative to the checkpoint root, slash separated.
	Name string
	// Size is the file's size in bytes (of the link's target for a symlink).
	Size int64
}

// IsSideFileName reports whether a root-relative, slash-separated path of a
// checkpoint directory is a side file by name: not the index, and not under
// a hidden entry (.cache/, .git/…). The caller knows the shards.
func IsSideFileName(rel string) bool {
	if rel == safetensors.IndexName || rel == "" {
		return false
	}
	for part := range strings.SplitSeq(rel, "/") {
		if strings.HasPrefix(part, ".") {
			return false
		}
	}
	return true
}

// SideFiles lists the side files under root, sorted by name: every file
// (symlinks followed) that IsSideFileName accepts and that is not one of the
// shards (root-relative names). One that is not a regular file is an error
// wrapping fsx.ErrNotRegular.
func SideFiles(root string, shards []string) ([]sideFile, error) {
	var out []sideFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || slices.Contains(shards, name) || !IsSideFileName(name) {
			return nil
		}
		st, err := os.Stat(path) // follows symlinks
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			// Skipping it would write an output that silently lacks a file
			// the source has (a FIFO could also block the copy forever).
			return fmt.Errorf("side file %s: %w: it is %s", name, fsx.ErrNotRegular, fsx.Kind(st.Mode()))
		}
		out = append(out, sideFile{Name: name, Size: st.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("side files of %s: %w", root, err)
	}
	slices.SortFunc(out, func(a, b sideFile) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}
