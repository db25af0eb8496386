package fsx

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrOutside is wrapped when a checkpoint entry resolves (through symbolic
// links) to a place the checkpoint may not read.
var ErrOutside = errors.New("link leads outside the checkpoint")

// Root is a checkpoint directory with its own links resolved once (NewRoot).
type Root struct {
	dir  string // as given
	real string // dir with every link resolved
	repo string // the hub repository folder holding real, or ""
}

// NewRoot resolves dir for later Resolve calls.
func NewRoot(dir string) (*Root, error) {
	real, err := realPath(dir)
	if err != nil {
		return nil, err
	}
	return &Root{dir: dir, real: real, repo: hubRepo(real)}, nil
}

// realPath is p with every link resolved, made absolute.
func realPath(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	return filepath.Abs(real)
}

// hubRepo returns the repository folder when real lies inside a hub cache
// snapshot (…/models--org--name/snapshots/<rev>[/sub…]), else "".
func hubRepo(real string) string {
	for d, parent := real, filepath.Dir(real); parent != d; d, parent = parent, filepath.Dir(parent) {
		repo := filepath.Dir(parent)
		if filepath.Base(parent) == "snapshots" && strings.HasPrefix(filepath.Base(repo), "models--") {
			return repo
		}
	}
	return ""
}

// Resolve returns the path of name (slash-separated, relative to the root)
// with its links resolved; an error wraps ErrOutside when they lead outside
// (see allowed), fs.ErrNotExist when it is missing. It names the link's
// target, not name: callers say which entry.
func (r *Root) Resolve(name string) (string, error) {
	real, err := realPath(filepath.Join(r.dir, filepath.FromSlash(name)))
	if err != nil {
		return "", err
	}
	if err := r.allowed(real); err != nil {
		return "", err
	}
	return real, nil
}

// allowed decides whether real, a resolved absolute path reached from an
// entry of the checkpoint, may be read: it must lie inside the checkpoint
// directory or, for a hub cache snapshot, inside that repository's cache
// folder (the snapshot's links point into ../../blobs/).
func (r *Root) allowed(real string) error {
	if within(r.real, real) || (r.repo != "" && within(r.repo, real)) {
		return nil
	}
	allowed := "inside the checkpoint directory " + r.real
	if r.repo != "" {
		allowed += " or inside its hub cache repository folder " + r.repo
	} else {
		allowed += " (or, for a Hugging Face hub cache snapshot models--org--name/snapshots/<rev>/, inside models--org--name)"
	}
	return fmt.Errorf("%w: it resolves to %s; links may point only %s", ErrOutside, real, allowed)
}

func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
