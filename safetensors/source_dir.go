package safetensors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// dirSource serves a local directory through fsx (the checkpoint link rule, regular files only).
type dirSource struct {
	root     string
	rootOnce sync.Once
	r        *fsx.Root
	rootErr  error
}

func (d *dirSource) resolve(name string) (string, error) {
	d.rootOnce.Do(func() { d.r, d.rootErr = fsx.NewRoot(d.root) })
	if d.rootErr != nil {
		return "", d.rootErr
	}
	real, err := d.r.Resolve(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return real, err
}

func (d *dirSource) open(_ context.Context, name string) (io.ReaderAt, int64, io.Closer, error) {
	p, err := d.resolve(name)
	if err != nil {
		return nil, 0, nil, err
	}
	f, err := fsx.Open(p)
	if err != nil {
		return nil, 0, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	return f, st.Size(), f, nil
}

func (d *dirSource) readAux(_ context.Context, name string, limit int64) ([]byte, error) {
	p, err := d.resolve(name)
	if err != nil {
		return nil, err
	}
	return fsx.ReadFile(p, limit)
}

func (d *dirSource) exists(_ context.Context, name string) (bool, error) {
	_, err := os.Lstat(filepath.Join(d.root, name))
	return err == nil, nil
}

// list names the *.safetensors entries of the root, links included, but no dot
// names (a --local-dir download's .cache/, temporaries).
func (d *dirSource) list() ([]string, error) {
	ents, err := os.ReadDir(d.root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".safetensors") && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}
