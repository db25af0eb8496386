// Package objdest is the writing side of an s3:// or gs:// DST, shared by
// convert and layout (shard, export, reassemble).
//
// A bucket has no rename, no append and no lock, so a bucket DST keeps the
// run's bookkeeping in a local state directory. Each output file streams
// through filewrite into an objstore upload, which no reader sees under its
// key before it is complete; its sha256 is taken as the bytes stream. A claim
// object under the prefix, created with a conditional write, ties the prefix
// to one state directory, so that runs with different ones cannot write it
// at once.
package objdest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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

// ClaimName is the key, under a bucket DST's prefix, of the object that ties
// the prefix to the state directory of the runs writing it (Dest.Claim).
const ClaimName = ".k3ckpt/claim"

// Dest is a bucket DST: the objects under an s3:// or gs:// prefix and the
// local state directory of the runs writing them.
type Dest struct {
	// Name is the DST as a URL, for messages.
	Name string
	// StateDir is the local directory of the runs' bookkeeping.
	StateDir string
	// Bucket is the client of the DST's prefix.
	Bucket *objstore.Bucket

	ctx   context.Context // bounds the bucket's requests
	inUse error           // see Open
	etags sync.Map        // object name → ETag of an object this run completed
}

// Open resolves a bucket DST and its state directory (stateDir, or "" for
// one under the user's cache directory named after the location). conns
// sizes the bucket client's connections; ctx bounds every request. Refusals
// wrap the caller's sentinels: refused when the DST cannot receive this run,
// inUse when another run (another state directory) writes it.
func Open(ctx context.Context, dst, stateDir string, conns int, refused, inUse error) (*Dest, error) {
	u, err := objstore.Parse(dst)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", refused, err)
	}
	if stateDir == "" {
		if stateDir, err = defaultStateDir(u, refused); err != nil {
			return nil, err
		}
	}
	b, err := objstore.New(ctx, u, objstore.Options{Connections: conns})
	if err != nil {
		return nil, err
	}
	return &Dest{Name: u.String(), StateDir: stateDir, Bucket: b, ctx: ctx, inUse: inUse}, nil
}

func defaultStateDir(u objstore.URL, refused error) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: %s: no state directory (%v); pass --state-dir", refused, u, err)
	}
	return filepath.Join(cache, "k3ckpt", "dst", u.Scheme, u.Bucket, filepath.FromSlash(u.Key)), nil
}

// Path is the URL of output object name (slash-separated, under the prefix).
func (d *Dest) Path(name string) string { return d.Bucket.URL.Dir() + name }

// Create starts output object name, streamed from pool's buffers.
func (d *Dest) Create(name string, pool *filewrite.Pool, prog func(int64)) (*filewrite.File, error) {
	up := d.Bucket.Create(d.ctx, name, func(etag string) { d.etags.Store(name, etag) })
	return filewrite.CreateSink(up, d.Path(name), pool, prog), nil
}

// ETag is the ETag of output object name as this run completed it ("" for
// an object not written by this run).
func (d *Dest) ETag(name string) string {
	v, _ := d.etags.Load(name)
	s, _ := v.(string)
	return s
}

// Kept reports whether output object name is still the one a run recorded
// with size and etag (one HEAD) or, with no etag, whose bytes have sha. It
// returns the ETag to record.
func (d *Dest) Kept(name string, size int64, sha, etag string, prog func(int64)) (bool, string, error) {
	got, tag, ok, err := d.Bucket.Stat(d.ctx, name)
	if err != nil || !ok || got != size {
		return false, "", err
	}
	if etag != "" {
		if tag != etag {
			return false, "", nil
		}
		prog(size)
		return true, tag, nil
	}
	sum, err := d.HashObject(name, size, prog)
	if err != nil {
		return false, "", err
	}
	return sum == sha, tag, nil
}

// HashObject reads an object back in large ranges and returns its sha256;
// an object replaced meanwhile fails with remote.ErrChanged.
func (d *Dest) HashObject(name string, size int64, prog func(int64)) (string, error) {
	h := sha256.New()
	buf := make([]byte, 8<<20)
	etag := ""
	for off := int64(0); off < size; {
		n, _, tag, err := d.Bucket.Get(d.ctx, name, etag, buf[:min(int64(len(buf)), size-off)], off, prog)
		if err != nil {
			return "", err
		}
		if n == 0 {
			return "", fmt.Errorf("%s: %w: shorter than its %d bytes", d.Path(name), remote.ErrChanged, size)
		}
		etag = tag
		h.Write(buf[:n])
		off += int64(n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Present reports whether output object name has size bytes (and the ETag
// recorded, when given).
func (d *Dest) Present(name string, size int64, etag string) (bool, error) {
	got, tag, ok, err := d.Bucket.Stat(d.ctx, name)
	if err != nil {
		return false, err
	}
	return ok && got == size && (etag == "" || tag == etag), nil
}

// PutFile uploads the synced local file f as output object name.
func (d *Dest) PutFile(name string, f *os.File) error {
	fi, err := f.Stat()
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err == nil {
		_, err = d.Bucket.Put(d.ctx, name, f, fi.Size(), false)
	}
	return err
}

// PutLocal uploads local file path as output object name, then removes the
// local copy.
func (d *Dest) PutLocal(name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = d.PutFile(name, f)
	f.Close()
	if err != nil {
		return err
	}
	return os.Remove(path)
}

// ReadFile reads a small output object (at most limit bytes); an absent
// one fails wrapping fs.ErrNotExist, naming its URL.
func (d *Dest) ReadFile(name string, limit int64) ([]byte, error) {
	b, err := d.Bucket.ReadAll(d.ctx, name, limit)
	if errors.Is(err, remote.ErrNotFound) {
		err = fmt.Errorf("%s: %w", d.Path(name), fs.ErrNotExist)
	}
	return b, err
}

// PutBytes writes a small output object in one request: complete or absent.
func (d *Dest) PutBytes(name string, b []byte) error {
	_, err := d.Bucket.Put(d.ctx, name, bytes.NewReader(b), int64(len(b)), false)
	return err
}

// Delete removes output object name (none: nothing).
func (d *Dest) Delete(name string) error { return d.Bucket.Delete(d.ctx, name) }

// AbortOwn aborts the unfinished uploads of the objects names (a killed
// run's); it reports how many.
func (d *Dest) AbortOwn(names []string) (int, error) {
	return d.Bucket.AbortOwn(d.ctx, names)
}

// Claim ties the DST to the state directory (whose lock the caller holds):
// the first run creates the claim object with a conditional write and keeps
// its token in the state directory; a run with another one is refused,
// wrapping Open's inUse.
func (d *Dest) Claim() error {
	local := filepath.Join(d.StateDir, "claim")
	token, err := os.ReadFile(local)
	if errors.Is(err, fs.ErrNotExist) {
		token = newClaimToken(d.StateDir)
		if err = fsx.MkdirAll(d.StateDir); err == nil {
			err = filewrite.WriteFile(local, token, 0o644)
		}
	}
	if err != nil {
		return fmt.Errorf("state directory %s of %s: %w", d.StateDir, d.Name, err)
	}
	for range 2 {
		have, err := d.Bucket.ReadAll(d.ctx, ClaimName, 4096)
		switch {
		case err == nil:
			if bytes.Equal(have, token) {
				return nil
			}
			return fmt.Errorf("%w: %s is being written by runs with another state directory (claim %s says %q; this one is %s): run there, pass its --state-dir, or delete %s once no run writes it",
				d.inUse, d.Name, d.Path(ClaimName), strings.TrimSpace(string(have)), d.StateDir, d.Path(ClaimName))
		case !errors.Is(err, remote.ErrNotFound):
			return err
		}
		created, err := d.Bucket.Put(d.ctx, ClaimName, bytes.NewReader(token), int64(len(token)), true)
		if err != nil || created {
			return err
		}
		// Another run created it between the read and the write: read it.
	}
	return fmt.Errorf("%w: %s: the claim %s keeps changing", d.inUse, d.Name, d.Path(ClaimName))
}

// newClaimToken names the state directory and host, with random bytes so
// that two machines' identical paths differ.
func newClaimToken(dir string) []byte {
	host, _ := os.Hostname()
	return []byte(fmt.Sprintf("%s:%s %s\n", host, dir, rand.Text()))
}

// Unclaim removes the claim once the run's output is finished.
func (d *Dest) Unclaim() error {
	if err := d.Bucket.Delete(d.ctx, ClaimName); err != nil {
		return err
	}
	return os.Remove(filepath.Join(d.StateDir, "claim"))
}
