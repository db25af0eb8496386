package inspect

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// In memory (no disk, no synth): fakeOf(tb, scale) or fakeConfig(tb, json)
// returns every shard of the checkpoint a config describes as a validated
// *safetensors.File (a header read by the codec, tensors in the released
// files' data order, data reading as zeros), the config and the index bytes.
// Fakes are built once per config and test binary and shared: treat them as
// read-only.

// fakeCkpt is a header-only checkpoint held in memory.
type fakeCkpt struct {
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
// included), as safetensors.Checkpoint.HeaderBytesRead counts them without the index.
func (c *fakeCkpt) HeaderBytes() int64 {
	var n int64
	for _, f := range c.Files {
		n += f.DataStart
	}
	return n
}

// ReadAux serves config.json and the index by name, as a checkpoint's side
// files; anything else is safetensors.ErrNotFound.
func (c *fakeCkpt) ReadAux(name string) ([]byte, error) {
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
	ck   *fakeCkpt
	err  error
}

// fakeOf is the header-only checkpoint of a built-in scale (model.ScaleFull is
// the release: 96 shards, 497,220 tensors, about 1 s and 200 MB to build).
func fakeOf(tb testing.TB, scale model.Scale) *fakeCkpt {
	tb.Helper()
	b, err := model.FamilyConfigJSON("", scale)
	if err != nil {
		tb.Fatal(err)
	}
	return fakeConfig(tb, b)
}

// fakeConfig is the header-only checkpoint config.json describes, laid out
// as synth writes it (the released placement, the codec's canonical order).
func fakeConfig(tb testing.TB, configJSON []byte) *fakeCkpt {
	tb.Helper()
	fakeMu.Lock()
	e := fakes[string(configJSON)]
	if e == nil {
		e = &fakeEntry{}
		fakes[string(configJSON)] = e
	}
	fakeMu.Unlock()
	e.once.Do(func() { e.ck, e.err = buildFake(configJSON) })
	if e.err != nil {
		tb.Fatal(e.err)
	}
	return e.ck
}

func buildFake(configJSON []byte) (*fakeCkpt, error) {
	cfg, err := model.ParseConfig(configJSON)
	if err != nil {
		return nil, err
	}
	ck := &fakeCkpt{Config: cfg, ConfigJSON: configJSON, Files: make([]*safetensors.File, cfg.NumShards())}
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

// TestFakeIsTheReplica: the in-memory fake is, header for header, the
// replica synth writes to disk (read back by the codec), with the same index.
func TestFakeIsTheReplica(t *testing.T) {
	t.Parallel()
	fk := fakeOf(t, model.ScaleTiny)
	dir := testckpt.Replica(t, model.ScaleTiny)
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if len(ck.Files) != len(fk.Files) || len(fk.Files) != fk.Config.NumShards() {
		t.Fatalf("%d files on disk, %d fakes, config says %d", len(ck.Files), len(fk.Files), fk.Config.NumShards())
	}
	for i, f := range ck.Files {
		g := fk.Files[i]
		if g.Path != f.Path || g.Size != f.Size || g.DataStart != f.DataStart || len(g.Tensors) != len(f.Tensors) {
			t.Fatalf("shard %d: fake %s %d B (header %d), disk %s %d B (header %d)", i, g.Path, g.Size, g.DataStart, f.Path, f.Size, f.DataStart)
		}
		for j, tf := range f.Tensors {
			tg := g.Tensors[j]
			if tg.Name != tf.Name || tg.DType != tf.DType || !slices.Equal(tg.Shape, tf.Shape) || tg.Begin != tf.Begin || tg.End != tf.End {
				t.Fatalf("%s tensor %d: fake %+v, disk %+v", f.Path, j, tg, tf)
			}
			if _, ok := g.Lookup(tf.Name); !ok {
				t.Fatalf("%s: fake cannot look up %s", f.Path, tf.Name)
			}
		}
	}
	disk, err := os.ReadFile(filepath.Join(dir, safetensors.IndexName))
	if err != nil {
		t.Fatal(err)
	}
	if string(disk) != string(fk.Index) {
		t.Errorf("fake index differs from synth's (%d vs %d bytes)", len(fk.Index), len(disk))
	}
	if cfg, _ := os.ReadFile(filepath.Join(dir, model.ConfigName)); string(cfg) != string(fk.ConfigJSON) {
		t.Error("fake config.json differs from synth's")
	}
	if fk.HeaderBytes()+int64(len(fk.Index)) != ck.HeaderBytesRead {
		t.Errorf("fake headers %d B + index %d B, Open read %d B", fk.HeaderBytes(), len(fk.Index), ck.HeaderBytesRead)
	}
	if n := len(fk.specs()); n != ck.NumTensors() || n != fk.Config.NumTensors() {
		t.Errorf("%d specs, %d on disk, config %d", n, ck.NumTensors(), fk.Config.NumTensors())
	}
	last := fk.Files[len(fk.Files)-1]
	ti := last.Tensors[len(last.Tensors)-1]
	b, err := io.ReadAll(last.Section(ti))
	if err != nil || int64(len(b)) != ti.Size() || slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
		t.Errorf("fake data of %s: %d bytes (want %d zeros), %v", ti.Name, len(b), ti.Size(), err)
	}
	if fakeOf(t, model.ScaleTiny) != fk || testckpt.Replica(t, model.ScaleTiny) != dir {
		t.Error("fixtures built twice")
	}
}

// specs lists every tensor in file order (the order a safetensors.Checkpoint opened
// from disk lists them). Shapes alias the Files': do not modify them.
func (c *fakeCkpt) specs() []safetensors.TensorSpec {
	n := 0
	for _, f := range c.Files {
		n += len(f.Tensors)
	}
	out := make([]safetensors.TensorSpec, 0, n)
	for _, f := range c.Files {
		for _, t := range f.Tensors {
			out = append(out, safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape})
		}
	}
	return out
}
