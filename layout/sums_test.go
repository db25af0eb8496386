package layout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// listedFiles reads dir's SHA256SUMS as sha256sum writes it, independently
// of parseSums.
func listedFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	b := must(os.ReadFile(filepath.Join(dir, sumsName)))(t)
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("%s: line %q", dir, line)
		}
		out[name] = sum
	}
	return out
}

// Every output directory of an export holds a SHA256SUMS that lists every
// other file of the directory with the sha256 of its bytes, read back here
// (and by coreutils' sha256sum -c where it is installed); CheckSums agrees,
// and fails naming the file once one byte past a header changes, or once a
// stray file appears.
func TestSHA256SUMSListsEveryFile(t *testing.T) {
	tmp := t.TempDir()
	srcDir := filepath.Join(tmp, "src")
	writeSmall(t, srcDir, map[string]string{"format": "pt"})
	src := must(OpenSource(srcDir))(t)
	ctx := context.Background()
	dst := filepath.Join(tmp, "dst")
	p := smallPlan(t, src, smallLayout, ExportOptions{})
	must(p.Execute(ctx, dst, ExecOptions{}))(t)
	total := 0
	for _, d := range p.Dirs {
		dir := filepath.Join(dst, d.Dir)
		listed := listedFiles(t, dir)
		var names []string
		for _, e := range must(os.ReadDir(dir))(t) {
			if e.Name() == sumsName || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			names = append(names, e.Name())
			b := must(os.ReadFile(filepath.Join(dir, e.Name())))(t)
			sum := sha256.Sum256(b)
			if listed[e.Name()] != hex.EncodeToString(sum[:]) {
				t.Errorf("%s/%s: listed %q, sha256 %x", d.Dir, e.Name(), listed[e.Name()], sum)
			}
		}
		if len(names) != len(listed) || !slices.Contains(names, manifestName) || len(names) < 3 {
			t.Errorf("%s lists %d files, the directory holds %v", d.Dir, len(listed), names)
		}
		total += len(names)
		if bin, err := exec.LookPath("sha256sum"); err == nil {
			c := exec.Command(bin, "-c", "--strict", "--quiet", sumsName)
			c.Dir = dir
			if out, err := c.CombinedOutput(); err != nil {
				t.Errorf("sha256sum -c in %s: %v: %s", d.Dir, err, out)
			}
		}
	}
	files, _, err := CheckSums(ctx, dst)
	if err != nil || files != total {
		t.Fatalf("CheckSums: %d files, %v; want %d", files, err, total)
	}

	// One byte of a tensor changed in place: a rerun keeps the file (size
	// and header are the plan's) and its listed sum, which CheckSums
	// finds wrong.
	d0 := p.Dirs[0]
	victim := filepath.Join(dst, d0.Dir, d0.files[0].name)
	b := must(os.ReadFile(victim))(t)
	b[len(b)-1] ^= 0x40
	check(t, os.WriteFile(victim, b, 0o644))
	res := must(p.Execute(ctx, dst, ExecOptions{}))(t)
	if res.Written != 0 {
		t.Errorf("rerun over the finished export wrote %d files", res.Written)
	}
	if _, _, err := CheckSums(ctx, dst); !errors.Is(err, errSums) || !strings.Contains(err.Error(), victim) {
		t.Errorf("CheckSums of a changed file: %v, want it named", err)
	}
	b[len(b)-1] ^= 0x40
	check(t, os.WriteFile(victim, b, 0o644))
	must2(CheckSums(ctx, dst))(t)

	stray := filepath.Join(dst, d0.Dir, "notes.txt")
	check(t, os.WriteFile(stray, []byte("x"), 0o644))
	if _, _, err := CheckSums(ctx, dst); !errors.Is(err, errSums) || !strings.Contains(err.Error(), stray) {
		t.Errorf("CheckSums with a stray file: %v, want it named", err)
	}
	check(t, os.Remove(stray))
}

// An output written before SHA256SUMS existed (a finished directory with
// none): CheckSums says so, and a rerun writes its files again, since no
// sum of them was ever taken, ending as a fresh run does.
func TestOutputWithoutSHA256SUMS(t *testing.T) {
	tmp := t.TempDir()
	srcDir := filepath.Join(tmp, "src")
	writeSmall(t, srcDir, map[string]string{"format": "pt"})
	src := must(OpenSource(srcDir))(t)
	ctx := context.Background()
	ref, dst := filepath.Join(tmp, "ref"), filepath.Join(tmp, "dst")
	p := smallPlan(t, src, smallLayout, ExportOptions{})
	must(p.Execute(ctx, ref, ExecOptions{}))(t)
	must(p.Execute(ctx, dst, ExecOptions{}))(t)
	d0 := p.Dirs[0]
	check(t, os.Remove(filepath.Join(dst, d0.Dir, sumsName)))
	if _, _, err := CheckSums(ctx, dst); !errors.Is(err, errSums) || !strings.Contains(err.Error(), filepath.Join(dst, d0.Dir, manifestName)) {
		t.Errorf("CheckSums without a SHA256SUMS: %v", err)
	}
	res := must(p.Execute(ctx, dst, ExecOptions{}))(t)
	if res.Written != len(d0.files) || res.Kept != p.Files-len(d0.files) {
		t.Errorf("rerun: %+v, want the %d files of %s written, the others kept", res, len(d0.files), d0.Dir)
	}
	treeEqual(t, ref, dst)
	must2(CheckSums(ctx, dst))(t)
}

func must2[A, B any](a A, b B, err error) func(testing.TB) {
	return func(t testing.TB) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A stray file beside a root SHA256SUMS is named, as one in a rank
// directory is; files of a directory with its own SHA256SUMS are not the
// root's.
func TestCheckSumsRootStray(t *testing.T) {
	dst := t.TempDir()
	put := func(name, body string) {
		p := filepath.Join(dst, filepath.FromSlash(name))
		check(t, os.MkdirAll(filepath.Dir(p), 0o755))
		check(t, os.WriteFile(p, []byte(body), 0o644))
	}
	line := func(name, body string) string {
		sum := sha256.Sum256([]byte(body))
		return hex.EncodeToString(sum[:]) + "  " + name + "\n"
	}
	put("a.bin", "a")
	put(sumsName, line("a.bin", "a"))
	put("rank-00/b.bin", "b")
	put("rank-00/"+sumsName, line("b.bin", "b"))
	if files, _, err := CheckSums(context.Background(), dst); err != nil || files != 2 {
		t.Fatalf("CheckSums: %d files, %v; want 2", files, err)
	}
	put("stray.bin", "x")
	if _, _, err := CheckSums(context.Background(), dst); !errors.Is(err, errSums) || !strings.Contains(err.Error(), "stray.bin") {
		t.Errorf("CheckSums with a stray file at the root: %v, want it named", err)
	}
}
