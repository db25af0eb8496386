package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Replicas shared by the tests and benchmarks of this package: made once per
// test binary (a full-size header-only replica costs seconds and ~130 MB of
// real disk), removed by TestMain.
var (
	replicaRoot string
	replicaMu   sync.Mutex
	replicas    = map[string]string{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "k3ckpt-inspect-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	replicaRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// replica returns the directory of a named replica, making it on first use.
func replica(tb testing.TB, name string, make func(dir string) error) string {
	tb.Helper()
	replicaMu.Lock()
	defer replicaMu.Unlock()
	if d, ok := replicas[name]; ok {
		return d
	}
	d := filepath.Join(replicaRoot, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := make(d); err != nil {
		tb.Fatalf("replica %s: %v", name, err)
	}
	replicas[name] = d
	return d
}

// fullReplica is the full-size K3 checkpoint, header only (data as holes).
func fullReplica(tb testing.TB) string {
	return replica(tb, "full", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Scale: model.ScaleFull, HeaderOnly: true})
	})
}

// tinyReplica is the tiny-scale checkpoint, header only: every kind of tensor
// on the real 93-layer schedule, in milliseconds.
func tinyReplica(tb testing.TB) string {
	return replica(tb, "tiny", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Scale: model.ScaleTiny, HeaderOnly: true})
	})
}

// convertedReplica is src as the converter would write it in a convention:
// convert's own plan gives every output header, config.json and ModelOpt's
// hf_quant_config.json; the index lists the files written; the data is left
// as holes. inspect is
// then tested on converted headers it did not compute itself.
func convertedReplica(tb testing.TB, srcName, src string, format convert.Format) string {
	return replica(tb, srcName+"-"+format.String(), func(dir string) error {
		ck, err := safetensors.Open(src)
		if err != nil {
			return err
		}
		defer ck.Close()
		r, err := convert.Lookup(DefaultRecipe)
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
		if err := os.WriteFile(filepath.Join(dir, convert.ConfigName), p.Config, 0o644); err != nil {
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

// copyReplica copies a header-only replica (headers and sizes; holes stay
// holes) into a fresh directory that a test may damage.
func copyReplica(tb testing.TB, src string) string {
	tb.Helper()
	dst := tb.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		b, err := readHead(filepath.Join(src, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(src, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := f.Write(b); err != nil {
			tb.Fatal(err)
		}
		if err := f.Truncate(st.Size()); err != nil {
			tb.Fatal(err)
		}
		f.Close()
	}
	return dst
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
	if size > safetensors.MaxHeaderSize {
		return nil, fmt.Errorf("%s: header of %d bytes", path, size)
	}
	b := make([]byte, 8+size)
	_, err = f.ReadAt(b, 0)
	return b, err
}
