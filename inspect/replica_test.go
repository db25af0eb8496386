package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
	"golang.org/x/sync/errgroup"
)

// The test checkpoints come from internal/testckpt: in-memory header-only
// fakes for the figures (no disk), on-disk replicas made once per test binary
// for the tests of reading files, and the full-size replica only for the few
// end-to-end tests (skipped under -short) and the benchmarks.
func TestMain(m *testing.M) { testckpt.Main(m) }

// fullFake is the full-size K3 checkpoint, header only, in memory.
func fullFake(tb testing.TB) *fakeCkpt { return fakeOf(tb, model.ScaleFull) }

// auditFake audits an in-memory checkpoint as Inspect audits a directory.
func auditFake(tb testing.TB, fk *fakeCkpt, opts Options) *Report {
	tb.Helper()
	rep, err := audit(fakeHeaders(fk), "fake", opts)
	if err != nil {
		tb.Fatal(err)
	}
	return rep
}

// fakeHeaders serves a fake as a directory with its index and config.json
// is served: the same bytes read (headers and index) are counted.
func fakeHeaders(fk *fakeCkpt) *headers {
	ck := &safetensors.Checkpoint{Files: fk.Files}
	h := checkpointHeaders(ck)
	h.readAux = fk.ReadAux
	h.read = func() int64 { return fk.HeaderBytes() + int64(len(fk.Index)) }
	h.fetched = func() int64 { return 0 }
	return h
}

// fullReplica is the full-size K3 checkpoint on disk, header only (data as
// holes): seconds and ~130 MB of disk, for end-to-end tests and benchmarks.
func fullReplica(tb testing.TB) string { return testckpt.Replica(tb, model.ScaleFull) }

// tinyReplica is the tiny-scale checkpoint on disk, header only: every kind
// of tensor on the real 93-layer schedule, in milliseconds.
func tinyReplica(tb testing.TB) string { return testckpt.Replica(tb, model.ScaleTiny) }

// smallReplica is the tiny checkpoint cut to 4 layers on disk, header only:
// every kind of tensor and file in 7 shards, for the tests that copy a
// replica to damage it (each copy creates every file anew).
func smallReplica(tb testing.TB) string {
	cfg := testckpt.LayersConfigJSON(tb, model.ScaleTiny, 4)
	return testckpt.Dir(tb, "tiny-4-layers", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: cfg, HeaderOnly: true})
	})
}

// copyReplica copies a header-only replica into a directory a test may damage.
func copyReplica(tb testing.TB, src string) string { return testckpt.Copy(tb, src) }

// convertedReplica is src as the converter would write it in a convention:
// convert's own plan gives every output header, config.json and ModelOpt's
// hf_quant_config.json; the index lists the files written; the data is left
// as holes. inspect is then tested on converted headers it did not compute
// itself.
func convertedReplica(tb testing.TB, srcName, src string, format model.Format) string {
	return testckpt.Dir(tb, srcName+"-"+format.String(), func(dir string) error {
		ck, err := safetensors.Open(src)
		if err != nil {
			return err
		}
		defer ck.Close()
		r, err := convert.Lookup(defaultRecipe)
		if err != nil {
			return err
		}
		p, err := convert.NewPlan(ck, nil, r, convert.Options{Format: format})
		if err != nil {
			return err
		}
		idx := &safetensors.Index{WeightMap: map[string]string{}}
		for _, fp := range p.Files {
			l := fp.Layout
			w, err := safetensors.Create(filepath.Join(dir, fp.Name), l)
			if err != nil {
				return err
			}
			if err := w.CommitSparse(); err != nil {
				return err
			}
			for _, t := range l.Tensors {
				idx.WeightMap[t.Name] = fp.Name
				idx.TotalSize += t.Size()
			}
		}
		if err := os.WriteFile(filepath.Join(dir, model.ConfigName), p.Config, 0o644); err != nil {
			return err
		}
		if p.HFQuantConfig != nil {
			if err := os.WriteFile(filepath.Join(dir, convert.HFQuantConfigName), p.HFQuantConfig, 0o644); err != nil {
				return err
			}
		}
		return safetensors.WriteIndex(filepath.Join(dir, safetensors.IndexName), idx)
	})
}

// readHead reads a JSON side file whole, or a shard's 8-byte length and header.
func readHead(path string) ([]byte, error) {
	if filepath.Ext(path) != ".safetensors" {
		return os.ReadFile(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err != nil {
		return nil, err
	}
	size := int64(n[0]) | int64(n[1])<<8 | int64(n[2])<<16 | int64(n[3])<<24 | int64(n[4])<<32
	if fi, err := f.Stat(); err != nil || size > fi.Size()-8 {
		return nil, fmt.Errorf("%s: header of %d bytes: %v", path, size, err)
	}
	b := make([]byte, 8+size)
	_, err = f.ReadAt(b, 0)
	return b, err
}

// checkpointHeaders serves an opened checkpoint.
func checkpointHeaders(ck *safetensors.Checkpoint) *headers {
	names := make([]string, len(ck.Files))
	for i, f := range ck.Files {
		names[i] = f.Path
	}
	return &headers{
		names:   names,
		readAux: ck.ReadAux,
		walk: func(fn func(int, *safetensors.File) error) error {
			var g errgroup.Group
			g.SetLimit(runtime.GOMAXPROCS(0))
			for i, f := range ck.Files {
				g.Go(func() error { return fn(i, f) })
			}
			return g.Wait()
		},
		read:    func() int64 { return ck.HeaderBytesRead },
		fetched: ck.BytesFetched,
	}
}
