package safetensors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/objstore"
	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// remoteOpenTimeout bounds opening a remote checkpoint when ctx has no deadline.
const remoteOpenTimeout = 5 * time.Minute

// OpenOptions tune how a checkpoint is opened. The zero value is ready to use.
type OpenOptions struct {
	// Remote tunes the reads of a remote source.
	Remote remote.Options
	// Env looks up HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE and the rest of
	// huggingface_hub's settings (nil: os.Getenv).
	Env func(key string) string
	// Connections sizes an s3:// or gs:// source's HTTP transport for that
	// many parallel requests (0: objstore's default).
	Connections int
}

// remoteSource serves shards through a remote.Source's range reads, side files whole.
type remoteSource struct {
	s        *remote.Source
	stop     context.CancelFunc // ends every request of the source (Checkpoint.Close)
	listable bool               // an object store: list names its objects

	mu    sync.Mutex
	small map[string][]byte // small files read whole by exists, handed to readAux once
}

func (r *remoteSource) open(ctx context.Context, name string) (io.ReaderAt, int64, io.Closer, error) {
	f, err := r.s.Open(ctx, name)
	if err != nil {
		return nil, 0, nil, remoteErr(err)
	}
	return f, f.Size(), nil, nil
}

func (r *remoteSource) readAux(ctx context.Context, name string, limit int64) ([]byte, error) {
	r.mu.Lock()
	b, ok := r.small[name]
	delete(r.small, name)
	r.mu.Unlock()
	if ok && int64(len(b)) <= limit {
		return b, nil
	}
	b, err := r.s.ReadSmall(ctx, name, limit)
	if err != nil {
		return nil, remoteErr(err)
	}
	return b, nil
}

// exists asks the server for name: false only when it answers 404 or 410. A
// shard is probed with one range request; any other file (an index) is read
// whole and kept for the readAux that follows.
func (r *remoteSource) exists(ctx context.Context, name string) (bool, error) {
	var err error
	if strings.HasSuffix(name, ".safetensors") {
		_, err = r.s.Open(ctx, name)
	} else {
		var b []byte
		if b, err = r.s.ReadSmall(ctx, name, maxIndexSize); err == nil {
			r.mu.Lock()
			if r.small == nil {
				r.small = map[string][]byte{}
			}
			r.small[name] = b
			r.mu.Unlock()
		}
	}
	if errors.Is(err, remote.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, remoteErr(err)
	}
	return true, nil
}

// list names the *.safetensors objects directly under an object store's prefix.
func (r *remoteSource) list() ([]string, error) {
	if !r.listable {
		return nil, fmt.Errorf("%w: a remote directory cannot be listed; it needs %s", ErrNotFound, IndexName)
	}
	files, err := r.s.List(context.Background())
	if err != nil {
		return nil, remoteErr(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f.Name, ".safetensors") && !strings.HasPrefix(f.Name, ".") && !strings.Contains(f.Name, "/") {
			out = append(out, f.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// remoteErr wraps an error of the remote package so that it matches
// errRemote (and ErrNotFound for a missing file) while reading as the remote
// package's message: %.0w prints none of a sentinel's text. A bare context
// error is named in words.
func remoteErr(err error) error {
	switch {
	case errors.Is(err, errRemote):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("timed out: %w", err)
	case errors.Is(err, context.Canceled):
		err = fmt.Errorf("canceled: %w", err)
	}
	if errors.Is(err, remote.ErrNotFound) {
		return fmt.Errorf("%w%.0w%.0w", err, errRemote, ErrNotFound)
	}
	return fmt.Errorf("%w%.0w", err, errRemote)
}

// openRemote finds the shards of a remote location (offline, an hf://
// reference's cached snapshot); the caller bounds ctx.
func openRemote(ctx context.Context, raw string, o OpenOptions) (*shards, error) {
	if objstore.IsURL(raw) {
		return openObjstore(ctx, raw, o)
	}
	loc, err := remote.Resolve(raw, o.Env)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", raw, remoteErr(err))
	}
	if loc.LocalDir != "" {
		p := loc.LocalDir
		if loc.Name != "" {
			p = filepath.Join(p, loc.Name)
		}
		return openLocal(ctx, p)
	}
	// The source outlives the opening, until Close.
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s, err := remote.NewSource(sctx, loc, o.Remote)
	if err != nil {
		stop()
		return nil, fmt.Errorf("open %s: %w", raw, remoteErr(err))
	}
	return openRemoteSource(ctx, &remoteSource{s: s, stop: stop}, raw, loc.Base, loc.Name)
}

// openObjstore opens an s3:// or gs:// location: a prefix holding the
// checkpoint, an index under it, or one .safetensors object.
func openObjstore(ctx context.Context, raw string, o OpenOptions) (*shards, error) {
	u, err := objstore.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", raw, remoteErr(err))
	}
	dir, name := u, ""
	if strings.HasSuffix(u.Key, ".json") || strings.HasSuffix(u.Key, ".safetensors") {
		i := strings.LastIndexByte(u.Key, '/')
		dir.Key, name = u.Key[:max(i, 0)], u.Key[i+1:]
	}
	b, err := objstore.New(ctx, dir, objstore.Options{Env: o.Env, Connections: o.Connections})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", raw, remoteErr(err))
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s, err := remote.NewStoreSource(sctx, dir.Dir(), b, o.Remote)
	if err != nil {
		stop()
		return nil, fmt.Errorf("open %s: %w", raw, remoteErr(err))
	}
	b.OnRetry(s.Retried)
	return openRemoteSource(ctx, &remoteSource{s: s, stop: stop, listable: true}, raw, dir.Dir(), name)
}

// openRemoteSource finds the shards of src: name "" a directory with an
// index or a model.safetensors (or, where src can be listed, any shards),
// a .json an index, anything else a single file. On failure it stops src.
func openRemoteSource(ctx context.Context, src *remoteSource, raw, base, name string) (sh *shards, err error) {
	defer func() {
		if err != nil {
			src.stop()
		}
	}()
	switch {
	case strings.HasSuffix(name, ".json"):
		return shardsWith(ctx, src, base, name)
	case name != "":
		return shardsSingle(src, base, name), nil
	}
	hasIndex, err := src.exists(ctx, IndexName)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", base+IndexName, err)
	}
	if hasIndex {
		return shardsWith(ctx, src, base, IndexName)
	}
	single, err := src.exists(ctx, "model.safetensors")
	switch {
	case err != nil:
		return nil, fmt.Errorf("open %s: %w", raw, err)
	case single:
		return shardsSingle(src, base, "model.safetensors"), nil
	case src.listable:
		return shardsWith(ctx, src, base, "")
	}
	return nil, fmt.Errorf("open %s: %w: neither %s nor model.safetensors", raw, ErrNotFound, IndexName)
}

// BytesFetched reports the bytes a remote checkpoint has downloaded (0 for a local one).
func (c *Checkpoint) BytesFetched() int64 {
	if s := c.Remote; s != nil {
		return s.Stats().Fetched
	}
	return 0
}
