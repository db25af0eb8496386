package layout

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// maxForeignNamed bounds the entries a refusal names (and the walk that
// finds them).
const maxForeignNamed = 8

// plannedNames is every name (slash-separated) a run of d writes besides
// temporaries, sorted.
func (d *dirPlan) plannedNames() []string {
	names := []string{d.completionName()}
	if d.man != nil {
		names = append(names, safetensors.IndexName, sumsName)
	}
	for _, of := range d.files {
		names = append(names, of.name)
	}
	names = slices.AppendSeq(names, maps.Keys(d.side))
	slices.Sort(names)
	return slices.Compact(names)
}

// ownership sorts the entries of an output directory by who wrote them. A
// file is the tool's when a record of an unfinished run (any plan's) names
// it, when it is a file of this plan and the directory holds this plan's
// completion record, when it is a run's bookkeeping, or when its bytes are
// exactly what this plan writes under its name. Anything else, links
// included, is foreign: no flag lets the tool delete or overwrite it.
// Another plan's finished export is claimed by its manifest; another
// plan's finished reassembly (an index, as any checkpoint has) by nothing.
type ownership struct {
	owned   []string // slash-separated paths of files the tool wrote
	foreign []string // the first maxForeignNamed entries it did not
	more    bool     // more foreign entries than named
}

// claims are what a directory's own records say the tool wrote there.
type claims struct {
	recorded map[string]bool   // names a record lists
	want     map[string][]byte // names the tool's if their bytes are these
	// other is set when the records are another plan's finished export.
	other bool
}

// claimsOf gathers the claims on dir: prev, its record of an unfinished run
// (nil when absent); want, the plan's files written from memory; finished,
// this plan's names when its completion record is there; and, for an
// export, the manifest of another plan's finished run.
func claimsOf(dir string, prev *stampRecord, want map[string][]byte, finished []string, export bool) *claims {
	c := &claims{recorded: map[string]bool{}, want: want}
	if prev != nil {
		for n := range prev.Files {
			c.recorded[n] = true
		}
		for _, n := range prev.Names {
			c.recorded[n] = true
		}
	}
	for _, n := range finished {
		if _, whole := want[n]; !whole { // side files count only as written
			c.recorded[n] = true
		}
	}
	if !export || finished != nil || prev != nil {
		return c
	}
	m, err := readManifest(dir)
	if err != nil {
		return c
	}
	c.other = true
	c.recorded[manifestName], c.recorded[safetensors.IndexName], c.recorded[sumsName] = true, true, true
	for _, n := range m.files() {
		c.recorded[n] = true
	}
	if m.SourceConfig == "" {
		return c
	}
	cfg := []byte(m.SourceConfig)
	if m.Layout.Stages() > 1 {
		if cfg, err = stageConfig(cfg, m.Layout, m); err != nil {
			return c
		}
	}
	c.want = maps.Clone(want)
	c.want[model.ConfigName] = cfg // as the other run wrote it, not as this plan would
	return c
}

// survey walks dir (not a link) without following links and sorts its
// entries by the claims c.
func survey(dir string, c *claims) (*ownership, error) {
	o := &ownership{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			return nil // judged by what it holds
		}
		if d.Type().IsRegular() && c.ours(name, path) {
			o.owned = append(o.owned, name)
			return nil
		}
		if len(o.foreign) == maxForeignNamed {
			o.more = true
			return filepath.SkipAll
		}
		desc := name
		if !d.Type().IsRegular() {
			desc += " (" + fsx.Kind(d.Type()) + ")"
		}
		o.foreign = append(o.foreign, desc)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

func (c *claims) ours(name, path string) bool {
	if c.recorded[name] || isTemp(filepath.Base(name)) ||
		name == markerName || name == stampsName || name == dirlock.LockName {
		return true
	}
	w, ok := c.want[name]
	if !ok {
		return false
	}
	b, err := fsx.ReadFile(path, int64(len(w)))
	return err == nil && bytes.Equal(b, w)
}

// foreignError refuses a directory holding entries no run of the tool
// wrote, naming them.
func (o *ownership) foreignError(dir, completion string) error {
	list := make([]string, len(o.foreign))
	for i, n := range o.foreign {
		list[i] = termtext.Name(n)
	}
	names := strings.Join(list, ", ")
	if o.more {
		names += ", …"
	}
	if completion != "" {
		if fi, err := os.Lstat(filepath.Join(dir, completion)); err == nil && fi.Mode().IsRegular() {
			return fmt.Errorf("%w: %s holds a finished output other than this plan's (%s differs), or files no k3ckpt run wrote (%s); a finished run keeps no record of its files, so k3ckpt deletes or overwrites none of them, not even with --restart: remove the directory to write this plan there, or choose another DST", errOutputExists, dir, completion, names)
		}
	}
	return fmt.Errorf("%w: %s holds entries that no k3ckpt run wrote (%s); k3ckpt never deletes or overwrites them, not even with --restart: move them away or choose another DST", errOutputExists, dir, names)
}

// removeOwned deletes the files the tool wrote in dir (the lock aside), then
// the subdirectories left empty: what --restart discards.
func removeOwned(dir string, owned []string) error {
	dirs := map[string]bool{}
	for _, name := range owned {
		if name == dirlock.LockName {
			continue
		}
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(name))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for d := filepath.Dir(filepath.FromSlash(name)); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range slices.SortedFunc(maps.Keys(dirs), func(a, b string) int { return len(b) - len(a) }) { // deepest first
		os.Remove(filepath.Join(dir, d)) // fails, harmlessly, while it holds anything
	}
	return nil
}

// checkOutputDir refuses an output directory that is a link (it would be
// followed out of DST) or not a directory, and says whether it exists.
func checkOutputDir(dir string) (bool, error) {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case fi.Mode()&fs.ModeSymlink != 0:
		return false, fmt.Errorf("%w: %s is a symbolic link; output directories are never followed: remove the link or choose another DST", errOutputExists, dir)
	case !fi.IsDir():
		return false, fmt.Errorf("%w: %s is %s, not a directory; move it away or choose another DST", errOutputExists, dir, fsx.Kind(fi.Mode()))
	}
	return true, nil
}

// checkRoot refuses a DST, for a plan whose directories lie below it, whose
// top level holds more than the lock, temporaries, and rank-NN and stage-NN
// directories that are planned or hold a run's bookkeeping or manifest.
func checkRoot(p *Plan, dst string) error {
	planned := map[string]bool{}
	for _, d := range p.Dirs {
		if d.Dir == "." {
			return nil // the plan's own directory is DST: prepareDir checks it
		}
		planned[d.Dir] = true
	}
	ents, err := os.ReadDir(dst)
	if err != nil {
		return err
	}
	o := &ownership{}
	for _, e := range ents {
		name := e.Name()
		if planned[name] || isTemp(name) || name == dirlock.LockName { // a killed run's temporaries, the lock
			continue
		}
		if e.IsDir() && (strings.HasPrefix(name, rankDirPrefix) || strings.HasPrefix(name, stageDirPrefix)) && holdsRun(filepath.Join(dst, name)) {
			continue
		}
		if len(o.foreign) == maxForeignNamed {
			o.more = true
			break
		}
		o.foreign = append(o.foreign, name)
	}
	if len(o.foreign) > 0 {
		return o.foreignError(dst, "")
	}
	return nil
}

func holdsRun(dir string) bool {
	for _, n := range []string{markerName, stampsName, manifestName} {
		if fi, err := os.Lstat(filepath.Join(dir, n)); err == nil && fi.Mode().IsRegular() {
			return true
		}
	}
	return false
}
