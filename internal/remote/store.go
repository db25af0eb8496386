package remote

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
)

// store is an object store that a Source reads through instead of HTTP GETs
// (an S3 bucket under a prefix): it signs and retries its requests itself.
// Its errors are *Error values, File naming the object's full address.
type store interface {
	// Get reads up to len(p) bytes of object name at off into p, returning
	// how many, the object's size and its ETag; with etag not "", another
	// ETag fails with ErrChanged. received hears every body byte.
	Get(ctx context.Context, name, etag string, p []byte, off int64, received func(int64)) (n int, size int64, gotETag string, err error)
	// ReadAll reads a whole object of at most limit bytes.
	ReadAll(ctx context.Context, name string, limit int64) ([]byte, error)
	// List names every object under the prefix, relative to it.
	List(ctx context.Context) ([]RepoFile, error)
}

// NewStoreSource prepares reads from st, whose objects are named base+name
// (base ends in '/', e.g. s3://bucket/prefix/). ctx bounds every read, as for
// NewSource; of the options only o.Progress applies.
func NewStoreSource(ctx context.Context, base string, st store, o Options) (*Source, error) {
	if !strings.HasSuffix(base, "/") {
		return nil, &Error{Kind: ErrSource, Detail: fmt.Sprintf("base %q does not end in '/'", base)}
	}
	return &Source{loc: location{Base: base}, o: o.withDefaults(), ctx: ctx, store: st}, nil
}

// readStore is File.read for a source over a store: one conditional read,
// the probe learning the size and ETag.
func (f *File) readStore(ctx context.Context, p []byte, off int64, counter *atomic.Int64) (int, error) {
	s := f.src
	ctx, stop := s.bound(ctx)
	defer stop()
	s.requests.Add(1)
	probe := f.size < 0 // f.etag is "" then
	n, size, got, err := s.store.Get(ctx, f.Name, f.etag, p, off, s.received(counter))
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
