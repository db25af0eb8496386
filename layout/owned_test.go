package layout

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
)

// ownedFixture exports the small replica (with a side file in a
// subdirectory) into tmp/dst and reassembles it into tmp/re.
func ownedFixture(t *testing.T) (tmp string, p *Plan, dst, re string) {
	t.Helper()
	tmp = t.TempDir()
	srcDir := filepath.Join(tmp, "src")
	writeSmall(t, srcDir, nil)
	check(t, os.MkdirAll(filepath.Join(srcDir, "tok"), 0o755))
	check(t, os.WriteFile(filepath.Join(srcDir, "tok", "vocab.json"), []byte(`{"a": 1}`), 0o644))
	src := must(OpenSource(srcDir))(t)
	t.Cleanup(func() { src.Close() })
	p = smallPlan(t, src, smallLayout, ExportOptions{})
	dst = filepath.Join(tmp, "dst")
	must(p.Execute(context.Background(), dst, ExecOptions{}))(t)
	re = filepath.Join(tmp, "re")
	must(runReassemble(dst, re))(t)
	return tmp, p, dst, re
}

func reassemblePlan(t *testing.T, exportDir string) *Plan {
	t.Helper()
	s := must(OpenSource(exportDir))(t)
	t.Cleanup(func() { s.Close() })
	return must(PlanReassemble(s))(t)
}

// A file no run wrote survives every run on its directory, --restart
// included, and the run is refused naming it: a user's file, a dotfile, a
// file in a side files' subdirectory, in a rank directory, in a reassembly's
// output, or next to the rank directories (under -short: a user's file in a
// rank directory, in a side files' subdirectory and in a reassembly's output).
func TestRestartKeepsForeignFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for i, c := range []struct{ name, where string }{
		{"user file in a rank directory", "dst/rank-01/notes.txt"},
		{"user file in a side files' subdirectory", "dst/rank-00/tok/mine.json"},
		{"user file in a reassembly's output", "re/notes.txt"},
		{"dotfile in a rank directory", "dst/rank-01/.env"},
		{"user file next to the rank directories", "dst/README"},
		{"dotfile in a reassembly's output", "re/.hidden"},
	} {
		if i >= 3 && testing.Short() {
			break
		}
		t.Run(c.name, func(t *testing.T) {
			tmp, p, dst, re := ownedFixture(t)
			path := filepath.Join(tmp, filepath.FromSlash(c.where))
			check(t, os.WriteFile(path, []byte("mine"), 0o600))
			run := func(restart bool) error {
				if strings.HasPrefix(c.where, "re/") {
					_, err := reassemblePlan(t, dst).Execute(ctx, re, ExecOptions{Restart: restart})
					return err
				}
				_, err := p.Execute(ctx, dst, ExecOptions{Restart: restart})
				return err
			}
			for _, restart := range []bool{false, true} {
				err := run(restart)
				if !errors.Is(err, errOutputExists) || !strings.Contains(err.Error(), filepath.Base(path)) || !strings.Contains(err.Error(), "no k3ckpt run wrote") {
					t.Errorf("restart %v: %v, want a refusal naming %s", restart, err, filepath.Base(path))
				}
				if b, err := os.ReadFile(path); err != nil || string(b) != "mine" {
					t.Fatalf("restart %v: the user's file is gone or changed: %q %v", restart, b, err)
				}
			}
		})
	}
}

// --restart removes what the records say a run wrote, and nothing else: the
// export's files are replaced; a different plan's finished output, all of
// it the tool's, is replaced too.
func TestRestartReplacesOwnFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, p, dst, re := ownedFixture(t)
	res := must(p.Execute(ctx, dst, ExecOptions{Restart: true}))(t)
	if res.Written != p.Files {
		t.Errorf("restart wrote %d files, want %d", res.Written, p.Files)
	}
	must(reassemblePlan(t, dst).Execute(ctx, re, ExecOptions{Restart: true}))(t)
}

// A file committed by a run killed before it recorded the commit is still
// the tool's (the record names every file before the first is written): the
// rerun resumes instead of refusing it.
func TestKilledBeforeRecordResumes(t *testing.T) {
	t.Parallel()
	tmp, p, _, _ := ownedFixture(t)
	ctx := context.Background()
	dst := filepath.Join(tmp, "killed")
	d0 := &p.Dirs[0]
	dir0 := filepath.Join(dst, d0.Dir)
	must(prepareDir(p, d0, dir0, false))(t)
	of := d0.files[0]
	commit, err := writeFile(ctx, of, filepath.Join(dir0, of.name), nil, new([]byte), nil, nil)
	check(t, err)
	check(t, commit())
	res := must(p.Execute(ctx, dst, ExecOptions{}))(t)
	if res.Written != p.Files {
		t.Errorf("resume: %+v, want every file written (the unrecorded one again)", res)
	}
}

// An output directory that is a link is never followed, whatever the
// flags: the directory it points to (here an earlier export's rank, all of
// it the tool's) is left as it was.
func TestSymlinkedOutputDirRefused(t *testing.T) {
	t.Parallel()
	tmp, p, dst, _ := ownedFixture(t)
	ctx := context.Background()
	elsewhere := filepath.Join(tmp, "elsewhere")
	check(t, os.Rename(filepath.Join(dst, "rank-01"), elsewhere))
	check(t, os.Symlink(elsewhere, filepath.Join(dst, "rank-01")))
	before := must(os.ReadDir(elsewhere))(t)
	for _, restart := range []bool{false, true} {
		if _, err := p.Execute(ctx, dst, ExecOptions{Restart: restart}); !errors.Is(err, errOutputExists) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("restart %v: %v, want a refusal of the link", restart, err)
		}
	}
	if after := must(os.ReadDir(elsewhere))(t); len(after) != len(before) {
		t.Errorf("the linked directory changed: %d entries, was %d", len(after), len(before))
	}
	// A dangling link: the same clear refusal, not "file exists".
	check(t, os.RemoveAll(elsewhere))
	if _, err := p.Execute(ctx, dst, ExecOptions{}); !errors.Is(err, errOutputExists) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("dangling link: %v", err)
	}
}

// A reassembly into its own input (a stage directory, the export itself, a
// directory holding the export), however spelled, is refused before
// anything is touched, --restart or not.
func TestReassembleIntoItsInput(t *testing.T) {
	tmp, _, dst, _ := ownedFixture(t)
	ctx := context.Background()
	t.Chdir(tmp)
	for _, out := range []string{filepath.Join(dst, "rank-00"), "dst/rank-00", "dst", "./dst/../dst", tmp, "."} {
		for _, restart := range []bool{false, true} {
			_, err := reassemblePlan(t, dst).Execute(ctx, out, ExecOptions{Restart: restart})
			if !errors.Is(err, fsx.ErrOverlap) {
				t.Errorf("reassemble into %s (restart %v): %v, want ErrOverlap", out, restart, err)
			}
		}
	}
	must(OpenSource(dst))(t).Close() // the input is intact
}

// A finished directory holds only the plan's files: no bookkeeping (which
// verify would call stray, and whose stamps would differ between runs), so
// two runs of the same plan give identical trees, exports and
// reassemblies alike.
func TestFinishedTreeHoldsNoBookkeeping(t *testing.T) {
	t.Parallel()
	tmp, p, dst, re := ownedFixture(t)
	ctx := context.Background()
	dst2, re2 := filepath.Join(tmp, "dst2"), filepath.Join(tmp, "re2")
	must(p.Execute(ctx, dst2, ExecOptions{}))(t)
	must(runReassemble(dst2, re2))(t)
	for _, pair := range [][2]string{{dst, dst2}, {re, re2}} {
		a, b := testckpt.TreeHashes(t, pair[0], nil), testckpt.TreeHashes(t, pair[1], nil)
		if len(a) == 0 || !maps.Equal(a, b) {
			t.Errorf("%s and %s differ:\n%v\n%v", pair[0], pair[1], a, b)
		}
		for name := range a {
			if strings.HasPrefix(filepath.Base(name), ".") {
				t.Errorf("%s: bookkeeping %s left in a finished tree", pair[0], name)
			}
		}
	}
	// A rerun of the finished trees writes nothing and leaves them as they were.
	if res := must(p.Execute(ctx, dst, ExecOptions{}))(t); res.Written != 0 || res.Kept != p.Files {
		t.Errorf("rerun of a finished export: %+v", res)
	}
	if res := must(reassemblePlan(t, dst).Execute(ctx, re, ExecOptions{}))(t); res.Written != 0 {
		t.Errorf("rerun of a finished reassembly: %+v", res)
	}
	for _, pair := range [][2]string{{dst, dst2}, {re, re2}} {
		if a, b := testckpt.TreeHashes(t, pair[0], nil), testckpt.TreeHashes(t, pair[1], nil); !maps.Equal(a, b) {
			t.Errorf("a rerun changed %s", pair[0])
		}
	}
}

// Another plan's finished export is claimed by its manifest: refused
// without --restart, replaced with it, config.json of a staged layout
// included; a user's file beside it is still refused.
func TestRestartReplacesOtherFinishedExport(t *testing.T) {
	t.Parallel()
	tmp, _, dst, _ := ownedFixture(t)
	ctx := context.Background()
	src := must(OpenSource(filepath.Join(tmp, "src")))(t)
	defer src.Close()
	other := smallPlan(t, src, strings.Replace(smallLayout, `"parts": 4`, `"parts": 2`, 1), ExportOptions{})
	if _, err := other.Execute(ctx, dst, ExecOptions{}); !errors.Is(err, errOutputExists) || !strings.Contains(err.Error(), "--restart") {
		t.Errorf("another plan over a finished export: %v", err)
	}
	must(other.Execute(ctx, dst, ExecOptions{Restart: true}))(t)
	ref := filepath.Join(tmp, "ref")
	must(other.Execute(ctx, ref, ExecOptions{}))(t)
	treeEqual(t, ref, dst)
}
