package safetensors

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"golang.org/x/sync/errgroup"
)

// shards is a checkpoint opened for one pass over its shard headers: Walk
// reads and validates every header as Open does and hands it to a callback,
// then lets it go, so an audit costs the index and the headers in flight.
type shards struct {
	// Names lists the shards, sorted, as Checkpoint.Files (read only).
	Names []string

	c      *Checkpoint // Root, IndexName, src, idx and HeaderBytesRead; no Files
	listed bool        // names come from a directory listing the index must match

	parsed   chan struct{} // closed when the index is parsed (nil: no index)
	parseErr error

	prepOnce sync.Once
	prepErr  error
	perFile  [][]int32 // per entry of idx.files: its index entries

	walked atomic.Bool
}

// OpenShards finds the shards of a checkpoint (any location Open takes) and
// reads its index, but no header yet.
func OpenShards(ctx context.Context, p string) (*shards, error) {
	ctx, cancel := remoteDeadline(ctx, p)
	defer cancel()
	return openShards(ctx, p, OpenOptions{})
}

// remoteDeadline bounds an opening of a remote source by remoteOpenTimeout
// when ctx has no deadline of its own.
func remoteDeadline(ctx context.Context, p string) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); !ok && remote.IsRemote(p) {
		return context.WithTimeout(ctx, remoteOpenTimeout)
	}
	return ctx, func() {}
}

// BytesRead reports the index and header bytes read so far and the bytes a
// remote source has downloaded (0 for a local one; remotely, both are that).
func (s *shards) BytesRead() (read, fetched int64) {
	fetched = s.c.BytesFetched()
	if fetched > 0 {
		return fetched, fetched
	}
	return s.c.HeaderBytesRead, fetched
}

// ReadAux reads a side file next to the shards, as Checkpoint.ReadAux does.
func (s *shards) ReadAux(name string) ([]byte, error) { return s.c.ReadAux(name) }

// Walk reads every shard's header and calls fn with its position in Names
// and the validated File, concurrently and in no fixed order. The File's
// reader is closed when fn returns; its names and shapes stay valid, unless
// transient: then fn keeps nothing of the File and each header's memory is
// reused for the next. Errors, and their precedence, are Open's; fn's first
// error ends the walk. The checkpoint is valid only if Walk, which may be
// called once, returns nil.
func (s *shards) Walk(ctx context.Context, transient bool, fn func(i int, f *File) error) error {
	ctx, cancel := remoteDeadline(ctx, s.c.Root)
	defer cancel()
	return s.walk(ctx, fn, false, transient)
}

// openShards resolves p to a source, its root and its index (if any).
func openShards(ctx context.Context, p string, o OpenOptions) (*shards, error) {
	if remote.IsRemote(p) {
		return openRemote(ctx, p, o)
	}
	return openLocal(ctx, p)
}

func openLocal(ctx context.Context, p string) (*shards, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	if st.IsDir() {
		return shardsWith(ctx, &dirSource{root: p}, p, "")
	}
	dir, base := filepath.Split(p)
	if dir == "" {
		dir = "."
	}
	if strings.HasSuffix(base, ".json") {
		return shardsWith(ctx, &dirSource{root: dir}, dir, base)
	}
	return shardsSingle(&dirSource{root: dir}, dir, base), nil
}

// shardsWith opens a directory-like root through indexName ("": IndexName if
// present, else every .safetensors file). Where the root can be listed, the
// index is parsed while the first headers are read.
func shardsWith(ctx context.Context, src source, root, indexName string) (*shards, error) {
	s := &shards{c: newCheckpoint(root, src)}
	c := s.c
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
		s.Names = names
		return s, nil
	}
	c.IndexName = indexName
	indexPath := joinRoot(root, indexName)
	b, err := src.readAux(ctx, indexName, maxIndexSize)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", indexPath, err)
	}
	c.HeaderBytesRead += int64(len(b))
	c.IndexNewline = len(b) > 0 && b[len(b)-1] == '\n'
	present, listErr := src.list()
	s.parsed = make(chan struct{})
	go func() {
		defer close(s.parsed)
		c.idx, s.parseErr = parseIndexData(b, indexPath)
	}()
	if listErr == nil {
		s.Names, s.listed = present, true
		return s, nil
	}
	<-s.parsed
	if s.parseErr != nil {
		return nil, s.parseErr
	}
	s.Names = c.idx.files
	return s, nil
}

func shardsSingle(src source, root, name string) *shards {
	return &shards{c: newCheckpoint(root, src), Names: []string{name}}
}

// prepare waits for the index and checks it, once, against the listed
// shards and for tensors listed twice, then groups its entries by shard.
func (s *shards) prepare(ctx context.Context) error {
	s.prepOnce.Do(func() {
		<-s.parsed
		if s.prepErr = s.parseErr; s.prepErr != nil {
			return
		}
		c := s.c
		if s.listed {
			for _, f := range s.Names {
				if _, ok := slices.BinarySearch(c.idx.files, f); !ok {
					s.prepErr = fmt.Errorf("file %s: %w: shard is not in %s", joinRoot(c.Root, f), ErrIndex, c.IndexName)
					return
				}
			}
			for _, f := range c.idx.files {
				if _, ok := slices.BinarySearch(s.Names, f); !ok {
					s.prepErr = s.notAShard(ctx, f)
					return
				}
			}
		}
		if s.prepErr = c.idx.checkUnique(joinRoot(c.Root, c.IndexName)); s.prepErr != nil {
			return
		}
		s.perFile = make([][]int32, len(c.idx.files))
		for i, e := range c.idx.entries {
			s.perFile[e.file] = append(s.perFile[e.file], int32(i))
		}
	})
	return s.prepErr
}

// notAShard says why a file the index names is not among the listed shards.
func (s *shards) notAShard(ctx context.Context, f string) error {
	_, _, closer, err := s.c.src.open(ctx, f)
	if err != nil {
		return fmt.Errorf("file %s: %w", joinRoot(s.c.Root, f), err)
	}
	if closer != nil {
		closer.Close()
	}
	return fmt.Errorf("file %s: %w: named by %s but not a shard here", joinRoot(s.c.Root, f), ErrNotFound, s.c.IndexName)
}

// checkAgainstIndex verifies that the index lists exactly the tensors of
// shard f, each once, and places them in f.
func (s *shards) checkAgainstIndex(f *File) error {
	c := s.c
	fi, ok := slices.BinarySearch(c.idx.files, f.Path)
	if !ok {
		return fmt.Errorf("file %s: %w: shard is not in %s", joinRoot(c.Root, f.Path), ErrIndex, c.IndexName)
	}
	seen := make([]bool, len(f.Tensors))
	for _, ei := range s.perFile[fi] {
		name := c.idx.entries[ei].name
		ti, ok := f.index[name]
		if !ok {
			return fmt.Errorf("file %s: tensor %s: %w: indexed tensor is missing from the shard", joinRoot(c.Root, f.Path), termtext.Name(name), ErrIndex)
		}
		if seen[ti] {
			return fmt.Errorf("index %s: tensor %s: %w: listed twice", c.IndexName, termtext.Name(name), ErrIndex)
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
				return fmt.Errorf("file %s: tensor %s: %w: index places it in %s", joinRoot(c.Root, f.Path), termtext.Name(name), ErrIndex, c.idx.files[e.file])
			}
		}
		return fmt.Errorf("file %s: tensor %s: %w: tensor is not in the index", joinRoot(c.Root, f.Path), termtext.Name(name), ErrIndex)
	}
	return nil
}

// walk reads the headers of every shard in parallel; a bad header cancels
// the rest. Each is checked against the index and handed to fn, then closed
// unless keep; reuse parses each header into the memory of one done with.
func (s *shards) walk(ctx context.Context, fn func(int, *File) error, keep, reuse bool) error {
	if s.walked.Swap(true) {
		return fmt.Errorf("walk %s: the shards were walked already", s.c.Root)
	}
	c := s.c
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu       sync.Mutex
		total    int64
		sizeErr  error
		checkErr = make([]error, len(s.Names)) // index disagreements, by shard
		names    *nameSet
	)
	indexed := s.parsed != nil // c.idx is set once the parse is done
	if !indexed && !keep && len(s.Names) > 1 {
		names = &nameSet{}
	}
	errs := make([]error, len(s.Names))
	fail := func(i int, err error) error {
		errs[i] = err
		cancel(err)
		return err
	}
	mems := sync.Pool{New: func() any { return &headerMem{} }} // with reuse
	var g errgroup.Group
	g.SetLimit(s.parallelism(keep))
	for i, name := range s.Names {
		g.Go(func() error {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			var mem *headerMem
			if reuse {
				mem = mems.Get().(*headerMem)
				defer mems.Put(mem) // last: fn and the index check are done with f
			}
			f, err := c.readShard(ctx, name, cancel, mem)
			if err != nil {
				return fail(i, err)
			}
			handed := false // with keep, a File handed to fn stays open
			defer func() {
				if !keep || !handed {
					f.Close()
				}
			}()
			mu.Lock()
			c.HeaderBytesRead += f.DataStart
			var ok bool
			if total, ok = addSize(total, f.Size-f.DataStart); !ok && sizeErr == nil {
				sizeErr = fmt.Errorf("file %s: %w: the shards' tensor bytes add up to more than 2^63-1", joinRoot(c.Root, f.Path), errFileSize)
			}
			mu.Unlock()
			// checked compares f with the index; its errors are reported
			// after every header (the index's own first, then by shard).
			checked := func() bool {
				if s.prepare(ctx) != nil {
					return false
				}
				checkErr[i] = s.checkAgainstIndex(f)
				return checkErr[i] == nil
			}
			// While the index is still being parsed, fn works on the shard
			// instead of waiting; it is checked afterwards.
			early := indexed && !closed(s.parsed)
			if indexed && !early && !checked() {
				return nil
			}
			names.add(i, f)
			handed = true
			if err := fn(i, f); err != nil {
				return fail(i, err)
			}
			if early {
				checked()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return firstError(context.Cause(ctx), errs)
	}
	if indexed {
		if err := s.prepare(ctx); err != nil {
			return err
		}
	}
	if err := cmp.Or(append([]error{sizeErr}, checkErr...)...); err != nil { // the first set
		return err
	}
	if err := names.err(c, s.Names); err != nil {
		return err
	}
	if indexed && total != c.idx.totalSize {
		return fmt.Errorf("index %s: %w: total_size %d, shards hold %d bytes of tensors", joinRoot(c.Root, c.IndexName), ErrIndex, c.idx.totalSize, total)
	}
	return nil
}

// parallelism is how many headers a walk reads at once: openParallelism
// remotely (requests wait on the network), else one per CPU and one more.
func (s *shards) parallelism(keep bool) int {
	if _, remote := s.c.src.(*remoteSource); remote || keep {
		return openParallelism
	}
	return min(openParallelism, runtime.GOMAXPROCS(0)+1)
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// readShard opens one shard and reads its header; errors name the full path.
func (c *Checkpoint) readShard(ctx context.Context, name string, stop func(error), mem *headerMem) (*File, error) {
	ra, size, closer, err := c.src.open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", joinRoot(c.Root, name), err)
	}
	f, err := readHeader(ctx, ra, size, joinRoot(c.Root, name), stop, mem)
	if err != nil {
		if closer != nil {
			closer.Close()
		}
		return nil, err
	}
	f.Path = name
	f.closer = closer
	return f, nil
}

// nameSet finds a tensor name in two shards of an unkept checkpoint without
// an index (a nil set checks nothing).
type nameSet struct {
	mu     sync.Mutex
	byName map[string]int32
	dup    [2]int32 // first duplicate found: the shards, in Names order
	dupOf  string
}

func (n *nameSet) add(fi int, f *File) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byName == nil {
		n.byName = make(map[string]int32, len(f.Tensors))
	}
	for _, t := range f.Tensors {
		if prev, ok := n.byName[t.Name]; ok {
			if n.dupOf == "" {
				n.dup, n.dupOf = [2]int32{min(prev, int32(fi)), max(prev, int32(fi))}, strings.Clone(t.Name)
			}
			continue
		}
		n.byName[strings.Clone(t.Name)] = int32(fi)
	}
}

func (n *nameSet) err(c *Checkpoint, names []string) error {
	if n == nil || n.dupOf == "" {
		return nil
	}
	return fmt.Errorf("file %s: tensor %s: %w: also in %s", joinRoot(c.Root, names[n.dup[1]]), termtext.Name(n.dupOf), errDuplicate, names[n.dup[0]])
}

func newCheckpoint(root string, src source) *Checkpoint {
	c := &Checkpoint{Root: root, src: src}
	if r, ok := src.(*remoteSource); ok {
		c.Remote = r.s
	}
	return c
}
