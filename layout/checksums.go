package layout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/objstore"
)

// errSums: the bytes of an output are not those its run wrote.
var errSums = errors.New("sha256 check failed")

// sumsTree is an output tree CheckSums reads: a local directory or the
// objects under a bucket prefix.
type sumsTree interface {
	// files lists every file under the root, slash-separated, with its
	// size, but names with a component starting with a dot (bookkeeping).
	files(ctx context.Context) (map[string]int64, error)
	read(ctx context.Context, name string, limit int64) ([]byte, error)
	// copy writes the file's size bytes to w, front to back, through buf.
	copy(ctx context.Context, name string, size int64, w io.Writer, buf []byte) error
	where(name string) string // names a file in messages
}

// CheckSums reads back every file of a shard or export output (a local
// directory, or an s3:// or gs:// prefix): each directory holding a
// SHA256SUMS (the root, and its rank-NN and stage-NN directories) must hold
// exactly the files it lists, each with its listed sha256. It returns the
// files and bytes checked. An output without any SHA256SUMS is an error.
func CheckSums(ctx context.Context, root string) (files int, bytes int64, err error) {
	var t sumsTree
	if objstore.IsURL(root) {
		u, err := objstore.Parse(root)
		if err != nil {
			return 0, 0, err
		}
		b, err := objstore.New(ctx, u, objstore.Options{})
		if err != nil {
			return 0, 0, err
		}
		t = bucketTree{b}
	} else {
		t = localTree(root)
	}
	all, err := t.files(ctx)
	if err != nil {
		return 0, 0, err
	}
	var dirs []string // "" or "rank-00/"
	for name := range all {
		dir, base := path.Split(name)
		if base == sumsName && (dir == "" || strings.Count(dir, "/") == 1 && (strings.HasPrefix(dir, rankDirPrefix) || strings.HasPrefix(dir, stageDirPrefix))) {
			dirs = append(dirs, dir)
		}
	}
	for name := range all {
		dir, base := path.Split(name)
		if base == manifestName && !slices.Contains(dirs, dir) {
			return 0, 0, fmt.Errorf("%w: %s has no %s (the output of a k3ckpt that wrote none, or it was removed): rerun the command that wrote it", errSums, t.where(name), sumsName)
		}
	}
	if len(dirs) == 0 {
		return 0, 0, fmt.Errorf("%w: %s holds no %s (neither at its root nor in rank-NN or stage-NN directories): it is not a shard or export output, or one written by a k3ckpt that wrote none; rerun the command that wrote it", errSums, root, sumsName)
	}
	slices.Sort(dirs)
	buf := make([]byte, windowSize)
	for _, dir := range dirs {
		b, err := t.read(ctx, dir+sumsName, maxSumsFile)
		if err != nil {
			return files, bytes, err
		}
		sums, err := parseSums(b, t.where(dir+sumsName))
		if err != nil {
			return files, bytes, err
		}
		// The directory's files: those whose nearest SHA256SUMS is its own.
		var there []string
		for name := range all {
			if rest, ok := strings.CutPrefix(name, dir); ok && rest != sumsName && sumsDir(dirs, name) == dir {
				there = append(there, rest)
			}
		}
		slices.Sort(there)
		for _, rest := range there {
			if _, ok := sums[rest]; !ok {
				return files, bytes, fmt.Errorf("%w: %s is not listed in %s: no run of the tool wrote it there; remove it", errSums, t.where(dir+rest), t.where(dir+sumsName))
			}
		}
		for _, n := range slices.Sorted(maps.Keys(sums)) {
			if err := ctx.Err(); err != nil {
				return files, bytes, err
			}
			size, ok := all[dir+n]
			if !ok {
				return files, bytes, fmt.Errorf("%w: %s lists %s, which is missing: write the output again", errSums, t.where(dir+sumsName), t.where(dir+n))
			}
			h := sha256.New()
			if err := t.copy(ctx, dir+n, size, h, buf); err != nil {
				return files, bytes, err
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != sums[n] {
				return files, bytes, fmt.Errorf("%w: %s has sha256 %s, not the %s its run wrote (%s): the file changed since it was written; write it again (rerun with --restart)", errSums, t.where(dir+n), got, sums[n], t.where(dir+sumsName))
			}
			files++
			bytes += size
		}
	}
	return files, bytes, nil
}

// sumsDir is the directory of dirs whose SHA256SUMS lists name: its first
// directory when that has one, else the root.
func sumsDir(dirs []string, name string) string {
	if i := strings.IndexByte(name, '/'); i >= 0 && slices.Contains(dirs, name[:i+1]) {
		return name[:i+1]
	}
	return ""
}

type localTree string

func (t localTree) files(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	err := filepath.WalkDir(string(t), func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == string(t) {
			return err
		}
		hidden := strings.HasPrefix(d.Name(), ".")
		if hidden && d.IsDir() {
			return filepath.SkipDir
		}
		if hidden || d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(string(t), p)
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file: no run of the tool makes one", errSums, p)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = fi.Size()
		return nil
	})
	return out, err
}

func (t localTree) read(ctx context.Context, name string, limit int64) ([]byte, error) {
	return fsx.ReadFile(t.where(name), limit)
}

func (t localTree) copy(ctx context.Context, name string, size int64, w io.Writer, buf []byte) error {
	f, err := fsx.Open(t.where(name))
	if err != nil {
		return err
	}
	defer f.Close()
	// Only the Reader: an *os.File's WriteTo would use a buffer of its own.
	n, err := io.CopyBuffer(w, struct{ io.Reader }{f}, buf)
	if err == nil && n != size {
		err = fmt.Errorf("%d bytes, %d when listed: it changed while being read", n, size)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", t.where(name), err)
	}
	return nil
}

func (t localTree) where(name string) string {
	return filepath.Join(string(t), filepath.FromSlash(name))
}

type bucketTree struct{ b *objstore.Bucket }

func (t bucketTree) files(ctx context.Context) (map[string]int64, error) {
	listed, err := t.b.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, f := range listed {
		if !slices.ContainsFunc(strings.Split(f.Name, "/"), func(p string) bool { return strings.HasPrefix(p, ".") }) {
			out[f.Name] = f.Size
		}
	}
	return out, nil
}

func (t bucketTree) read(ctx context.Context, name string, limit int64) ([]byte, error) {
	return t.b.ReadAll(ctx, name, limit)
}

func (t bucketTree) copy(ctx context.Context, name string, size int64, w io.Writer, buf []byte) error {
	etag := ""
	for off := int64(0); off < size; {
		n, _, tag, err := t.b.Get(ctx, name, etag, buf[:min(int64(len(buf)), size-off)], off, func(int64) {})
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%s: %w at %d of %d bytes", t.where(name), io.ErrUnexpectedEOF, off, size)
		}
		etag = tag
		w.Write(buf[:n])
		off += int64(n)
	}
	return nil
}

func (t bucketTree) where(name string) string { return t.b.URL.Dir() + name }
