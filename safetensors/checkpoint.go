package safetensors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/quote"
	"golang.org/x/sync/errgroup"
)

// OpenParallelism bounds how many headers are read at once.
const OpenParallelism = 16

// MaxAuxSize bounds side files read next to the shards (config.json and the like).
const MaxAuxSize = 64 << 20

// Checkpoint is a validated set of shards: a directory with or without an index,
// an index file, a single file, or any of those over HTTP(S). Only headers (and
// the index) are read to build it.
type Checkpoint struct {
	// Root is the directory (or URL base, ending in '/') holding the shards.
	Root string
	// Files are the shards in name order; File.Path is relative to Root.
	Files []*File
	// IndexName is the index file the checkpoint was opened through ("" if none).
	IndexName string
	// HeaderBytesRead counts header and index bytes read to open the checkpoint.
	HeaderBytesRead int64

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
// single .safetensors file, or an http(s):// URL to any of those, reading only
// headers and the index. It validates every header and, when there is an
// index, that index and shards agree exactly. It is OpenContext without a
// caller's deadline (remote sources still get RemoteOpenTimeout).
func Open(p string) (*Checkpoint, error) {
	return OpenContext(context.Background(), p)
}

// OpenContext is Open bounded by ctx: the first error (or ctx's end) stops
// every header read still under way. A remote source whose ctx has no
// deadline gets RemoteOpenTimeout for the whole opening. The ctx bounds only
// the opening: later reads through the checkpoint are not tied to it.
//
// Local entries are read as they are in a plain directory, in a Hugging
// Face --local-dir download (its .cache/ folder is not part of the
// checkpoint) and in a hub cache snapshot (models--org--name/snapshots/<rev>/,
// whose entries link into ../../blobs/): a link may resolve inside the
// checkpoint directory or inside its hub repository folder, nowhere else
// (fsx.Root.Allowed, wrapped as ErrOutside). Every entry must be a regular
// file; FIFOs and devices are refused before they are opened for reading.
func OpenContext(ctx context.Context, p string) (*Checkpoint, error) {
	if strings.HasPrefix(p, "http://") || strings.HasPrefix(p, "https://") {
		return openRemote(ctx, p)
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	if st.IsDir() {
		return openWith(ctx, &dirSource{root: p}, p, "")
	}
	dir, base := filepath.Split(p)
	if dir == "" {
		dir = "."
	}
	if strings.HasSuffix(base, ".json") {
		return openWith(ctx, &dirSource{root: dir}, dir, base)
	}
	return openSingle(ctx, &dirSource{root: dir}, dir, base)
}

// openWith opens a directory-like root; indexName selects the index ("" means
// the default index if present, else every .safetensors file).
func openWith(ctx context.Context, src source, root, indexName string) (*Checkpoint, error) {
	c := &Checkpoint{Root: root, src: src}
	if indexName == "" {
		ok, err := src.exists(ctx, IndexName)
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", joinRoot(root, IndexName), err)
		}
		if ok {
			indexName = IndexName
		}
	}
	if indexName == "" {
		names, err := src.list()
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", root, err)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("open %s: %w: no .safetensors files and no %s", root, ErrNotFound, IndexName)
		}
		if err := c.openFiles(ctx, names); err != nil {
			return nil, err
		}
		c.buildNames() // detects duplicates across files
		if c.dupErr != nil {
			c.Close()
			return nil, c.dupErr
		}
		return c, nil
	}
	c.IndexName = indexName
	indexPath := joinRoot(root, indexName)
	b, err := src.readAux(ctx, indexName, MaxIndexSize)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", indexPath, err)
	}
	c.HeaderBytesRead += int64(len(b))
	// Where the directory can be listed, parse the index while the headers of
	// the listed shards are read; the two lists must then agree.
	present, listErr := src.list()
	var parseErr error
	parsed := make(chan struct{})
	go func() {
		defer close(parsed)
		c.idx, parseErr = parseIndexData(b, indexPath, true)
	}()
	if listErr == nil {
		if err := c.openFiles(ctx, present); err != nil {
			<-parsed
			return nil, err
		}
	}
	<-parsed
	if parseErr != nil {
		c.Close()
		return nil, parseErr
	}
	if listErr == nil {
		for _, f := range present {
			if _, ok := slices.BinarySearch(c.idx.files, f); !ok {
				c.Close()
				return nil, fmt.Errorf("file %s: %w: shard is not in %s", joinRoot(root, f), ErrIndex, indexName)
			}
		}
		for _, f := range c.idx.files {
			if _, ok := slices.BinarySearch(present, f); !ok {
				c.Close()
				// Name the cause precisely: missing, or a link leaving the directory.
				_, _, closer, err := src.open(ctx, f)
				if err != nil {
					return nil, fmt.Errorf("file %s: %w", joinRoot(root, f), err)
				}
				if closer != nil {
					closer.Close()
				}
				return nil, fmt.Errorf("file %s: %w: named by %s but not a shard here", joinRoot(root, f), ErrNotFound, indexName)
			}
		}
	} else if err := c.openFiles(ctx, c.idx.files); err != nil {
		return nil, err
	}
	if err := c.checkIndex(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func openSingle(ctx context.Context, src source, root, name string) (*Checkpoint, error) {
	c := &Checkpoint{Root: root, src: src}
	if err := c.openFiles(ctx, []string{name}); err != nil {
		return nil, err
	}
	return c, nil
}

func joinRoot(root, name string) string {
	if strings.HasSuffix(root, "/") {
		return root + name
	}
	return filepath.Join(root, name)
}

// openFiles reads the headers of names in parallel: at most OpenParallelism
// files open at once, their header bytes bounded by MaxHeaderBytesInFlight,
// and the first error cancels the rest.
func (c *Checkpoint) openFiles(ctx context.Context, names []string) error {
	c.Files = make([]*File, len(names))
	errs := make([]error, len(names))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var g errgroup.Group
	g.SetLimit(OpenParallelism)
	for i, name := range names {
		g.Go(func() error {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			ra, size, closer, err := c.src.open(ctx, name)
			if err != nil {
				errs[i] = fmt.Errorf("file %s: %w", joinRoot(c.Root, name), err)
				cancel(errs[i])
				return errs[i]
			}
			f, err := readHeader(ctx, ra, size, joinRoot(c.Root, name), cancel) // errors name the full path
			if err != nil {
				if closer != nil {
					closer.Close()
				}
				errs[i] = err
				cancel(err)
				return err
			}
			f.Path = name
			f.closer = closer
			c.Files[i] = f
			return nil
		})
	}
	err := g.Wait()
	if err != nil {
		err = firstError(context.Cause(ctx), errs)
	}
	var total int64
	for _, f := range c.Files {
		if f == nil {
			continue
		}
		c.HeaderBytesRead += f.DataStart
		if err == nil {
			var ok bool
			if total, ok = addSize(total, f.DataSize()); !ok {
				err = fmt.Errorf("file %s: %w: the shards' tensor bytes add up to more than 2^63-1", joinRoot(c.Root, f.Path), ErrFileSize)
			}
		}
	}
	if err != nil {
		c.Close()
	}
	return err
}

// firstError picks the error to report from a cancelled group: the one that
// cancelled it, else (the caller's context ended) the first that says more
// than the bare context error, which the cause wraps.
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

// addSize adds two non-negative sizes, reporting false when the sum does not
// fit an int64 (four 2^62-byte files must not add up to 0).
func addSize(a, b int64) (int64, bool) {
	if b > math.MaxInt64-a {
		return 0, false
	}
	return a + b, true
}

// checkIndex verifies index and headers agree: every indexed tensor is in its
// named shard, every shard tensor is indexed to that shard exactly once, and
// total_size is the sum of tensor sizes. It works per shard, in parallel, on the
// shards' own name tables.
func (c *Checkpoint) checkIndex() error {
	if err := c.idx.checkUnique(joinRoot(c.Root, c.IndexName)); err != nil {
		return err
	}
	perFile := make([][]int32, len(c.Files))
	for i, e := range c.idx.entries {
		perFile[e.file] = append(perFile[e.file], int32(i))
	}
	at := make([][]int32, len(c.Files)) // each entry's tensor in its shard
	var g errgroup.Group
	g.SetLimit(OpenParallelism)
	for fi, f := range c.Files {
		g.Go(func() error {
			seen := make([]bool, len(f.Tensors))
			for _, ei := range perFile[fi] {
				name := c.idx.entries[ei].name
				ti, ok := f.index[name]
				if !ok {
					return fmt.Errorf("file %s: tensor %s: %w: indexed tensor is missing from the shard", joinRoot(c.Root, f.Path), quote.Name(name), ErrIndex)
				}
				at[fi] = append(at[fi], int32(ti))
				if seen[ti] {
					return fmt.Errorf("index %s: tensor %s: %w: listed twice", c.IndexName, quote.Name(name), ErrIndex)
				}
				seen[ti] = true
			}
			for ti, ok := range seen {
				if ok {
					continue
				}
				name := f.Tensors[ti].Name
				for _, e := range c.idx.entries {
					if e.name == name {
						return fmt.Errorf("file %s: tensor %s: %w: index places it in %s", joinRoot(c.Root, f.Path), quote.Name(name), ErrIndex, c.idx.files[e.file])
					}
				}
				return fmt.Errorf("file %s: tensor %s: %w: tensor is not in the index", joinRoot(c.Root, f.Path), quote.Name(name), ErrIndex)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if total := c.TotalBytes(); total != c.idx.totalSize {
		return fmt.Errorf("index %s: %w: total_size %d, shards hold %d bytes of tensors", joinRoot(c.Root, c.IndexName), ErrIndex, c.idx.totalSize, total)
	}
	// Entries now name the shards' own strings, so the index's bytes (as
	// large as every header's names together) are not kept alive by
	// substrings of them.
	for fi, eis := range perFile {
		for k, ei := range eis {
			c.idx.entries[ei].name = c.Files[fi].Tensors[at[fi][k]].Name
		}
	}
	return nil
}

// Index returns the checkpoint's index as a map (built on first use; the
// opener validates without it), or nil when the checkpoint has no index.
func (c *Checkpoint) Index() *Index {
	if c.idx == nil {
		return nil
	}
	c.indexOnce.Do(func() {
		// Validated already: no duplicates, so the conversion cannot fail.
		c.index, _ = c.idx.toIndex(c.IndexName)
	})
	return c.index
}

// buildNames makes the checkpoint-wide name table on first use.
func (c *Checkpoint) buildNames() {
	c.once.Do(func() {
		n := c.NumTensors()
		c.byName = make(map[string]loc, n)
		for fi, f := range c.Files {
			for ti, t := range f.Tensors {
				if prev, dup := c.byName[t.Name]; dup && c.dupErr == nil {
					c.dupErr = fmt.Errorf("file %s: tensor %s: %w: also in %s", joinRoot(c.Root, f.Path), quote.Name(t.Name), ErrDuplicate, c.Files[prev.file].Path)
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

// TotalBytes sums tensor sizes over all shards (Open has checked the sum
// fits an int64).
func (c *Checkpoint) TotalBytes() int64 {
	var n int64
	for _, f := range c.Files {
		n += f.DataSize()
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

// Close releases every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.Files {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}
