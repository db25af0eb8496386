package safetensors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// openParallelism bounds how many headers are read at once.
const openParallelism = 16

// MaxAuxSize bounds side files read next to the shards (config.json and the like).
const MaxAuxSize = 64 << 20

// Checkpoint is a validated set of shards, built from their headers and index.
type Checkpoint struct {
	// Root is the directory (or URL base, ending in '/') holding the shards.
	Root string
	// Files are the shards in name order; File.Path is relative to Root.
	Files []*File
	// IndexName is the index file the checkpoint was opened through ("" if none).
	IndexName string
	// HeaderBytesRead counts header and index bytes read to open the checkpoint.
	HeaderBytesRead int64
	// IndexNewline is whether the index file ends with a newline.
	IndexNewline bool
	// Remote is the source a remote checkpoint reads from (nil for a local one).
	Remote *remote.Source

	src       source
	idx       *indexData
	indexOnce sync.Once
	index     *Index
	once      sync.Once
	byName    map[string]loc
	dupErr    error
}

type loc struct{ file, tensor int32 }

// source abstracts where shards and side files come from (disk or HTTP).
type source interface {
	open(ctx context.Context, name string) (io.ReaderAt, int64, io.Closer, error)
	readAux(ctx context.Context, name string, limit int64) ([]byte, error)
	exists(ctx context.Context, name string) (bool, error)
	list() ([]string, error) // *.safetensors in the root, sorted
}

// Open opens a checkpoint from a directory, a model.safetensors.index.json, a
// single .safetensors file, or a remote location of any of those (http(s)://,
// hf://org/name[@revision][/file], s3://, gs://), reading only headers and
// the index, and validates every header and that index and shards agree.
func Open(p string) (*Checkpoint, error) {
	return OpenWith(context.Background(), p, OpenOptions{})
}

// OpenWith is Open bounded by ctx (remoteOpenTimeout for a remote opening
// without a deadline): the first error stops every header read under way.
// Later reads are not tied to ctx (Close ends those of a remote checkpoint).
//
// Local entries must be regular files or links that resolve inside the
// checkpoint directory or its hub repository folder (a hub cache snapshot
// links into ../../blobs/), else fsx.ErrOutside; a --local-dir download's
// .cache/ is not part of the checkpoint. A remote location is resolved as
// huggingface_hub resolves it (remote.Resolve).
func OpenWith(ctx context.Context, p string, o OpenOptions) (*Checkpoint, error) {
	ctx, cancel := remoteDeadline(ctx, p)
	defer cancel()
	s, err := openShards(ctx, p, o)
	if err != nil {
		return nil, err
	}
	return s.keepAll(ctx)
}

// keepAll walks the shards keeping every File: the Checkpoint Open returns.
func (s *shards) keepAll(ctx context.Context) (*Checkpoint, error) {
	c := s.c
	c.Files = make([]*File, len(s.Names))
	err := s.walk(ctx, func(i int, f *File) error {
		c.Files[i] = f
		return nil
	}, true, false)
	if err == nil && s.parsed == nil {
		c.buildNames() // detects duplicates across files
		err = c.dupErr
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if r, ok := c.src.(*remoteSource); ok {
		c.HeaderBytesRead = r.s.Stats().Fetched
	}
	s.shareNames()
	return c, nil
}

// shareNames points every index entry at its shard's copy of the name, so
// that the index's bytes are not kept alive.
func (s *shards) shareNames() {
	c := s.c
	if c.idx == nil || s.perFile == nil {
		return
	}
	var wg sync.WaitGroup
	for _, f := range c.Files {
		fi, ok := slices.BinarySearch(c.idx.files, f.Path)
		if !ok || fi >= len(s.perFile) {
			continue
		}
		wg.Go(func() {
			for _, ei := range s.perFile[fi] {
				if ti, ok := f.index[c.idx.entries[ei].name]; ok {
					c.idx.entries[ei].name = f.Tensors[ti].Name
				}
			}
		})
	}
	wg.Wait()
}

func joinRoot(root, name string) string {
	if strings.HasSuffix(root, "/") {
		return root + name
	}
	return filepath.Join(root, name)
}

// firstError picks the error of a cancelled group: its cause, else the
// first that says more than the context's end.
func firstError(cause error, errs []error) error {
	if cause != nil && cause != context.Canceled && cause != context.DeadlineExceeded {
		return cause
	}
	for _, e := range errs {
		if e != nil && e != context.Canceled && e != context.DeadlineExceeded {
			if cause != nil && !errors.Is(e, cause) {
				return fmt.Errorf("%w (%w)", e, cause)
			}
			return e
		}
	}
	return cause
}

// addSize adds two non-negative sizes, false when the sum overflows int64.
func addSize(a, b int64) (int64, bool) {
	if b > math.MaxInt64-a {
		return 0, false
	}
	return a + b, true
}

// Index returns the checkpoint's index as a map (built on first use), or nil
// when the checkpoint has no index.
func (c *Checkpoint) Index() *Index {
	if c.idx == nil {
		return nil
	}
	c.indexOnce.Do(func() { c.index, _ = c.idx.toIndex(c.IndexName) }) // validated: cannot fail
	return c.index
}

// buildNames makes the checkpoint-wide name table once, noting the first
// name found in two files.
func (c *Checkpoint) buildNames() {
	c.once.Do(func() {
		n := c.NumTensors()
		c.byName = make(map[string]loc, n)
		for fi, f := range c.Files {
			for ti, t := range f.Tensors {
				if prev, dup := c.byName[t.Name]; dup && c.dupErr == nil {
					c.dupErr = fmt.Errorf("file %s: tensor %s: %w: also in %s", joinRoot(c.Root, f.Path), termtext.Name(t.Name), errDuplicate, c.Files[prev.file].Path)
				}
				c.byName[t.Name] = loc{int32(fi), int32(ti)}
			}
		}
	})
}

// Lookup finds a tensor and the shard that holds it.
func (c *Checkpoint) Lookup(name string) (*File, TensorInfo, bool) {
	c.buildNames()
	l, ok := c.byName[name]
	if !ok {
		return nil, TensorInfo{}, false
	}
	f := c.Files[l.file]
	return f, f.Tensors[l.tensor], true
}

// NumTensors counts tensors over all shards.
func (c *Checkpoint) NumTensors() int {
	n := 0
	for _, f := range c.Files {
		n += len(f.Tensors)
	}
	return n
}

// ReadAux reads a side file (config.json, tokenizer files) next to the shards.
// A missing file is reported wrapping ErrNotFound.
func (c *Checkpoint) ReadAux(name string) ([]byte, error) {
	if err := checkShardName(name); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b, err := c.src.readAux(context.Background(), name, MaxAuxSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", joinRoot(c.Root, name), err)
	}
	return b, nil
}

// Close releases every shard, and stops the requests of a remote source.
func (c *Checkpoint) Close() error {
	if r, ok := c.src.(*remoteSource); ok {
		r.stop()
	}
	var errs []error
	for _, f := range c.Files {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}
