package convert

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/dirlock"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/objdest"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// errNoSpace: DST's filesystem has less free space than the output needs.
var errNoSpace = errors.New("not enough free space")

// checkDestPath refuses a DST that is SRC, lies inside it or holds it, however
// spelled (fsx.Disjoint resolves links): a second run would count the first
// one's output as side files of the source.
func checkDestPath(p *Plan, d *destination) error {
	if d.remote() {
		// A bucket DST can only overlap a source in the same bucket.
		src, out := p.SrcRoot, d.bucket.URL.Dir()
		if p.remote != nil && (strings.HasPrefix(src, out) || strings.HasPrefix(out, src)) {
			return fmt.Errorf("%w: %s and the source %s overlap", ErrDestination, d.name, src)
		}
		return nil
	}
	if p.remote != nil {
		return nil // a remote source cannot contain a local DST
	}
	src, err := os.Stat(p.SrcRoot)
	if err != nil {
		return err
	}
	if out, err := os.Stat(d.dir); err == nil && os.SameFile(src, out) {
		return fmt.Errorf("%w: %s", errSameDir, d.dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := fsx.Disjoint(d.dir, p.SrcRoot); err != nil {
		return fmt.Errorf("%w: %w", ErrDestination, err)
	}
	return nil
}

// checkDest checks that DST can receive this plan before any byte is
// written: empty or holding this same conversion (in progress or finished).
// It returns how to record the plan (nil when DST holds this plan's record
// already; see createState).
func checkDest(p *Plan, d *destination, restart bool) (record func() error, err error) {
	dst := d.dir
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dst, err)
	}
	statePath := filepath.Join(dst, stateDir, stateName)
	record = func() error { return createState(statePath, p) }
	var st planState
	switch err := readJSON(statePath, &st); {
	case err == nil:
		if st.Plan != p.ID {
			return nil, fmt.Errorf("%w: %s is converting plan %.12s (recipe %s, format %s, scale %s), this is plan %.12s; use another destination",
				ErrDestination, d.name, st.Plan, st.Recipe, st.Format, st.ScaleFmt, p.ID)
		}
		if !restart {
			return nil, checkVersions(dst, &st, p)
		}
		record = func() error { return writeState(statePath, p.state()) }
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %v", ErrDestination, err)
	default:
		m, err := d.readManifest()
		switch {
		case err == nil:
			if m.Plan != p.ID {
				return nil, fmt.Errorf("%w: %s holds a finished conversion of plan %.12s (recipe %s, format %s, scale %s), this is plan %.12s; use another destination",
					ErrDestination, d.name, m.Plan, m.Recipe, m.Format, m.ScaleFmt, p.ID)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("%w: %v", ErrDestination, err)
		case d.remote():
			files, err := d.bucket.List(d.ctx)
			if err != nil {
				return nil, err
			}
			for _, f := range files {
				if f.Name != objdest.ClaimName { // this tool's own
					return nil, fmt.Errorf("%w: %s is not empty (%s) and holds no k3ckpt conversion", ErrDestination, d.name, f.Name)
				}
			}
		default:
			ents, err := os.ReadDir(dst)
			if err != nil {
				return nil, err
			}
			for _, e := range ents {
				if !strings.HasPrefix(e.Name(), filewrite.TempPrefix) && e.Name() != stateDir && e.Name() != dirlock.LockName {
					return nil, fmt.Errorf("%w: %s is not empty (%s) and holds no k3ckpt conversion", ErrDestination, dst, e.Name())
				}
			}
		}
	}
	if restart {
		if err := discardRun(d); err != nil {
			return nil, err
		}
	}
	return withIndex(p, d, record), nil
}

// withIndex is record preceded, for a bucket DST, by staging the planned
// index in its state directory for a merge (which never sees the plan): a
// recorded plan always has its index.
func withIndex(p *Plan, d *destination, record func() error) func() error {
	if !d.remote() {
		return record
	}
	return func() error {
		dir := filepath.Join(d.dir, stateDir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		f, _, err := stage(filepath.Join(dir, safetensors.IndexName), "index", plannedIndex(p))
		if err == nil {
			err = f.Commit()
		}
		if err != nil {
			return err
		}
		return record()
	}
}

// pendingState is the plan record a whole run writes while its first files
// are produced: no file is committed or recorded before it is durable, so
// a kill before then leaves only temporaries, which the next run removes.
type pendingState struct {
	done chan struct{}
	err  error
}

// recordState starts record (nil: nothing to record).
func recordState(record func() error) *pendingState {
	s := &pendingState{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if record != nil {
			s.err = record()
		}
	}()
	return s
}

// wait returns once the record is durable, with its error (nil: none pending).
func (s *pendingState) wait() error {
	if s == nil {
		return nil
	}
	<-s.done
	return s.err
}

// createState writes the plan record unless one exists; an existing one
// must be this plan's. The link fails when the name exists, so that of two
// runs with different plans starting together on one DST exactly one wins.
func createState(path string, p *Plan) error {
	tmp := path + ".new-" + fmt.Sprint(os.Getpid())
	if err := writeState(tmp, p.state()); err != nil {
		return err
	}
	defer os.Remove(tmp)
	err := os.Link(tmp, path)
	if errors.Is(err, fs.ErrExist) {
		var st planState
		if err := readJSON(path, &st); err != nil {
			return fmt.Errorf("%w: %v", ErrDestination, err)
		}
		if st.Plan != p.ID {
			return fmt.Errorf("%w: %s was just claimed by a conversion of plan %.12s (recipe %s), this is plan %.12s",
				ErrDestination, filepath.Dir(filepath.Dir(path)), st.Plan, st.Recipe, p.ID)
		}
		return nil
	}
	return err
}

// discardRun forgets an earlier run of this plan: its done records and its
// manifest, so that every file is written again.
func discardRun(d *destination) error {
	if err := os.RemoveAll(filepath.Join(d.dir, stateDir, doneDir)); err != nil {
		return err
	}
	return d.removeManifest()
}

// removeOwnTemps deletes leftovers of a killed run for these units only:
// other workers may be writing their own temporaries in the same directory.
func removeOwnTemps(dst string, units []unit) error {
	bases := map[string]map[string]bool{} // directory → unit base names
	for _, u := range units {
		dir, base := filepath.Split(filepath.Join(dst, filepath.FromSlash(u.Name)))
		if bases[dir] == nil {
			bases[dir] = map[string]bool{}
		}
		bases[dir][base] = true
	}
	for dir, names := range bases {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !ownTemp(e.Name(), names) {
				continue
			}
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// ownTemp reports whether name is a temporary of one of bases: the temporary
// prefix, the base, a dash and anything (bases may hold dashes themselves).
func ownTemp(name string, bases map[string]bool) bool {
	rest, ok := strings.CutPrefix(name, filewrite.TempPrefix)
	if !ok {
		return false
	}
	for i := range len(rest) {
		if rest[i] == '-' && bases[rest[:i]] {
			return true
		}
	}
	return false
}

// checkSpace compares what this run will write (its units, less those
// finished that resume can keep, plus the configs and the spills of jobs
// files at once) with the free space of DST's filesystem.
func checkSpace(d *destination, p *Plan, units []unit, recs records, m *dstManifest, jobs int) error {
	if d.remote() {
		return nil // a bucket has no free space to compare with
	}
	var need, spill int64
	for _, u := range units {
		if u.File != nil {
			spill = max(spill, u.File.spillBytes())
		}
		if rec, ok := recs.finished(p.ID, u.Name, m); ok && recs != nil {
			if fi, err := os.Stat(d.path(u.Name)); err == nil && fi.Size() == rec.Size {
				continue
			}
		}
		need += u.Size
	}
	need += int64(len(p.Config)+len(p.HFQuantConfig)) + int64(max(jobs, 1))*spill
	free, ok, err := fsx.FreeSpace(d.dir)
	if err != nil {
		return fmt.Errorf("free space of %s: %w", d.dir, err)
	}
	if ok && free < need {
		return fmt.Errorf("%w: %s has %s free, the conversion writes %s more; free space or pass --no-space-check",
			errNoSpace, d.dir, sizeString(free), sizeString(need))
	}
	return nil
}

// sizeString renders a byte count in GiB (with the exact count).
func sizeString(n int64) string {
	return fmt.Sprintf("%.2f GiB (%d bytes)", float64(n)/(1<<30), n)
}
