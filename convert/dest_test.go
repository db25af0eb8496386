package convert

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
)

// Side files follow the shards' link rule: a link to a file outside the
// checkpoint is refused (it would copy a private file into DST); a link
// inside it is followed, and every copy keeps its source's permission bits.
func TestSideFileLinksAndModes(t *testing.T) {
	src := copyWithShard(t, "tiktoken.model") // a copy: its mode changes
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("private\n"), 0o600)
	link := filepath.Join(src, "tokenizer.model")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := planFor(src, Options{}); !errors.Is(err, fsx.ErrOutside) || !strings.Contains(err.Error(), secret) {
		t.Fatalf("side file linked outside SRC: %v", err)
	}
	os.Remove(link)
	// Inside: a private file and a link to it.
	os.WriteFile(filepath.Join(src, "private.json"), []byte("{}\n"), 0o600)
	os.Symlink("private.json", link)
	os.Chmod(filepath.Join(src, "tiktoken.model"), 0o640)
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := convertDir(src, dst, Options{}, ExecOptions{Jobs: 2}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"private.json": 0o600, "tokenizer.model": 0o600, "tiktoken.model": 0o640, "code/modeling_kimi_k3.py": 0o644} {
		fi, err := os.Lstat(filepath.Join(dst, filepath.FromSlash(name)))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want a regular file of mode %v", name, err, fi.Mode(), want)
		}
	}
}

// DST inside SRC is refused: a second run would take the first one's output
// for side files of the source.
func TestDestinationInsideSource(t *testing.T) {
	src := copyWithShard(t, "")
	for _, dst := range []string{filepath.Join(src, "fp8"), filepath.Join(src, "a", "b")} {
		_, err := convertDir(src, dst, Options{}, ExecOptions{})
		if !errors.Is(err, ErrDestination) || !strings.Contains(err.Error(), "inside the source") {
			t.Errorf("DST %s inside SRC: %v", dst, err)
		}
	}
	// Through a link to SRC, too.
	ln := filepath.Join(t.TempDir(), "ln")
	os.Symlink(src, ln)
	if _, err := convertDir(src, filepath.Join(ln, "out"), Options{}, ExecOptions{}); !errors.Is(err, ErrDestination) {
		t.Errorf("DST inside SRC through a link: %v", err)
	}
	// Relative spellings from the parent directory (convert ckpt ckpt/fp8),
	// and a DST holding SRC: refused before DST is made.
	t.Chdir(filepath.Dir(src))
	base := filepath.Base(src)
	for _, c := range []struct{ src, dst string }{{base, base + "/fp8"}, {"./" + base, base + "/x/../fp8"}, {base, "."}} {
		_, err := convertDir(c.src, c.dst, Options{}, ExecOptions{})
		if !errors.Is(err, ErrDestination) || !errors.Is(err, fsx.ErrOverlap) {
			t.Errorf("convert %s %s: %v", c.src, c.dst, err)
		}
	}
	if _, err := os.Stat(filepath.Join(src, "fp8")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused DST inside SRC was created: %v", err)
	}
}

// Two runs on one DST: the second is refused while the first holds it,
// naming the holder; workers of one split share DST, one slice cannot run
// twice, and workers of another split are refused.
func TestDestinationLock(t *testing.T) {
	t.Parallel()
	p, c, err := planFor(miniSrc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(dst, 0o755)
	held, err := dirlock.Acquire(dst, dirlock.LockName)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Execute(context.Background(), p, dst, ExecOptions{})
	if !errors.Is(err, errInUse) || !strings.Contains(err.Error(), "in use by pid") {
		t.Fatalf("second run on a held DST: %v", err)
	}
	if _, err := Finalize(dst, ""); !errors.Is(err, errInUse) {
		t.Fatalf("merge on a held DST: %v", err)
	}
	held.Release()

	// Worker 0/2 is running: 0/2 again, 0/3 and a single run are refused, 1/2 is not.
	record, err := checkDest(p, localDest(dst), false)
	if err == nil && record != nil {
		err = record()
	}
	if err != nil {
		t.Fatal(err)
	}
	w0, err := lockSlice(dst, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Execute(context.Background(), p, dst, ExecOptions{Worker: 0, Workers: 2}); !errors.Is(err, errInUse) {
		t.Errorf("the same slice twice: %v", err)
	}
	if _, err := Execute(context.Background(), p, dst, ExecOptions{Worker: 1, Workers: 3}); !errors.Is(err, errInUse) || !strings.Contains(err.Error(), "another split") {
		t.Errorf("a worker of another split: %v", err)
	}
	if _, err := Execute(context.Background(), p, dst, ExecOptions{}); !errors.Is(err, errInUse) {
		t.Errorf("a single run while workers run: %v", err)
	}
	res, err := Execute(context.Background(), p, dst, ExecOptions{Worker: 1, Workers: 2, Jobs: 2})
	if err != nil || res.Finalized {
		t.Fatalf("worker 1/2 next to 0/2: %v (finalized %v)", err, res != nil && res.Finalized)
	}
	if _, err := Finalize(dst, ""); !errors.Is(err, errInUse) || !strings.Contains(err.Error(), "worker 0-of-2") {
		t.Errorf("merge while worker 0/2 runs: %v", err)
	}
	w0.Release()
	// No worker of 2 runs now: a worker of another split is still refused.
	if _, err := Execute(context.Background(), p, dst, ExecOptions{Worker: 2, Workers: 3}); !errors.Is(err, ErrWorker) || !strings.Contains(err.Error(), "0/2") {
		t.Errorf("a worker of another split after the first split's workers stopped: %v", err)
	}
	res, err = Execute(context.Background(), p, dst, ExecOptions{Worker: 0, Workers: 2, Jobs: 2})
	if err != nil || !res.Finalized {
		t.Fatalf("worker 0/2: %v", err)
	}
	sameTree(t, dst, miniRef)
}

// Flags are checked before anything is allocated from them.
func TestWorkerBounds(t *testing.T) {
	t.Parallel()
	p, c, err := planFor(miniSrc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, w := range [][2]int{{0, 1 << 32}, {0, MaxWorkers + 1}, {-1, 2}, {2, 2}, {0, 0}} {
		if _, err := p.slice(w[0], w[1]); !errors.Is(err, ErrWorker) {
			t.Errorf("slice %d/%d: %v", w[0], w[1], err)
		}
	}
	// More workers than files: every file in exactly one slice.
	n := len(p.units()) + 5
	seen := 0
	for i := range n {
		mine, err := p.slice(i, n)
		if err != nil {
			t.Fatal(err)
		}
		seen += len(mine)
	}
	if seen != len(p.units()) {
		t.Errorf("%d units over %d slices, want %d", seen, n, len(p.units()))
	}
}

// Two conversions started together on one DST: one runs, the other is
// refused (never a rename error from temporaries deleted under it); and of
// two plans claiming one DST exactly one is recorded.
func TestConcurrentRunsOnOneDestination(t *testing.T) {
	t.Parallel()
	p, c, err := planFor(miniSrc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := filepath.Join(t.TempDir(), "out")
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2})
			errs <- err
		}()
	}
	var ok, inUse int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, errInUse):
			inUse++
		default:
			t.Errorf("concurrent run: %v", err)
		}
	}
	if ok < 1 || ok+inUse != 2 {
		t.Errorf("%d runs succeeded, %d refused", ok, inUse)
	}
	sameTree(t, dst, miniRef)

	other, c2, err := planFor(miniSrc, Options{Format: modelOpt})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	claim := filepath.Join(t.TempDir(), stateDir, stateName)
	if err := createState(claim, p); err != nil {
		t.Fatal(err)
	}
	if err := createState(claim, other); !errors.Is(err, ErrDestination) {
		t.Errorf("a second plan claiming DST: %v", err)
	}
	if err := createState(claim, p); err != nil {
		t.Errorf("the same plan again: %v", err)
	}
}

// A run removes the temporaries a killed run left of its own units, in
// every directory they lie in, and nothing else: not another worker's
// temporaries in the same directory, not finished files.
func TestRemoveOwnTemps(t *testing.T) {
	t.Parallel()
	dst := t.TempDir()
	os.MkdirAll(filepath.Join(dst, "code"), 0o755)
	files := map[string]bool{ // name → removed
		".k3tmp-model-00001-of-000002.safetensors-123":       true,
		".k3tmp-model-00002-of-000002.safetensors-99":        false, // another worker's unit
		".k3tmp-config.json-7":                               true,
		"model-00001-of-000002.safetensors":                  false,
		".k3tmp-model-00001-of-000002.safetensors":           false, // no dash after the base: not a temporary of it
		"code/.k3tmp-modeling_kimi_k3.py-5":                  true,
		"code/.k3tmp-model-00001-of-000002.safetensors-1":    false, // same base, other directory
		"code/modeling_kimi_k3.py":                           false,
		"code/.k3tmp-tokenizer.json-2":                       false,
		".k3tmp-model-00001-of-000002.safetensors-part-3-x7": true,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dst, filepath.FromSlash(name)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	units := []unit{{Name: "model-00001-of-000002.safetensors"}, {Name: "config.json"}, {Name: "code/modeling_kimi_k3.py"}, {Name: "missing/dir.json"}}
	if err := removeOwnTemps(dst, units); err != nil {
		t.Fatal(err)
	}
	for name, removed := range files {
		_, err := os.Lstat(filepath.Join(dst, filepath.FromSlash(name)))
		if gone := errors.Is(err, os.ErrNotExist); gone != removed {
			t.Errorf("%s: removed %v, want %v (%v)", name, gone, removed, err)
		}
	}
}

// A whole run records its plan while it produces its first files: a commit
// waits for the record, and when recording fails no file reaches its final
// name, no done record is written and no temporary is left.
func TestNoCommitBeforePlanRecorded(t *testing.T) {
	t.Parallel()
	p, c, err := planFor(miniSrc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := t.TempDir()
	failed := errors.New("plan record failed")
	state := recordState(func() error { return failed })
	log := newRecordLog(dst, 0, 1, state)
	_, err = run(context.Background(), p, localDest(dst), p.units(), nil, nil, log, 2, ExecOptions{Jobs: 2})
	log.close()
	if !errors.Is(err, failed) {
		t.Fatalf("run with a failed plan record: %v", err)
	}
	if left := listDir(t, dst); len(left) != 0 {
		t.Errorf("left in DST: %v", left)
	}
	// Resume re-records the files it keeps: not before the plan either.
	copyTree(t, miniRef, dst)
	recs := records{}
	m, err := readManifest(dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		recs[f.Name] = doneRecord{Plan: p.ID, fileRecord: f}
	}
	log = newRecordLog(dst, 0, 1, state)
	_, err = run(context.Background(), p, localDest(dst), p.units(), recs, nil, log, 2, ExecOptions{Jobs: 2, Resume: true})
	log.close()
	if !errors.Is(err, failed) {
		t.Fatalf("resume with a failed plan record: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, stateDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("records written before the plan: %v", err)
	}
}
