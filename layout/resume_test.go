package layout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	st "github.com/k3ckpt/k3ckpt/safetensors"
)

// writeSmall writes a two-file checkpoint with distinct, position-dependent
// bytes and the given metadata on every file.
func writeSmall(t *testing.T, dir string, meta map[string]string) {
	t.Helper()
	check(t, os.MkdirAll(dir, 0o755))
	files := map[string][]st.TensorSpec{
		"a.safetensors": {{Name: "w.0", DType: st.BF16, Shape: []int64{8, 6}}, {Name: "n.0", DType: st.F32, Shape: []int64{6}}},
		"b.safetensors": {{Name: "w.1", DType: st.BF16, Shape: []int64{8, 6}}, {Name: "n.1", DType: st.F32, Shape: []int64{6}}},
	}
	idx := &st.Index{WeightMap: map[string]string{}}
	for name, specs := range files {
		lay := must(st.NewFilePlan(specs, meta))(t)
		w := must(st.Create(filepath.Join(dir, name), lay))(t)
		for k, s := range specs {
			b := make([]byte, must(st.ByteSize(s.DType, s.Shape))(t))
			for i := range b {
				b[i] = byte(i*7 + k*31 + len(name))
			}
			must(must(w.Tensor(s.Name))(t).Write(b))(t)
			idx.WeightMap[s.Name] = name
			idx.TotalSize += int64(len(b))
		}
		check(t, w.Commit())
	}
	check(t, st.WriteIndex(filepath.Join(dir, st.IndexName), idx))
}

const smallLayout = `{"name": "small4", "ranks_per_stage": 4, "rules": [
	{"name": "rows", "match": ["w.#"], "action": "split", "axis": 0, "parts": 4},
	{"name": "norms", "match": ["n.#"], "action": "replicate"}]}`

func smallPlan(t *testing.T, src *Source, js string, o ExportOptions) *Plan {
	t.Helper()
	l := must(parseLayout([]byte(js)))(t)
	return must(PlanExport(src, l, o))(t)
}

// treeEqual compares every file under two directories byte for byte.
func treeEqual(t *testing.T, a, b string) {
	t.Helper()
	n := 0
	check(t, filepath.WalkDir(a, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := must(filepath.Rel(a, p))(t)
		x := must(os.ReadFile(p))(t)
		y, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs (%v)", rel, err)
		}
		n++
		return nil
	}))
	m := 0
	check(t, filepath.WalkDir(b, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			m++
		}
		return err
	}))
	if n != m || n == 0 {
		t.Errorf("%s holds %d files, %s %d", a, n, b, m)
	}
}

// A rerun after a kill keeps the files the killed run finished, removes its
// temporaries and ends byte-identical to a run that was never interrupted;
// a finished export reruns as a no-op; another plan is refused until
// --restart.
func TestResumeAfterKill(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	srcDir := filepath.Join(tmp, "src")
	writeSmall(t, srcDir, map[string]string{"format": "pt"})
	src := must(OpenSource(srcDir))(t)
	defer src.Close()
	ctx := context.Background()
	ref := filepath.Join(tmp, "ref")
	p := smallPlan(t, src, smallLayout, ExportOptions{})
	must(p.Execute(ctx, ref, ExecOptions{}))(t)

	// The killed run: rank-00's directory started, one file committed,
	// a temporary left behind; the other ranks not begun.
	dst := filepath.Join(tmp, "dst")
	d0 := &p.Dirs[0]
	dir0 := filepath.Join(dst, d0.Dir)
	dr := must(prepareDir(p, d0, dir0, false))(t)
	of := d0.files[0]
	commit, err := writeFile(ctx, of, filepath.Join(dir0, of.name), nil, new([]byte), nil, nil)
	check(t, err)
	check(t, commit())
	check(t, dr.recordCommit(of, fileSum(t, filepath.Join(dir0, of.name))))
	check(t, os.WriteFile(filepath.Join(dir0, filewrite.TempPrefix+"x-1"), []byte("partial"), 0o644))

	res := must(p.Execute(ctx, dst, ExecOptions{}))(t)
	if res.Kept != 1 || res.Written != p.Files-1 || res.Cleaned != 1 {
		t.Errorf("resume: %+v, want 1 kept, %d written, 1 temporary cleaned", res, p.Files-1)
	}
	treeEqual(t, ref, dst)

	// Finished: a rerun writes nothing.
	res = must(p.Execute(ctx, dst, ExecOptions{}))(t)
	if res.Written != 0 || res.Kept != p.Files {
		t.Errorf("rerun of a finished export: %+v", res)
	}
	// Another plan (a different layout) is refused, then replaces with Restart.
	other := smallPlan(t, src, strings.Replace(smallLayout, `"parts": 4`, `"parts": 2`, 1), ExportOptions{})
	if _, err := other.Execute(ctx, dst, ExecOptions{}); !errors.Is(err, errOutputExists) {
		t.Errorf("another plan over a finished export: %v", err)
	}
	must(other.Execute(ctx, dst, ExecOptions{Restart: true}))(t)
	// An unfinished run of another plan is refused too, naming it.
	dst2 := filepath.Join(tmp, "dst2")
	must(prepareDir(other, &other.Dirs[0], filepath.Join(dst2, other.Dirs[0].Dir), false))(t)
	if _, err := p.Execute(ctx, dst2, ExecOptions{}); !errors.Is(err, errOutputExists) || !strings.Contains(err.Error(), "different plan") {
		t.Errorf("resume of another plan's run: %v", err)
	}
	// Files nobody planned are not taken for a run.
	dst3 := filepath.Join(tmp, "dst3", "rank-02")
	check(t, os.MkdirAll(dst3, 0o755))
	check(t, os.WriteFile(filepath.Join(dst3, "junk"), []byte("x"), 0o644))
	if _, err := p.Execute(ctx, filepath.Dir(dst3), ExecOptions{}); !errors.Is(err, errOutputExists) {
		t.Errorf("occupied directory: %v", err)
	}
	// Another run holding DST's lock: refused at once.
	lock := must(dirlock.Acquire(dst, dirlock.LockName))(t)
	if _, err := p.Execute(ctx, dst, ExecOptions{Restart: true}); !errors.Is(err, dirlock.ErrInUse) {
		t.Errorf("locked DST: %v", err)
	}
	check(t, lock.Release())
	if _, err := PlanExport(src, must(parseLayout([]byte(smallLayout)))(t), ExportOptions{Ranks: []int{3, 4}}); !errors.Is(err, errRank) {
		t.Errorf("rank out of range: %v", err)
	}
}

// The source files' metadata is recorded once, in rank 0's manifest; the
// written rank files carry only the "format" key; reassembly restores every
// file byte for byte; metadata past the cap is refused before writing.
func TestMetadataRecordedOnce(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	srcDir := filepath.Join(tmp, "src")
	meta := map[string]string{"format": "pt", "note": strings.Repeat("n", 1000)}
	writeSmall(t, srcDir, meta)
	src := must(OpenSource(srcDir))(t)
	defer src.Close()
	dst := filepath.Join(tmp, "dst")
	must(smallPlan(t, src, smallLayout, ExportOptions{}).Execute(context.Background(), dst, ExecOptions{}))(t)
	for r, wantNote := range []bool{true, false, false, false} {
		dir := filepath.Join(dst, dirName(must(parseLayout([]byte(smallLayout)))(t), r))
		man := must(os.ReadFile(filepath.Join(dir, manifestName)))(t)
		if got := bytes.Count(man, []byte(meta["note"])); got != map[bool]int{true: 2, false: 0}[wantNote] {
			t.Errorf("rank %d manifest holds the source metadata %d times", r, got)
		}
		ents := must(os.ReadDir(dir))(t)
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".safetensors") {
				continue
			}
			f := must(st.OpenFile(filepath.Join(dir, e.Name())))(t)
			if len(f.Metadata) != 1 || f.Metadata["format"] != "pt" {
				t.Errorf("rank %d %s metadata %v, want only format", r, e.Name(), f.Metadata)
			}
			f.Close()
		}
	}
	out := filepath.Join(tmp, "re")
	must(runReassemble(dst, out))(t)
	for _, f := range []string{"a.safetensors", "b.safetensors"} {
		if !sameFile(t, filepath.Join(srcDir, f), filepath.Join(out, f)) {
			t.Errorf("reassembled %s differs", f)
		}
	}
	// Without rank 0 the metadata is gone: reassembly refuses.
	check(t, os.RemoveAll(filepath.Join(dst, "rank-00")))
	if _, err := OpenSource(dst); !errors.Is(err, errManifest) {
		t.Errorf("export without rank 0: %v", err)
	}

	big := filepath.Join(tmp, "big")
	writeSmall(t, big, map[string]string{"format": "pt", "note": strings.Repeat("n", maxMetadataBytes)})
	bs := must(OpenSource(big))(t)
	defer bs.Close()
	if _, err := PlanExport(bs, must(parseLayout([]byte(smallLayout)))(t), ExportOptions{}); !errors.Is(err, errMetadata) || !strings.Contains(err.Error(), "a.safetensors") {
		t.Errorf("oversized metadata: %v", err)
	}
}

// exportSmall exports the small replica into tmp/dst and names a file of
// rank 1 there.
func exportSmall(t *testing.T) (tmp, dst, rankFile string) {
	t.Helper()
	tmp = t.TempDir()
	srcDir := filepath.Join(tmp, "src")
	writeSmall(t, srcDir, nil)
	src := must(OpenSource(srcDir))(t)
	defer src.Close()
	dst = filepath.Join(tmp, "dst")
	p := smallPlan(t, src, smallLayout, ExportOptions{})
	must(p.Execute(context.Background(), dst, ExecOptions{}))(t)
	return tmp, dst, filepath.Join(dst, "rank-01", p.Dirs[1].files[0].name)
}

// An export read back as a source: a rank file linked to a file outside the
// export is refused; a link inside the export is read.
func TestExportSourceLinks(t *testing.T) {
	t.Parallel()
	tmp, dst, rankFile := exportSmall(t)
	for _, c := range []struct {
		target string
		ok     bool
	}{{filepath.Join(tmp, "outside.safetensors"), false}, {filepath.Join(dst, "spare.safetensors"), true}} {
		if fi := must(os.Lstat(rankFile))(t); fi.Mode().IsRegular() {
			check(t, os.Rename(rankFile, c.target))
		} else {
			check(t, os.Rename(must(os.Readlink(rankFile))(t), c.target))
			check(t, os.Remove(rankFile))
		}
		check(t, os.Symlink(c.target, rankFile))
		s, err := OpenSource(dst)
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, errLink)) {
			t.Errorf("rank file linked to %s: %v", c.target, err)
		}
		if err == nil {
			s.Close()
		}
	}
}

// The rank file read is the file checked: a link swapped between the open
// and the check, either way (inside → outside the export, or outside →
// inside), is refused rather than read.
func TestRankFileSwappedWhileOpened(t *testing.T) {
	tmp, dst, rankFile := exportSmall(t)
	inside, outside := filepath.Join(dst, "spare.safetensors"), filepath.Join(tmp, "outside.safetensors")
	data := must(os.ReadFile(rankFile))(t)
	check(t, os.WriteFile(inside, data, 0o644))
	check(t, os.WriteFile(outside, data, 0o644))
	relink := func(target string) {
		check(t, os.Remove(rankFile))
		check(t, os.Symlink(target, rankFile))
	}
	defer func() { testHookRankOpened = nil }()
	for _, c := range []struct{ atOpen, atCheck string }{{inside, outside}, {outside, inside}} {
		relink(c.atOpen)
		testHookRankOpened = func(path string) {
			if path == rankFile {
				relink(c.atCheck)
			}
		}
		s, err := OpenSource(dst)
		if !errors.Is(err, errLink) {
			t.Errorf("link %s at the open, %s at the check: %v, want ErrLink", c.atOpen, c.atCheck, err)
		}
		if err == nil {
			s.Close()
		}
	}
	testHookRankOpened = nil
	relink(inside)
	s := must(OpenSource(dst))(t)
	s.Close()
}

// A source shard copied whole is copied from the file the source opened: one
// replaced under its name since (same size, other bytes) fails the run
// instead of being copied.
func TestVerbatimSourceReplaced(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	srcDir := filepath.Join(tmp, "src")
	writeSmall(t, srcDir, map[string]string{"format": "pt"})
	src := must(OpenSource(srcDir))(t)
	defer src.Close()
	p := smallPlan(t, src, `{"name": "whole", "ranks_per_stage": 1, "rules": [{"name": "all", "match": ["**"], "action": "replicate"}]}`, ExportOptions{})
	if p.Dirs[0].Files[0].CopyOf == "" {
		t.Fatalf("plan copies no file whole: %+v", p.Dirs[0].Files)
	}
	a := filepath.Join(srcDir, "a.safetensors")
	b := must(os.ReadFile(a))(t)
	for i := len(b) - 8; i < len(b); i++ {
		b[i] ^= 0xff
	}
	check(t, os.WriteFile(a+".new", b, 0o644))
	check(t, os.Rename(a+".new", a))
	if _, err := p.Execute(context.Background(), filepath.Join(tmp, "dst"), ExecOptions{}); !errors.Is(err, errChanged) {
		t.Errorf("source shard replaced after planning: %v, want ErrChanged", err)
	}
}

// Every index this package writes takes the source's form: a rank
// directory's own index and the reassembled one end in a newline exactly
// when the source's did; a source without an index gets the codec's form
// (none, as the released index).
func TestIndexFollowsSourceNewline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		edit    func(idx string)
		newline bool
	}{
		{"codec index", func(string) {}, false},
		{"index with a newline", func(idx string) {
			b := must(os.ReadFile(idx))(t)
			check(t, os.WriteFile(idx, append(b, '\n'), 0o644))
		}, true},
		{"no index", func(idx string) { check(t, os.Remove(idx)) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			srcDir := filepath.Join(tmp, "src")
			writeSmall(t, srcDir, nil)
			idx := filepath.Join(srcDir, st.IndexName)
			c.edit(idx)
			src := must(OpenSource(srcDir))(t)
			defer src.Close()
			dst := filepath.Join(tmp, "dst")
			p := smallPlan(t, src, smallLayout, ExportOptions{})
			must(p.Execute(context.Background(), dst, ExecOptions{}))(t)
			for _, d := range p.Dirs {
				b := must(os.ReadFile(filepath.Join(dst, d.Dir, st.IndexName)))(t)
				if got := bytes.HasSuffix(b, []byte("\n")); got != c.newline {
					t.Errorf("%s's index ends in a newline: %v, want %v", d.Dir, got, c.newline)
				}
				ck := must(st.Open(filepath.Join(dst, d.Dir, st.IndexName)))(t)
				if ck.Index() == nil {
					t.Errorf("%s: index not read", d.Dir)
				}
				ck.Close()
			}
			out := filepath.Join(tmp, "re")
			must(runReassemble(dst, out))(t)
			b := must(os.ReadFile(filepath.Join(out, st.IndexName)))(t)
			if want, err := os.ReadFile(idx); err == nil && !bytes.Equal(b, want) {
				t.Errorf("reassembled index differs from the source's (ends %q, source %q)", b[len(b)-2:], want[len(want)-2:])
			}
			if got := bytes.HasSuffix(b, []byte("\n")); got != c.newline {
				t.Errorf("reassembled index ends in a newline: %v, want %v", got, c.newline)
			}
		})
	}
}

// Progress is this run's: Start announces the bytes a resumed run will
// write (the plan's less the kept file's), and the Progress calls add up
// to it and to what the result reports.
func TestProgressOfResumedRun(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	srcDir := filepath.Join(tmp, "src")
	writeSmall(t, srcDir, nil)
	src := must(OpenSource(srcDir))(t)
	defer src.Close()
	ctx := context.Background()
	p := smallPlan(t, src, smallLayout, ExportOptions{})
	dst := filepath.Join(tmp, "dst")
	d0 := &p.Dirs[0]
	dir0 := filepath.Join(dst, d0.Dir)
	dr := must(prepareDir(p, d0, dir0, false))(t)
	of := d0.files[0]
	commit, err := writeFile(ctx, of, filepath.Join(dir0, of.name), nil, new([]byte), nil, nil)
	check(t, err)
	check(t, commit())
	check(t, dr.recordCommit(of, fileSum(t, filepath.Join(dir0, of.name))))

	var pr countingProgress
	res := must(p.Execute(ctx, dst, ExecOptions{Progress: &pr}))(t)
	want := p.Bytes - of.tensorBytes()
	if pr.starts != 1 || pr.total != want || pr.done.Load() != want || res.Bytes != want || want <= 0 {
		t.Errorf("Start called %d times with %d, progress %d, result %d; want once with %d (plan %d less the kept %d)",
			pr.starts, pr.total, pr.done.Load(), res.Bytes, want, p.Bytes, of.tensorBytes())
	}
}

// modifyInPlace flips the last data byte of a file (same size, header
// intact) and moves its mtime an hour back: the write's own times could fall
// in the coarse timestamp tick of the commit, which no later edit would.
func modifyInPlace(t *testing.T, path string) {
	t.Helper()
	f := must(os.OpenFile(path, os.O_RDWR, 0))(t)
	fi := must(f.Stat())(t)
	var b [1]byte
	must(f.ReadAt(b[:], fi.Size()-1))(t)
	b[0] ^= 0xff
	must(f.WriteAt(b[:], fi.Size()-1))(t)
	check(t, f.Close())
	old := fi.ModTime().Add(-time.Hour)
	check(t, os.Chtimes(path, old, old))
}

// A kept file of a killed run must be the file committed: one modified
// after its commit (same size, same header) is written again. A finished
// directory keeps no bookkeeping: a rerun keeps every file whose name, size
// and header are the plan's (the bytes past the header are reassemble
// --check's and verify's to read) and writes again one removed or resized.
func TestKeptFileModifiedAfterCommit(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	srcDir := filepath.Join(tmp, "src")
	writeSmall(t, srcDir, nil)
	src := must(OpenSource(srcDir))(t)
	defer src.Close()
	ctx := context.Background()
	p := smallPlan(t, src, smallLayout, ExportOptions{})
	ref := filepath.Join(tmp, "ref")
	must(p.Execute(ctx, ref, ExecOptions{}))(t)

	// Finished run, then a file truncated and another removed.
	dst := filepath.Join(tmp, "dst")
	must(p.Execute(ctx, dst, ExecOptions{}))(t)
	check(t, os.Truncate(filepath.Join(dst, p.Dirs[1].Dir, p.Dirs[1].files[0].name), 100))
	check(t, os.Remove(filepath.Join(dst, p.Dirs[2].Dir, p.Dirs[2].files[0].name)))
	res := must(p.Execute(ctx, dst, ExecOptions{}))(t)
	if res.Written != 2 || res.Kept != p.Files-2 {
		t.Errorf("rerun after a file was truncated and another removed: %+v, want both written again, the other %d kept", res, p.Files-2)
	}
	treeEqual(t, ref, dst)
	if res := must(p.Execute(ctx, dst, ExecOptions{}))(t); res.Written != 0 || res.Changed != 0 {
		t.Errorf("rerun of the repaired export: %+v", res)
	}

	// Killed run: one file committed (and recorded), then modified.
	dst2 := filepath.Join(tmp, "dst2")
	d0 := &p.Dirs[0]
	dr := must(prepareDir(p, d0, filepath.Join(dst2, d0.Dir), false))(t)
	of := d0.files[0]
	path := filepath.Join(dst2, d0.Dir, of.name)
	commit, err := writeFile(ctx, of, path, nil, new([]byte), nil, nil)
	check(t, err)
	check(t, commit())
	check(t, dr.recordCommit(of, fileSum(t, path)))
	modifyInPlace(t, path)
	res = must(p.Execute(ctx, dst2, ExecOptions{}))(t)
	if res.Changed != 1 || res.Kept != 0 || res.Written != p.Files {
		t.Errorf("resume after the killed run's file was modified: %+v, want it written again", res)
	}
	treeEqual(t, ref, dst2)
}

// countingProgress counts what ExecOptions.Progress hears.
type countingProgress struct {
	starts int
	total  int64
	done   atomic.Int64
}

func (c *countingProgress) Start(n int64) { c.starts++; c.total = n }
func (c *countingProgress) Add(n int64)   { c.done.Add(n) }

// fileSum is the hex sha256 of the file at path, read back whole.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// writeFile writes one planned file to path, front to back, under a
// temporary name and returns how to commit it (sync and rename). window is
// the job's read buffer (windowSize bytes, allocated here when nil); the
// tensor bytes accepted are reported to progress as they are. On error
// nothing is left behind.
func writeFile(ctx context.Context, of *outFile, path string, pool *filewrite.Pool, window *[]byte, progress func(int64), net *netFetch) (commit func() error, err error) {
	f, err := writeFileTo(ctx, of, path, func(prog func(int64)) (*filewrite.File, error) {
		return filewrite.Create(path, pool, prog)
	}, window, progress, net)
	if err != nil {
		return nil, err
	}
	return f.Commit, nil
}
