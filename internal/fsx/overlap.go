package fsx

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrOverlap is wrapped when an output directory and an input of the same
// command are one directory or one lies inside the other.
var ErrOverlap = errors.New("output and input overlap")

// Disjoint refuses an output directory dst that is one of the inputs, lies
// inside one, or holds one (a run would read what it writes, a cleanup could
// delete its input). Paths are resolved through the links of their longest
// existing prefix, so no spelling hides an overlap; the error names both.
func Disjoint(dst string, inputs ...string) error {
	d, err := resolveExisting(dst)
	if err != nil {
		return err
	}
	for _, in := range inputs {
		s, err := resolveExisting(in)
		if err != nil {
			return err
		}
		switch {
		case s == d:
			return fmt.Errorf("%w: DST %s is the source %s; choose a DST outside every source", ErrOverlap, dst, in)
		case within(s, d):
			return fmt.Errorf("%w: DST %s is inside the source %s; choose a DST outside it", ErrOverlap, dst, in)
		case within(d, s):
			return fmt.Errorf("%w: the source %s is inside DST %s; choose a DST that does not contain it", ErrOverlap, in, dst)
		}
	}
	return nil
}

// resolveExisting is path made absolute with the links of its longest
// existing prefix resolved and the rest appended ("." and ".." cleaned first:
// lexically, the spelling meant for a path that does not exist yet).
func resolveExisting(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	var rest []string
	for p := abs; ; p = filepath.Dir(p) {
		if real, err := realPath(p); err == nil {
			for i := len(rest) - 1; i >= 0; i-- {
				real = filepath.Join(real, rest[i])
			}
			return real, nil
		}
		if filepath.Dir(p) == p {
			return abs, nil
		}
		rest = append(rest, filepath.Base(p))
	}
}
