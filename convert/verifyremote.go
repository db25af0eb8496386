package convert

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// The reads of verify from a bucket DST: objects are hashed by reading them
// back, and shards read by range requests through a remote.Source.

// hash is an output file's size and sha256, read back.
func (d *destination) hash(rec fileRecord, prog func(int64)) (fileRecord, error) {
	if !d.remote() {
		return hashFile(d.path(rec.Name), prog)
	}
	size, _, ok, err := d.bucket.Stat(d.ctx, rec.Name)
	if err == nil && !ok {
		err = fmt.Errorf("no object %s", d.path(rec.Name))
	}
	if err != nil {
		return fileRecord{}, err
	}
	sum, err := d.obj.HashObject(rec.Name, size, prog)
	return fileRecord{Size: size, SHA256: sum}, err
}

// openShard opens an output shard: a local file, or an object read by
// range requests (each checked against the object's ETag).
func (d *destination) openShard(ctx context.Context, name string) (*safetensors.File, error) {
	if !d.remote() {
		return safetensors.OpenFile(d.path(name))
	}
	src, err := d.src()
	if err != nil {
		return nil, err
	}
	f, err := src.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return safetensors.ReadHeader(newReadAhead(f, f.Size()), f.Size(), d.path(name))
}

// Read-ahead of a shard read back from a bucket: verify reads each stream
// (a tensor's rows, its scales, a copied run) in small sequential pieces,
// which would cost a request each.
const (
	readAheadWindows = 4       // streams read at once
	readAheadSize    = 4 << 20 // bytes fetched per miss
)

// readAhead serves small reads from a few windows of the file, each filled
// by one large read on a miss (the least recently used one is refilled).
type readAhead struct {
	r    io.ReaderAt
	size int64
	mu   sync.Mutex
	win  [readAheadWindows]struct {
		off  int64
		buf  []byte
		used int
	}
	tick int
}

func newReadAhead(r io.ReaderAt, size int64) *readAhead { return &readAhead{r: r, size: size} }

func (ra *readAhead) ReadAt(p []byte, off int64) (int, error) {
	if len(p) >= readAheadSize {
		return ra.r.ReadAt(p, off)
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	n := 0
	for n < len(p) {
		at := off + int64(n)
		if at >= ra.size {
			return n, io.EOF
		}
		w, hit := 0, false // the window holding at, else the least recently used
		for i := range ra.win {
			if b := ra.win[i].buf; b != nil && at >= ra.win[i].off && at < ra.win[i].off+int64(len(b)) {
				w, hit = i, true
				break
			}
			if ra.win[i].used < ra.win[w].used {
				w = i
			}
		}
		if !hit {
			buf := bufs.Grow(ra.win[w].buf, readAheadSize)[:min(int64(readAheadSize), ra.size-at)]
			m, err := ra.r.ReadAt(buf, at)
			if m < len(buf) {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				ra.win[w].buf = nil
				return n, err
			}
			ra.win[w].off, ra.win[w].buf = at, buf
		}
		ra.tick++
		ra.win[w].used = ra.tick
		n += copy(p[n:], ra.win[w].buf[at-ra.win[w].off:])
	}
	return n, nil
}
