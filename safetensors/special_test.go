package safetensors

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// noHang fails the test instead of hanging it when f blocks: the regressions
// guarded here are opens and reads that never return.
func noHang(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: blocked for 20s", what)
	}
}

// replace puts a special file (a FIFO, or a link to /dev/zero) where a
// checkpoint entry was.
func replace(t *testing.T, p, kind string) {
	t.Helper()
	os.Remove(p)
	switch kind {
	case "fifo":
		mkfifo(t, p)
	case "devzero":
		if _, err := os.Stat("/dev/zero"); err != nil {
			t.Skip("no /dev/zero")
		}
		if err := os.Symlink("/dev/zero", p); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSpecialFilesRefused puts a FIFO and /dev/zero in place of a shard, the
// index and config.json: each is refused with an error naming the path,
// instead of blocking in open or reading until memory runs out.
func TestSpecialFilesRefused(t *testing.T) {
	for _, kind := range []string{"fifo", "devzero"} {
		for _, entry := range []string{"model-00002-of-00002.safetensors", IndexName, "config.json"} {
			t.Run(kind+"/"+entry, func(t *testing.T) {
				dir := twoShardCheckpoint(t)
				p := filepath.Join(dir, entry)
				replace(t, p, kind)
				noHang(t, entry, func() {
					var err error
					switch entry {
					case "config.json":
						var c *Checkpoint
						if c, err = Open(dir); err != nil {
							t.Errorf("open: %v", err)
							return
						}
						_, err = c.ReadAux(entry)
						c.Close()
					case IndexName:
						if _, err = Open(p); err == nil || !strings.Contains(err.Error(), p) {
							t.Errorf("open the index: %v", err)
						}
						_, err = Open(dir)
					default:
						if _, err = OpenFile(p); err == nil || !strings.Contains(err.Error(), p) {
							t.Errorf("OpenFile: %v", err)
						}
						_, err = Open(dir)
					}
					// /dev/zero is reached through a link leaving the checkpoint,
					// which is refused first; the FIFO sits in the checkpoint.
					if !errors.Is(err, fsx.ErrNotRegular) && !errors.Is(err, fsx.ErrOutside) {
						t.Errorf("got %v, want a refusal", err)
					}
					if !strings.Contains(err.Error(), entry) {
						t.Errorf("error does not name %s: %v", entry, err)
					}
				})
			})
		}
	}
	// Read directly (no link rule in the way), /dev/zero is refused for what it is.
	if _, err := os.Stat("/dev/zero"); err == nil {
		noHang(t, "/dev/zero", func() {
			if _, err := OpenFile("/dev/zero"); !errors.Is(err, fsx.ErrNotRegular) || !strings.Contains(err.Error(), "character device") {
				t.Errorf("OpenFile(/dev/zero): %v", err)
			}
		})
	}
}

// hubCache lays out a checkpoint as huggingface_hub's cache does: every entry
// of snapshots/<rev>/ a relative link to ../../blobs/<hash>.
func hubCache(t *testing.T) (snap, repo string) {
	src := twoShardCheckpoint(t)
	repo = filepath.Join(t.TempDir(), "hub", "models--moonshotai--Kimi-K3")
	snap = filepath.Join(repo, "snapshots", "5f0c1d2e")
	blobs := filepath.Join(repo, "blobs")
	for _, d := range []string{snap, blobs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(src)
	for i, e := range ents {
		hash := strings.Repeat(string(rune('a'+i)), 40)
		if err := os.Rename(filepath.Join(src, e.Name()), filepath.Join(blobs, hash)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../blobs/"+hash, filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return snap, repo
}

func TestHubCacheSnapshot(t *testing.T) {
	snap, repo := hubCache(t)
	for _, p := range []string{snap, filepath.Join(snap, IndexName), filepath.Join(snap, "model-00001-of-00002.safetensors")} {
		c, err := Open(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if p == snap && (c.NumTensors() != 3 || c.Index() == nil) {
			t.Fatalf("%d tensors", c.NumTensors())
		}
		if _, err := c.ReadAux("config.json"); err != nil {
			t.Fatalf("config.json through its blob link: %v", err)
		}
		c.Close()
	}
	// A link leaving the repository folder stays refused, saying why and what is allowed.
	outside := filepath.Join(filepath.Dir(filepath.Dir(repo)), "secret.json")
	os.WriteFile(outside, []byte(`{}`), 0o600)
	os.Symlink(outside, filepath.Join(snap, "tokenizer.json"))
	c, err := Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.ReadAux("tokenizer.json")
	if !errors.Is(err, fsx.ErrOutside) || !strings.Contains(err.Error(), "tokenizer.json") || !strings.Contains(err.Error(), repo) {
		t.Fatalf("got %v, want fsx.ErrOutside naming the entry and the repository folder", err)
	}
	shard := filepath.Join(snap, "model-00002-of-00002.safetensors")
	os.Remove(shard)
	evil := filepath.Join(filepath.Dir(filepath.Dir(repo)), "models--other--x", "blobs")
	os.MkdirAll(evil, 0o755)
	writeTestFile(t, evil, "c.safetensors", []TensorSpec{{"c", U8, []int64{5}}})
	os.Symlink(filepath.Join(evil, "c.safetensors"), shard)
	if _, err := Open(snap); !errors.Is(err, fsx.ErrOutside) || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
		t.Fatalf("shard linked into another repository: %v", err)
	}
}

// TestLocalDirDownload reads a `hf download --local-dir` tree: real files
// plus a .cache/ folder (with its own bookkeeping files), read as it is.
func TestLocalDirDownload(t *testing.T) {
	dir := twoShardCheckpoint(t)
	meta := filepath.Join(dir, ".cache", "huggingface", "download")
	os.MkdirAll(meta, 0o755)
	for _, n := range []string{"model-00001-of-00002.safetensors.metadata", "model-00001-of-00002.safetensors.lock", "config.json.metadata"} {
		os.WriteFile(filepath.Join(meta, n), []byte("rev\nsha\n1\n"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, ".cache", "huggingface", ".gitignore"), []byte("*"), 0o644)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Files) != 2 || c.NumTensors() != 3 {
		t.Fatalf("%d files, %d tensors", len(c.Files), c.NumTensors())
	}
}

// TestHeaderClaimsBoundMemory opens 96 sparse files that each claim a
// 100 MB header (a few bytes on disk): the header bytes in flight are bounded
// and the first failure stops the others, so the bytes allocated stay near
// two claims instead of 96 (9.6 GB) or OpenParallelism (1.6 GB) of them.
func TestHeaderClaimsBoundMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	if runtime.GOOS == "windows" {
		t.Skip("sparse files")
	}
	dir := t.TempDir()
	const claim = maxHeaderSize
	for i := range 96 {
		f, err := os.Create(filepath.Join(dir, "model-"+strings.Repeat("0", 3)+string(rune('A'+i/26))+string(rune('a'+i%26))+".safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:], claim)
		copy(b[8:], `{"a":{`)
		f.Write(b[:])
		if err := f.Truncate(8 + claim); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Open(dir)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errHeaderJSON) {
		t.Fatalf("got %v, want a header error", err)
	}
	// Each header read allocates its claim; a bounded, cancelled open reads at
	// most MaxHeaderBytesInFlight/claim of them at once and stops after.
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(maxHeaderBytesInFlight+claim); got > limit {
		t.Fatalf("allocated %d MB opening 96 hostile files, want at most %d MB", got>>20, limit>>20)
	}
}

// TestSizeSumsDoNotWrap gives four files of 2^62 tensor bytes each (eight
// F64 tensors of 2^56 elements): the sum is refused, not wrapped to 0 (which
// an index total_size of 0 would match).
func TestSizeSumsDoNotWrap(t *testing.T) {
	const elems, each = 1 << 56, 1 << 59
	var files []fakeFile
	var wm []string
	for _, n := range []string{"a", "b", "c", "d"} {
		var ents []string
		for i := range 8 {
			ents = append(ents, fmt.Sprintf(`"%s%d":{"dtype":"F64","shape":[%d],"data_offsets":[%d,%d]}`, n, i, elems, i*each, (i+1)*each))
			wm = append(wm, fmt.Sprintf(`"%s%d":"%s.safetensors"`, n, i, n))
		}
		h := "{" + strings.Join(ents, ",") + "}"
		files = append(files, fakeFile{name: n + ".safetensors", header: h, size: 8 + int64(len(h)) + 8*each})
	}
	src := &fakeSource{files: files, index: `{"metadata":{"total_size":0},"weight_map":{` + strings.Join(wm, ",") + `}}`}
	_, err := openWith(t.Context(), src, "fake", IndexName)
	if !errors.Is(err, errFileSize) || !strings.Contains(err.Error(), "2^63") {
		t.Fatalf("got %v, want an overflow error", err)
	}
	// The writer's sums are checked too.
	var specs []TensorSpec
	for i := range 16 {
		specs = append(specs, TensorSpec{fmt.Sprint("x", i), f64, []int64{elems}})
	}
	if _, err := NewFilePlan(specs, nil); err == nil {
		t.Fatal("layout of 2^63 bytes accepted")
	}
}

// TestParsedHeaderKeepsOnlyWhatItUses parses a valid header of one tensor
// padded with 32 MB of spaces: the File it returns must not keep the padding
// alive through its names.
func TestParsedHeaderKeepsOnlyWhatItUses(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	h := `{"__metadata__":{"format":"pt"},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}` + strings.Repeat(" ", 32<<20)
	b := rawFile(h, 1)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := ReadHeader(bytes.NewReader(b), int64(len(b)), "padded")
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Fatalf("a parsed header keeps %d MB alive", grew>>20)
	}
	if ti, ok := f.Lookup("w"); !ok || ti.Size() != 1 || f.Metadata["format"] != "pt" {
		t.Fatalf("lost content: %+v %v", ti, f.Metadata)
	}
	runtime.KeepAlive(b)
}

// openWith opens a directory-like root; indexName selects the index ("" means
// the default index if present, else every .safetensors file).
func openWith(ctx context.Context, src source, root, indexName string) (*Checkpoint, error) {
	s, err := shardsWith(ctx, src, root, indexName)
	if err != nil {
		return nil, err
	}
	return s.keepAll(ctx)
}
