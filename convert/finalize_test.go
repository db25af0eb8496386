package convert

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// A whole run killed while finalizing leaves every shard done and recorded,
// its staged index and configs under temporary names (partly written) or
// already renamed into place, and no manifest (or a partial temporary of
// it). Resume writes no shard again, finalizes, and the tree is the
// uninterrupted run's, with no temporary left; the manifest the run returns
// is the one it wrote.
func TestResumeAfterKilledFinalize(t *testing.T) {
	t.Parallel()
	opts := Options{Format: modelOpt} // both configs
	p, c, err := planFor(miniSrc, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ref := filepath.Join(t.TempDir(), "ref")
	if _, err := convertDir(miniSrc, ref, opts, ExecOptions{Jobs: 2}); err != nil {
		t.Fatal(err)
	}
	staged := []string{safetensors.IndexName}
	for name := range metaFiles(p.Config, p.HFQuantConfig) {
		staged = append(staged, name)
	}
	if len(staged) != 3 {
		t.Fatalf("ModelOpt plan writes %v", staged)
	}
	for _, renamed := range []bool{false, true} {
		dst := filepath.Join(t.TempDir(), "out")
		copyTree(t, ref, dst)
		m, err := readManifest(dst)
		if err != nil {
			t.Fatal(err)
		}
		// What the killed run left: its plan, its records, no manifest.
		if err := writeState(filepath.Join(dst, stateDir, stateName), p.state()); err != nil {
			t.Fatal(err)
		}
		var log []byte
		for _, u := range p.units() {
			rec, ok := m.lookup(u.Name)
			if !ok {
				t.Fatalf("%s not in the reference manifest", u.Name)
			}
			b, _ := json.Marshal(doneRecord{Plan: p.ID, fileRecord: rec})
			log = append(append(log, b...), '\n')
		}
		os.MkdirAll(filepath.Join(dst, stateDir, doneDir), 0o755)
		if err := os.WriteFile(filepath.Join(dst, stateDir, doneDir, "run"+logExt), log, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dst, ManifestName))
		if renamed {
			os.WriteFile(filepath.Join(dst, filewrite.TempPrefix+ManifestName+"-77"), []byte(`{"version": 1, "pl`), 0o644)
		} else {
			for i, name := range staged {
				b, err := os.ReadFile(filepath.Join(dst, name))
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(dst, filewrite.TempPrefix+name+"-"+string(rune('1'+i))), b[:len(b)/2], 0o644)
				os.Remove(filepath.Join(dst, name))
			}
		}
		res, err := convertDir(miniSrc, dst, opts, ExecOptions{Jobs: 2, Resume: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Written) != 0 || !res.Finalized {
			t.Fatalf("renamed %v: written %v, finalized %v", renamed, res.Written, res.Finalized)
		}
		sameTree(t, dst, ref)
		if temps := tempsUnder(t, dst); len(temps) > 0 {
			t.Errorf("renamed %v: temporaries left: %v", renamed, temps)
		}
		written, err := readManifest(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res.Manifest, written) {
			t.Errorf("renamed %v: the run returned a manifest other than the one it wrote", renamed)
		}
		for _, name := range staged {
			if _, ok := res.Manifest.lookup(name); !ok {
				t.Errorf("the returned manifest finds no %s", name)
			}
		}
	}
}

// While a whole run writes its shards, its index and configs exist only
// under temporary names: no final name holds them before every shard is done.
func TestEarlyFilesStayTemporary(t *testing.T) {
	t.Parallel()
	p, c, err := planFor(miniSrc, Options{Format: modelOpt})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := t.TempDir()
	e := stageEarly(p, localDest(dst))
	<-e.done
	if e.err != nil {
		t.Fatal(e.err)
	}
	var temps []string
	for _, n := range listDir(t, dst) {
		if !strings.HasPrefix(n, filewrite.TempPrefix) {
			t.Errorf("%s under a final name before commit", n)
		}
		temps = append(temps, n)
	}
	if len(temps) != 3 {
		t.Errorf("staged %v, want the index and both configs", temps)
	}
	e.abort()
	if left := listDir(t, dst); len(left) != 0 {
		t.Errorf("abort left %v", left)
	}
}
