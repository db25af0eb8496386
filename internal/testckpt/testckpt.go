// Package testckpt gives tests K3 checkpoints without each package building
// its own on-disk fixtures: header-only fakes held in memory, built from the
// model's catalog for any config, and replicas on disk made once per test
// binary.
//
// In memory (no disk, no synth): Fake(tb, scale) or FakeConfig(tb, json)
// returns every shard of the checkpoint a config describes as a validated
// *safetensors.File (a header read by the codec, tensors in the released
// files' data order, data reading as zeros), the config and the index bytes.
// Fakes are built once per config and test binary and shared: treat them as
// read-only. Planner tests take a File's tensors; packages whose
// code reads a *safetensors.File take Files directly.
//
// On disk: Replica(tb, scale) synthesizes a header-only replica (data left as
// holes of sparse files) once per test binary into a temporary directory;
// Copy(tb, dir) copies one into tb.TempDir() for a test that damages it. A
// package using them calls Main from its TestMain, which removes the
// directory when the tests end:
//
//	func TestMain(m *testing.M) { testckpt.Main(m) }
//
// End-to-end tests on the full-size replica (seconds and ~130 MB of disk)
// should be few and skip under -short; SkipShort says so in one line.
package testckpt

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Checkpoint is a header-only checkpoint held in memory.
type Checkpoint struct {
	// Config is the parsed config; ConfigJSON its bytes (config.json).
	Config     *model.Config
	ConfigJSON []byte
	// Files are the shards in name order, each a validated header with
	// Path set to the shard's file name, its data reading as zeros.
	Files []*safetensors.File
	// Index is the model.safetensors.index.json of the shards.
	Index []byte
}

// HeaderBytes is what reading every header costs (8-byte prefixes
// included), as Checkpoint.HeaderBytesRead counts them without the index.
func (c *Checkpoint) HeaderBytes() int64 {
	var n int64
	for _, f := range c.Files {
		n += f.DataStart
	}
	return n
}

// ReadAux serves config.json and the index by name, as a checkpoint's side
// files; anything else is safetensors.ErrNotFound.
func (c *Checkpoint) ReadAux(name string) ([]byte, error) {
	switch name {
	case model.ConfigName:
		return c.ConfigJSON, nil
	case safetensors.IndexName:
		return c.Index, nil
	}
	return nil, fmt.Errorf("%s: %w", name, safetensors.ErrNotFound)
}

var (
	fakeMu sync.Mutex
	fakes  = map[string]*fakeEntry{}
)

type fakeEntry struct {
	once sync.Once
	ck   *Checkpoint
	err  error
}

// Fake is the header-only checkpoint of a built-in scale (model.ScaleFull is
// the release: 96 shards, 497,220 tensors, about 1 s and 200 MB to build).
func Fake(tb testing.TB, scale model.Scale) *Checkpoint {
	tb.Helper()
	b, err := model.ScaledConfigJSON(scale)
	if err != nil {
		tb.Fatal(err)
	}
	return FakeConfig(tb, b)
}

// FakeConfig is the header-only checkpoint config.json describes, laid out
// as synth writes it (the released placement, the codec's canonical order).
func FakeConfig(tb testing.TB, configJSON []byte) *Checkpoint {
	tb.Helper()
	fakeMu.Lock()
	e := fakes[string(configJSON)]
	if e == nil {
		e = &fakeEntry{}
		fakes[string(configJSON)] = e
	}
	fakeMu.Unlock()
	e.once.Do(func() { e.ck, e.err = build(configJSON) })
	if e.err != nil {
		tb.Fatal(e.err)
	}
	return e.ck
}

func build(configJSON []byte) (*Checkpoint, error) {
	cfg, err := model.ParseConfig(configJSON)
	if err != nil {
		return nil, err
	}
	ck := &Checkpoint{Config: cfg, ConfigJSON: configJSON, Files: make([]*safetensors.File, cfg.NumShards())}
	idx := &safetensors.Index{WeightMap: make(map[string]string, cfg.NumTensors())}
	var g sync.WaitGroup
	errs := make([]error, len(ck.Files))
	for i := range ck.Files {
		g.Go(func() { ck.Files[i], errs[i] = fakeFile(cfg.ShardName(i), cfg.ShardTensors(i)) })
	}
	g.Wait()
	for i, f := range ck.Files {
		if errs[i] != nil {
			return nil, errs[i]
		}
		for _, t := range f.Tensors {
			idx.WeightMap[t.Name] = f.Path
			idx.TotalSize += t.Size()
		}
	}
	if ck.Index, err = idx.Marshal(); err != nil {
		return nil, err
	}
	return ck, nil
}

// fakeFile lays specs out as the codec writes a file and reads the header
// back through the codec: a validated File named name whose data reads as
// zeros (a sparse file's holes), held in memory.
func fakeFile(name string, specs []safetensors.TensorSpec) (*safetensors.File, error) {
	l, err := safetensors.NewFilePlan(specs, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f, err := safetensors.ReadHeader(holes{l.Header, l.Size}, l.Size, name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// holes is a file of the given size holding header and then zeros.
type holes struct {
	header []byte
	size   int64
}

func (h holes) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= h.size {
		return 0, io.EOF
	}
	n := len(p)
	if int64(n) > h.size-off {
		n = int(h.size - off)
	}
	clear(p[:n])
	if off < int64(len(h.header)) {
		copy(p[:n], h.header[off:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// The on-disk replicas of this test binary, under one temporary directory.
var (
	diskMu   sync.Mutex
	diskRoot string
	replicas = map[string]*fakeEntry{}
)

// Main runs a package's tests and removes the replicas they made; call it
// from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	diskMu.Lock()
	if diskRoot != "" {
		os.RemoveAll(diskRoot)
	}
	diskMu.Unlock()
	os.Exit(code)
}

// Replica is the directory of a header-only replica of a built-in scale
// (config.json, the shards with their data as holes, the index), synthesized
// on first use in this test binary. Tests must not write into it (Copy).
func Replica(tb testing.TB, scale model.Scale) string {
	tb.Helper()
	return Dir(tb, "replica-"+scale.String(), func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Scale: scale, HeaderOnly: true})
	})
}

// Dir is a directory made once per test binary by make (given an empty
// directory) and shared under name, for fixtures other than a plain replica
// (a converted one, for instance). A failed make fails every test asking.
func Dir(tb testing.TB, name string, make func(dir string) error) string {
	tb.Helper()
	diskMu.Lock()
	if diskRoot == "" {
		d, err := os.MkdirTemp("", "k3ckpt-testckpt-")
		if err != nil {
			diskMu.Unlock()
			tb.Fatal(err)
		}
		diskRoot = d
	}
	e := replicas[name]
	if e == nil {
		e = &fakeEntry{}
		replicas[name] = e
	}
	root := diskRoot
	diskMu.Unlock()
	dir := filepath.Join(root, name)
	e.once.Do(func() {
		if e.err = os.MkdirAll(dir, 0o755); e.err == nil {
			e.err = make(dir)
		}
		if e.err != nil {
			e.err = fmt.Errorf("test checkpoint %s: %w", name, e.err)
		}
	})
	if e.err != nil {
		tb.Fatal(e.err)
	}
	return dir
}

// Copy copies a header-only checkpoint directory (headers and side files;
// data regions stay holes) into a fresh tb.TempDir(), for a test that
// damages it.
func Copy(tb testing.TB, src string) string {
	tb.Helper()
	dst := tb.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		if err := copyHead(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			tb.Fatal(err)
		}
	}
	return dst
}

// copyHead copies a side file whole, or a shard's header, keeping its size.
func copyHead(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	var head []byte
	if filepath.Ext(src) == ".safetensors" {
		f, err := safetensors.OpenFile(src)
		if err != nil {
			return err
		}
		head = make([]byte, f.DataStart) // bounded by the codec's header limit
		_, err = f.ReaderAt().ReadAt(head, 0)
		f.Close()
		if err != nil {
			return err
		}
	} else if head, err = os.ReadFile(src); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := out.Write(head); err != nil {
		out.Close()
		return err
	}
	if err := out.Truncate(st.Size()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SkipShort skips an end-to-end test under -short.
func SkipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("end-to-end on an on-disk replica: skipped under -short")
	}
}
