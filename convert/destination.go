package convert

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/objstore"
	"github.com/k3ckpt/k3ckpt/internal/remote"
)

// destination is where a conversion's files go: a local directory (DST
// itself), or the objects under an s3:// or gs:// prefix.
//
// A bucket has no rename, no append and no lock, so a bucket DST keeps the
// run's bookkeeping where those exist: in a local state directory (dir),
// which holds what a local DST holds in its StateDir (the plan record, the
// done records, the locks) plus the index and configs staged before upload
// and the spills of codes. Each output file streams through filewrite into
// a multipart upload, which no reader sees under its key before it is
// complete; the index, configs and manifest are single PUTs, complete or
// absent; the manifest goes last. A claim object under the prefix, created
// with a conditional write, ties the prefix to one state directory, so that
// runs with different state directories cannot write one prefix at once.
type destination struct {
	name   string // DST as given, in messages
	dir    string // the local DST, or a bucket DST's state directory
	bucket *objstore.Bucket
	ctx    context.Context // bounds the bucket's requests

	etags sync.Map // object name → ETag of an object this run completed

	srcOnce sync.Once // src reads a bucket's shards back (verify)
	src     *remote.Source
	srcErr  error
}

// claimName is the key, under a bucket DST's prefix, of the object that
// ties the prefix to the state directory of the runs writing it (see
// destination.claim); finalizing removes it.
const claimName = stateDir + "/claim"

// openDestination resolves DST: a local directory, or a bucket prefix with
// its state directory (stateDir, or "" for defaultStateDir). conns sizes
// the bucket client's connections.
func openDestination(ctx context.Context, dst, stateDir string, conns int) (*destination, error) {
	if !objstore.IsURL(dst) {
		return localDest(dst), nil
	}
	u, err := objstore.Parse(dst)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDestination, err)
	}
	if stateDir == "" {
		if stateDir, err = defaultStateDir(u); err != nil {
			return nil, err
		}
	}
	b, err := objstore.New(ctx, u, objstore.Options{Connections: conns})
	if err != nil {
		return nil, err
	}
	return &destination{name: u.String(), dir: stateDir, bucket: b, ctx: ctx}, nil
}

// defaultStateDir is where the bookkeeping of a bucket DST lives unless
// --state-dir says otherwise: the user's cache directory, named after the
// location (scheme, bucket, key prefix), so that a rerun on the same
// machine finds it.
func defaultStateDir(u objstore.URL) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: %s: no state directory (%v); pass --state-dir", ErrDestination, u, err)
	}
	parts := []string{cache, "k3ckpt", "dst", u.Scheme, u.Bucket}
	if u.Key != "" {
		parts = append(parts, filepath.FromSlash(u.Key))
	}
	return filepath.Join(parts...), nil
}

// remote reports whether DST is a bucket (nil: a local one, as the
// scratch of a test that writes one file).
func (d *destination) remote() bool { return d != nil && d.bucket != nil }

// path is where output file name goes: a local path, or the object's URL.
func (d *destination) path(name string) string {
	if d.remote() {
		return d.bucket.URL().Dir() + name
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
	name, ok := strings.CutPrefix(path, d.bucket.URL().Dir())
	if !ok {
		return nil, fmt.Errorf("%s is not under %s", path, d.name)
	}
	up, err := d.bucket.Create(d.ctx, name)
	if err != nil {
		return nil, err
	}
	return filewrite.CreateSink(&trackedUpload{up, d, name}, pool, prog), nil
}

// upload is what objstore.Bucket.Create returns.
type upload interface {
	WriteAt(p []byte, off int64) (int, error)
	Commit() error
	Abort() error
	Final() string
	ETag() string
}

// trackedUpload keeps the ETag of the completed object for its done record.
type trackedUpload struct {
	upload
	d    *destination
	name string
}

func (t *trackedUpload) Commit() error {
	if err := t.upload.Commit(); err != nil {
		return err
	}
	t.d.etags.Store(t.name, t.upload.ETag())
	return nil
}

// etag is the ETag of output object name as this run completed it ("" for
// a local DST or an object not written by this run).
func (d *destination) etag(name string) string {
	v, _ := d.etags.Load(name)
	s, _ := v.(string)
	return s
}

// spillPath is the local name beside which an output file's spill goes:
// the file itself when local, the state directory for an object.
func (d *destination) spillPath(path string) string {
	if !d.remote() {
		return path
	}
	return filepath.Join(d.dir, filepath.Base(path))
}

// kept reports whether output file name, recorded as rec (and, in a
// bucket, completed with ETag etag, "" when the record has none), is still
// that file: a local file of the recorded size and sha256; an object of the
// recorded size and ETag, or, without a recorded ETag (a finished
// conversion's manifest), of the recorded sha256 read back. It returns the
// ETag to record.
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
	size, tag, ok, err := d.bucket.Stat(d.ctx, name)
	if err != nil || !ok || size != rec.Size {
		return false, "", err
	}
	if etag != "" {
		if tag != etag {
			return false, "", nil
		}
		prog(size)
		return true, tag, nil
	}
	sum, err := d.hashObject(name, size, prog)
	if err != nil {
		return false, "", err
	}
	return sum == rec.SHA256, tag, nil
}

// hashObject reads an object back in large ranges and returns its sha256.
func (d *destination) hashObject(name string, size int64, prog func(int64)) (string, error) {
	h := sha256.New()
	buf := make([]byte, 8<<20)
	etag := ""
	for off := int64(0); off < size; {
		n, _, tag, err := d.bucket.Get(d.ctx, name, etag, buf[:min(int64(len(buf)), size-off)], off, prog)
		if err != nil {
			return "", err
		}
		if n == 0 {
			return "", fmt.Errorf("%s: %w: shorter than its %d bytes", d.path(name), ErrChanged, size)
		}
		etag = tag
		h.Write(buf[:n])
		off += int64(n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// present reports whether output file name has size bytes (and, in a
// bucket, the ETag recorded when given).
func (d *destination) present(name string, size int64, etag string) (bool, error) {
	if !d.remote() {
		fi, err := os.Stat(d.path(name))
		return err == nil && fi.Size() == size, nil
	}
	got, tag, ok, err := d.bucket.Stat(d.ctx, name)
	if err != nil {
		return false, err
	}
	return ok && got == size && (etag == "" || tag == etag), nil
}

// putStaged uploads the synced local file f as output name of a bucket.
func (d *destination) putStaged(name string, f *os.File) error {
	fi, err := f.Stat()
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err == nil {
		_, err = d.bucket.Put(d.ctx, name, f, fi.Size())
	}
	return err
}

// putLocal uploads local file path as output name of a bucket, then
// removes the local copy.
func (d *destination) putLocal(name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = d.putStaged(name, f)
	f.Close()
	if err != nil {
		return err
	}
	return os.Remove(path)
}

// readFile reads a small output file (a config, the index, the report).
func (d *destination) readFile(name string) ([]byte, error) {
	if !d.remote() {
		return readRegular(d.path(name))
	}
	b, err := d.bucket.ReadAll(d.ctx, name, maxStateFile)
	if isObjNotFound(err) {
		err = fmt.Errorf("%s: %w", d.path(name), fs.ErrNotExist)
	}
	return b, err
}

// putBytes writes a small output file of a bucket in one request.
func (d *destination) putBytes(name string, b []byte) error {
	_, err := d.bucket.Put(d.ctx, name, bytes.NewReader(b), int64(len(b)))
	return err
}

// readManifest reads DST's manifest (ErrNotExist wrapped when absent).
func (d *destination) readManifest() (*Manifest, error) {
	if !d.remote() {
		return readManifest(d.dir)
	}
	b, err := d.bucket.ReadAll(d.ctx, ManifestName, maxStateFile)
	if err != nil {
		if isObjNotFound(err) {
			return nil, fmt.Errorf("manifest: %w", fs.ErrNotExist)
		}
		return nil, fmt.Errorf("manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d.path(ManifestName), err)
	}
	if err := m.index(d.path(ManifestName)); err != nil {
		return nil, err
	}
	return &m, nil
}

// writeManifest writes the manifest, DST's last file.
func (d *destination) writeManifest(m *Manifest) error {
	if !d.remote() {
		return writeJSON(filepath.Join(d.dir, ManifestName), m)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return d.putBytes(ManifestName, append(b, '\n'))
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

// checkEmptyBucket refuses a bucket prefix that holds objects other than
// this tool's claim: convert writes only into an empty prefix or one of its
// own runs (whose manifest or state the caller checked first).
func (d *destination) checkEmptyBucket() error {
	files, err := d.bucket.List(d.ctx)
	if err != nil {
		return err
	}
	for _, f := range files {
		if f.Name != claimName {
			return fmt.Errorf("%w: %s is not empty (%s) and holds no k3ckpt conversion", ErrDestination, d.name, f.Name)
		}
	}
	return nil
}

// abortOwn aborts the unfinished uploads of units (a killed run's) in a
// bucket; a local DST's temporaries are removeOwnTemps'.
func (d *destination) abortOwn(units []unit) error {
	if !d.remote() {
		return removeOwnTemps(d.dir, units)
	}
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.Name
	}
	_, err := d.bucket.AbortOwn(d.ctx, names)
	return err
}

// claim ties a bucket DST to this state directory (the caller holds the
// state directory's lock): the first run creates the claim object with a
// conditional write and keeps its token in the state directory; a run with
// another state directory finds a token it does not hold and is refused,
// as a second run on a local DST is refused by its lock.
func (d *destination) claim() error {
	if !d.remote() {
		return nil
	}
	local := filepath.Join(d.dir, "claim")
	token, err := os.ReadFile(local)
	if errors.Is(err, fs.ErrNotExist) {
		token, err = newClaimToken(d.dir)
		if err == nil {
			err = fsx.MkdirAll(d.dir)
		}
		if err == nil {
			err = writeJSONBytes(local, token[:len(token)-1])
		}
	}
	if err != nil {
		return fmt.Errorf("state directory %s of %s: %w", d.dir, d.name, err)
	}
	for range 2 {
		have, err := d.bucket.ReadAll(d.ctx, claimName, 4096)
		switch {
		case err == nil:
			if bytes.Equal(have, token) {
				return nil
			}
			return fmt.Errorf("%w: %s is being written by runs with another state directory (claim %s says %q; this one is %s): run there, pass its --state-dir, or delete %s once no run writes it",
				ErrInUse, d.name, d.path(claimName), strings.TrimSpace(string(have)), d.dir, d.path(claimName))
		case !isObjNotFound(err):
			return err
		}
		created, err := d.bucket.PutIfAbsent(d.ctx, claimName, bytes.NewReader(token), int64(len(token)))
		if err != nil || created {
			return err
		}
		// Another run created it between the read and the write: read it.
	}
	return fmt.Errorf("%w: %s: the claim %s keeps changing", ErrInUse, d.name, d.path(claimName))
}

// newClaimToken names the state directory and host, with random bytes so
// that two machines' identical paths differ.
func newClaimToken(dir string) ([]byte, error) {
	host, _ := os.Hostname()
	return []byte(fmt.Sprintf("%s:%s %s\n", host, dir, rand.Text())), nil
}

// unclaim removes the claim once the conversion is finalized.
func (d *destination) unclaim() error {
	if !d.remote() {
		return nil
	}
	if err := d.bucket.Delete(d.ctx, claimName); err != nil {
		return err
	}
	return os.Remove(filepath.Join(d.dir, "claim"))
}

func isObjNotFound(err error) bool { return errors.Is(err, remote.ErrNotFound) }

// localDest is the destination of local directory dst.
func localDest(dst string) *destination {
	return &destination{name: dst, dir: dst, ctx: context.Background()}
}
