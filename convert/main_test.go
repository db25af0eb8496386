package convert

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// testRoot holds the replicas shared by the tests of this package.
var testRoot string

// tiny is a tiny K3 replica (model.Synth: the 93-layer schedule, 96 shards)
// with side files added, and its default conversion, each built on first
// use (tinySrc, tinyRef): most tests need only the mini replica, which
// costs a tenth as much and is built before any test runs.
var tiny struct {
	src, ref       sync.Once
	srcErr, refErr error
}

// tinySrc is the tiny replica's directory.
func tinySrc(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(testRoot, "src")
	tiny.src.Do(func() { tiny.srcErr = makeReplica(dir, nil) })
	if tiny.srcErr != nil {
		t.Fatal("tiny replica:", tiny.srcErr)
	}
	return dir
}

// tinyRef is the directory of the tiny replica's default conversion.
func tinyRef(t testing.TB) string {
	t.Helper()
	src, dir := tinySrc(t), filepath.Join(testRoot, "ref")
	tiny.ref.Do(func() { _, tiny.refErr = convertDir(src, dir, Options{}, ExecOptions{Jobs: 2}) })
	if tiny.refErr != nil {
		t.Fatal("tiny reference conversion:", tiny.refErr)
	}
	return dir
}

// convKey names a conversion: source directory, recipe and options.
type convKey struct {
	src, recipe string
	opts        Options
}

// sharedConv is one conversion several tests read, made on first use.
type sharedConv struct {
	once sync.Once
	dir  string
	res  *Result
	err  error
}

var shared struct {
	mu sync.Mutex
	m  map[convKey]*sharedConv
}

// sharedConversion is the conversion of src with recipe and opts (2 jobs),
// made once per test binary under testRoot, and its result. Callers read
// both and change neither: a test that alters the output copies it first.
func sharedConversion(t testing.TB, src, recipe string, opts Options) (string, *Result) {
	t.Helper()
	k := convKey{src, recipe, opts}
	shared.mu.Lock()
	if shared.m == nil {
		shared.m = map[convKey]*sharedConv{}
	}
	e := shared.m[k]
	if e == nil {
		e = &sharedConv{dir: filepath.Join(testRoot, fmt.Sprintf("shared-%d", len(shared.m)))}
		shared.m[k] = e
	}
	shared.mu.Unlock()
	e.once.Do(func() {
		r, err := Lookup(recipe)
		if err != nil {
			e.err = err
			return
		}
		c, err := safetensors.Open(src)
		if err != nil {
			e.err = err
			return
		}
		defer c.Close()
		p, err := NewPlan(c, nil, r, opts)
		if err == nil {
			e.res, err = Execute(context.Background(), p, e.dir, ExecOptions{Jobs: 2})
		}
		if err == nil && !e.res.Finalized {
			err = fmt.Errorf("not finalized")
		}
		e.err = err
	})
	if e.err != nil {
		t.Fatalf("shared conversion of %s (%s, %+v): %v", src, recipe, opts, e.err)
	}
	return e.dir, e.res
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	testRoot, err = os.MkdirTemp("", "k3ckpt-convert-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(testRoot)
	miniSrc = filepath.Join(testRoot, "mini-src")
	miniRef = filepath.Join(testRoot, "mini-ref")
	miniJSON, err := miniConfigJSON()
	if err == nil {
		err = makeReplica(miniSrc, miniJSON)
	}
	var res *Result
	if err == nil {
		res, err = convertDir(miniSrc, miniRef, Options{}, ExecOptions{Jobs: 2})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// miniRef is the shared default conversion of the mini replica.
	ref := &sharedConv{dir: miniRef, res: res}
	ref.once.Do(func() {})
	shared.m = map[convKey]*sharedConv{{miniSrc, AttnMoEDenseFP8, Options{}}: ref}
	return m.Run()
}

// skipShort skips, under -short, a test that costs about a CPU-second or
// more: the -short subset keeps a cheaper test of the same code (the full
// run has both).
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("costs seconds: run without -short")
	}
}

// sideFiles stand for the tokenizer, chat template and custom code of a real
// checkpoint; hidden files must not be copied.
var sideFiles = map[string]string{
	"tokenizer_config.json":      `{"chat_template": "{{ messages }}"}` + "\n",
	"tiktoken.model":             "not really a tokenizer\n",
	"code/modeling_kimi_k3.py":   "# custom code\n",
	".cache/huggingface/ignored": "hidden\n",
}

func openSrc(t testing.TB, dir string) *safetensors.Checkpoint {
	t.Helper()
	c, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func planFor(src string, opts Options) (*Plan, *safetensors.Checkpoint, error) {
	c, err := safetensors.Open(src)
	if err != nil {
		return nil, nil, err
	}
	r, err := Lookup(AttnMoEDenseFP8)
	if err != nil {
		return nil, nil, err
	}
	p, err := NewPlan(c, nil, r, opts)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return p, c, nil
}

func convertDir(src, dst string, opts Options, eo ExecOptions) (*Result, error) {
	p, c, err := planFor(src, opts)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return Execute(context.Background(), p, dst, eo)
}

// treeHashes maps every file under dir to its sha256.
func treeHashes(t testing.TB, dir string) map[string]string { return testckpt.TreeHashes(t, dir, nil) }

// readManifest reads the manifest of local DST dst.
func readManifest(dst string) (*dstManifest, error) { return localDest(dst).readManifest() }

func sameTree(t testing.TB, got, want string) {
	t.Helper()
	testckpt.SameTree(t, got, want, "the reference conversion", nil)
}

// tempsUnder lists leftover temporaries anywhere under dir.
func tempsUnder(t testing.TB, dir string) []string {
	t.Helper()
	var temps []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".k3tmp-") {
			temps = append(temps, p)
		}
		return nil
	})
	return temps
}

func readAll(t testing.TB, r io.Reader) []byte {
	t.Helper()
	if sr, ok := r.(*io.SectionReader); ok { // one read, no regrowing
		b := make([]byte, sr.Size())
		if _, err := sr.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func listDir(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}
