package convert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/objdest"
	"github.com/k3ckpt/k3ckpt/internal/objstore"
	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// destination is where a conversion's files go: a local directory (DST
// itself), or the objects under an s3:// or gs:// prefix.
//
// A bucket has no rename, append or lock, so a bucket DST keeps the run's
// bookkeeping (a local DST's stateDir, the staged index and configs, the
// spills) in a local state directory, dir. Output files are multipart
// uploads, which no reader sees before they complete; the small files are
// single PUTs, the manifest last. A claim object ties the prefix to one state
// directory (see objdest.Dest.Claim).
type destination struct {
	name   string // DST as given, in messages
	dir    string // the local DST, or a bucket DST's state directory
	obj    *objdest.Dest
	bucket *objstore.Bucket               // obj's
	ctx    context.Context                // bounds the bucket's requests
	src    func() (*remote.Source, error) // reads a bucket's shards back (verify)
}

// openDestination resolves DST: a local directory, or a bucket prefix with
// its state directory (stateDir, "" for objdest's default).
func openDestination(ctx context.Context, dst, stateDir string, conns int) (*destination, error) {
	if !objstore.IsURL(dst) {
		return localDest(dst), nil
	}
	o, err := objdest.Open(ctx, dst, stateDir, conns, ErrDestination, errInUse)
	if err != nil {
		return nil, err
	}
	src := sync.OnceValues(func() (*remote.Source, error) {
		return remote.NewStoreSource(context.WithoutCancel(ctx), o.Bucket.URL.Dir(), o.Bucket, remote.Options{})
	})
	return &destination{name: o.Name, dir: o.StateDir, obj: o, bucket: o.Bucket, ctx: ctx, src: src}, nil
}

// localDest is the destination of local directory dst.
func localDest(dst string) *destination {
	return &destination{name: dst, dir: dst, ctx: context.Background()}
}

// remote reports whether DST is a bucket (nil: a local one, as in tests).
func (d *destination) remote() bool { return d != nil && d.bucket != nil }

// path is where output file name goes: a local path, or the object's URL.
func (d *destination) path(name string) string {
	if d.remote() {
		return d.bucket.URL.Dir() + name
	}
	return filepath.Join(d.dir, filepath.FromSlash(name))
}

// create starts output file path (one of d.path's) on pool's buffers.
func (d *destination) create(path string, pool *filewrite.Pool, prog func(int64)) (*filewrite.File, error) {
	if !d.remote() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		return filewrite.Create(path, pool, prog)
	}
	name, ok := strings.CutPrefix(path, d.bucket.URL.Dir())
	if !ok {
		return nil, fmt.Errorf("%s is not under %s", path, d.name)
	}
	return d.obj.Create(name, pool, prog)
}

// etag is the ETag of output object name as this run completed it ("" if none).
func (d *destination) etag(name string) string {
	if !d.remote() {
		return ""
	}
	return d.obj.ETag(name)
}

// spillPath is the local name beside which an output file's spill goes.
func (d *destination) spillPath(path string) string {
	if !d.remote() {
		return path
	}
	return filepath.Join(d.dir, filepath.Base(path))
}

// kept reports whether output file name is still the file rec records: a
// local file of its size and sha256; an object of its size and ETag etag, or
// with no ETag (a finished conversion's manifest) of its sha256 read back.
// It returns the ETag to record.
func (d *destination) kept(name string, rec fileRecord, etag string, prog func(int64)) (bool, string, error) {
	if !d.remote() {
		path := d.path(name)
		fi, err := os.Stat(path)
		if err != nil || fi.Size() != rec.Size || !fi.Mode().IsRegular() {
			return false, "", nil
		}
		got, err := hashFile(path, prog)
		if err != nil {
			return false, "", err
		}
		return got.SHA256 == rec.SHA256, "", nil
	}
	return d.obj.Kept(name, rec.Size, rec.SHA256, etag, prog)
}

// present reports whether output file name has size bytes (and, in a
// bucket, the ETag recorded when given).
func (d *destination) present(name string, size int64, etag string) (bool, error) {
	if !d.remote() {
		fi, err := os.Stat(d.path(name))
		return err == nil && fi.Size() == size, nil
	}
	return d.obj.Present(name, size, etag)
}

// readFile reads a small output file (a config, the index, the report).
func (d *destination) readFile(name string) ([]byte, error) {
	if !d.remote() {
		return fsx.ReadFile(d.path(name), maxStateFile)
	}
	return d.obj.ReadFile(name, maxStateFile)
}

// readManifest reads DST's manifest (ErrNotExist wrapped when absent),
// whose names must be plain relative paths inside DST.
func (d *destination) readManifest() (*dstManifest, error) {
	path := d.path(ManifestName)
	b, err := d.readFile(ManifestName)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	var m dstManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %s: %w", path, err)
	}
	if err := m.index(path); err != nil {
		return nil, err
	}
	return &m, nil
}

// writeManifest writes the manifest, DST's last file.
func (d *destination) writeManifest(m *dstManifest) error {
	b, err := json.MarshalIndent(m, "", "  ") // indented, for people to read
	if err != nil {
		return err
	}
	if !d.remote() {
		return writeJSONBytes(filepath.Join(d.dir, ManifestName), b)
	}
	return d.obj.PutBytes(ManifestName, append(b, '\n'))
}

// removeManifest deletes a finished conversion's manifest (none: nothing).
func (d *destination) removeManifest() error {
	if d.remote() {
		return d.bucket.Delete(d.ctx, ManifestName)
	}
	if err := os.Remove(filepath.Join(d.dir, ManifestName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// abortOwn removes what a killed run left of units: a bucket's unfinished
// uploads, a local DST's temporaries.
func (d *destination) abortOwn(units []unit) error {
	if !d.remote() {
		return removeOwnTemps(d.dir, units)
	}
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.Name
	}
	_, err := d.obj.AbortOwn(names)
	return err
}

// claim ties a bucket DST to this state directory, whose lock the caller holds.
func (d *destination) claim() error {
	if !d.remote() {
		return nil
	}
	return d.obj.Claim()
}

// unclaim removes the claim once the conversion is finalized.
func (d *destination) unclaim() error {
	if !d.remote() {
		return nil
	}
	return d.obj.Unclaim()
}

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

// Read-ahead of a shard read back from a bucket: verify reads each stream (a
// tensor's rows, its scales, a copied run) in small pieces, a request each.
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
