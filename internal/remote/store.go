package remote

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
)

// store is an object store that a Source reads through instead of plain
// HTTP GETs (an S3 bucket under a prefix): it signs its requests and retries
// them with its own SDK's policy, so a Source over a Store keeps only the
// range planning, the size and ETag checks and the accounting.
//
// Its errors are *Error values (File naming the object's full address), so
// that they match this package's sentinels: ErrNotFound, ErrAuth, ErrChanged
// and the rest.
type store interface {
	// Get reads up to len(p) bytes of object name at off into p and returns
	// how many it stored, with the object's size and ETag. With etag not
	// "", the read is conditional: an object whose ETag is no longer etag
	// fails with ErrChanged. An empty object read at 0 returns n = 0.
	// received hears every body byte as it arrives.
	Get(ctx context.Context, name, etag string, p []byte, off int64, received func(int64)) (n int, size int64, gotETag string, err error)
	// ReadAll reads a whole object of at most limit bytes.
	ReadAll(ctx context.Context, name string, limit int64) ([]byte, error)
	// List names every object under the store's prefix, with its size,
	// relative to the prefix.
	List(ctx context.Context) ([]RepoFile, error)
}

// NewStoreSource prepares reads from st, whose objects are named base+name
// in errors and by URL (base ends in '/', e.g. s3://bucket/prefix/). ctx
// bounds every read, as for NewSource; only o.Progress of the options
// applies (the store has its own client and retries).
func NewStoreSource(ctx context.Context, base string, st store, o Options) (*Source, error) {
	if !strings.HasSuffix(base, "/") {
		return nil, &Error{Kind: ErrSource, Detail: fmt.Sprintf("base %q does not end in '/'", base)}
	}
	return &Source{loc: location{Base: base}, o: o.withDefaults(), ctx: ctx, files: map[string]*fileEntry{}, store: st}, nil
}

// readStore is File.read for a source over a Store: one conditional read
// (the store retries), the probe learning the size and ETag.
func (f *File) readStore(ctx context.Context, p []byte, off int64, counter *atomic.Int64) (int, error) {
	s := f.src
	ctx, stop := s.bound(ctx)
	defer stop()
	s.requests.Add(1)
	probe := f.size < 0
	etag := f.etag
	if probe {
		etag = ""
	}
	n, size, got, err := s.store.Get(ctx, f.Name, etag, p, off, s.received(counter))
	if err != nil {
		if ctx.Err() != nil {
			return n, context.Cause(ctx)
		}
		return n, err
	}
	if probe {
		f.size, f.etag = size, got
		return n, nil
	}
	if size != f.size {
		return n, &Error{File: s.loc.Base + f.Name, Kind: ErrChanged, Detail: fmt.Sprintf("its size was %d bytes, now %d", f.size, size)}
	}
	if n != len(p) {
		return n, &Error{File: s.loc.Base + f.Name, Kind: ErrProtocol, Detail: fmt.Sprintf("%d bytes for a read of %d at offset %d", n, len(p), off)}
	}
	return n, nil
}
