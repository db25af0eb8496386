package layout

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// exportDirs lists the rank-NN / stage-NN subdirectories of an export that
// hold a manifest.
func exportDirs(path string) ([]string, error) {
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || !(strings.HasPrefix(e.Name(), rankDirPrefix) || strings.HasPrefix(e.Name(), stageDirPrefix)) {
			continue
		}
		if _, err := os.Stat(filepath.Join(path, e.Name(), manifestName)); err == nil {
			out = append(out, e.Name())
		}
	}
	return out, nil // os.ReadDir sorts by name
}

// openRankFile opens name (slash-separated, relative to the export root) and
// reads its header. It checks the file after opening it (checkOpened), so
// that a link swapped between a check and an open cannot smuggle another in.
func openRankFile(root *fsx.Root, dir, name string) (*safetensors.File, error) {
	path := filepath.Join(dir, filepath.FromSlash(name))
	fh, err := fsx.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errManifest, err)
	}
	if testHookRankOpened != nil {
		testHookRankOpened(path)
	}
	if err := checkOpened(root, name, path, fh); err != nil {
		fh.Close()
		return nil, err
	}
	return safetensors.FromFile(fh, path)
}

// testHookRankOpened, when set by a test, runs between the open of a rank
// file and the check of what was opened.
var testHookRankOpened func(path string)

// checkOpened verifies that the open file fh is the one name resolves to
// now, by the checkpoint rule (fsx.Root).
func checkOpened(root *fsx.Root, name, path string, fh *os.File) error {
	real, err := root.Resolve(name)
	if errors.Is(err, fsx.ErrOutside) {
		return fmt.Errorf("%w: %s: %w; copy the file in or export again", errLink, path, err)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errManifest, err)
	}
	opened, err := fh.Stat()
	if err != nil {
		return err
	}
	now, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("%w: %w", errManifest, err)
	}
	if !os.SameFile(opened, now) {
		return fmt.Errorf("%w: %s was replaced while it was opened (it now resolves to %s); rerun once the export is not changing", errLink, path, real)
	}
	return nil
}

type holder struct {
	dir string
	e   entry
	f   *safetensors.File
	t   safetensors.TensorInfo
}

// openExport reads every manifest of an export and rebuilds each source
// tensor from its pieces (see rebuild).
func openExport(root string, dirs []string) (*Source, error) {
	s := &Source{Root: root}
	fr, err := fsx.NewRoot(root)
	if err != nil {
		return nil, err
	}
	files := map[string]*safetensors.File{}
	pieces := map[string][]holder{}
	dropped := map[string]bool{}
	var first, rank0 *manifest
	fail := func(err error) (*Source, error) { s.Close(); return nil, err }
	for _, d := range dirs {
		dir := filepath.Join(root, d)
		m, err := readManifest(dir)
		if err != nil {
			return fail(err)
		}
		if first == nil {
			first = m
			if s.aux, err = readAux(dir, m.files()); err != nil {
				return fail(err)
			}
		} else if m.Layout.Name != first.Layout.Name || m.Ranks != first.Ranks || m.Source.TotalSize != first.Source.TotalSize || m.Source.Tensors != first.Source.Tensors {
			return fail(fmt.Errorf("%w: %s: layout %s of %d ranks over %d source bytes, but %s has %s of %d over %d",
				errManifest, dir, m.Layout.Name, m.Ranks, m.Source.TotalSize, dirs[0], first.Layout.Name, first.Ranks, first.Source.TotalSize))
		}
		for _, n := range m.Dropped {
			dropped[n] = true
		}
		if m.Rank == 0 {
			rank0 = m
		}
		for _, e := range m.Tensors {
			key := d + "/" + e.File
			f, ok := files[key]
			if !ok {
				if f, err = openRankFile(fr, root, d+"/"+e.File); err != nil {
					return fail(err)
				}
				s.closers = append(s.closers, f)
				s.stamps = append(s.stamps, stampOf(key, f.ReaderAt()))
				files[key] = f
			}
			t, ok := f.Lookup(e.Name)
			if !ok {
				return fail(fmt.Errorf("%w: %s: tensor %s is in the manifest but not in %s", errManifest, dir, e.Name, e.File))
			}
			pieces[e.Name] = append(pieces[e.Name], holder{dir: d, e: e, f: f, t: t})
		}
	}
	// Only rank 0's manifest records the source files' metadata.
	if rank0 == nil {
		return fail(fmt.Errorf("%w: %s: rank 0's %s, which records the source files' metadata, is missing", errManifest, root, manifestName))
	}
	s.info = rank0.Source
	// A stage's config.json records its layer range; the manifest keeps the original.
	delete(s.aux, model.ConfigName)
	if first.SourceConfig != "" {
		s.aux[model.ConfigName] = []byte(first.SourceConfig)
	}
	// Source order: by source file, then name.
	names := slices.Collect(maps.Keys(pieces))
	fileRank := map[string]int{}
	for i, f := range s.info.Files {
		fileRank[f.Name] = i
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(fileRank[pieces[a][0].e.SourceFile], fileRank[pieces[b][0].e.SourceFile]), strings.Compare(a, b))
	})
	for _, n := range names {
		hs := pieces[n]
		e := hs[0].e
		d, err := rebuild(n, hs)
		if err != nil {
			return fail(err)
		}
		s.Specs = append(s.Specs, safetensors.TensorSpec{Name: n, DType: e.DType, Shape: e.Shape})
		s.fileOf = append(s.fileOf, e.SourceFile)
		s.data = append(s.data, d)
	}
	for n := range dropped {
		if _, ok := pieces[n]; !ok {
			s.missing = append(s.missing, n)
		}
	}
	slices.Sort(s.missing)
	if len(s.Specs)+len(s.missing) != s.info.Tensors {
		return fail(fmt.Errorf("%w: %s: %d tensors held and %d dropped, but the source had %d; are rank directories missing?",
			errManifest, root, len(s.Specs), len(s.missing), s.info.Tensors))
	}
	return s, nil
}

// rebuild returns the full source tensor from its pieces: a whole copy is
// read in place, slices through a reader that interleaves them, packed
// scales by unpacking and gathering.
func rebuild(name string, hs []holder) (tensorData, error) {
	e := hs[0].e
	for _, h := range hs {
		if h.e.DType != e.DType || !slices.Equal(h.e.Shape, e.Shape) || h.e.SourceFile != e.SourceFile {
			return nil, fmt.Errorf("%w: tensor %s: %s says %s %v in %s, %s says %s %v in %s", errManifest, name,
				hs[0].dir, e.DType, e.Shape, e.SourceFile, h.dir, h.e.DType, h.e.Shape, h.e.SourceFile)
		}
	}
	if e.Packed != nil {
		return unpackScale(name, hs)
	}
	for _, h := range hs {
		if h.e.Held != HeldSlice {
			if h.t.DType != e.DType || !slices.Equal(h.t.Shape, e.Shape) {
				return nil, fmt.Errorf("%w: %s/%s: tensor %s is %s %v, manifest says %s %v", errManifest, h.dir, h.e.File, name, h.t.DType, h.t.Shape, e.DType, e.Shape)
			}
			return newFileTensor(h.f, h.t), nil
		}
	}
	return newSliced(name, hs)
}

// slicedTensor reads a tensor split along an axis from its slices, filling the
// padding a Valid split dropped with zeros.
type slicedTensor struct {
	parts  []holder // sorted by start, tiling [0, valid)
	size   int64
	innerB int64 // bytes of one step along the axis
	rowB   int64 // bytes of one outer row
	valid  int64
}

func newSliced(name string, hs []holder) (*slicedTensor, error) {
	e := hs[0].e
	// Distinct slices: a replica group holds each on several ranks.
	seen := map[[2]int64]bool{}
	var parts []holder
	for _, h := range hs {
		k := [2]int64{h.e.Start, h.e.Stop}
		if h.e.Axis != e.Axis || h.e.Valid != e.Valid {
			return nil, fmt.Errorf("%w: tensor %s: slices disagree on axis or valid length", errManifest, name)
		}
		want := append([]int64(nil), e.Shape...)
		if e.Axis >= len(want) {
			return nil, fmt.Errorf("%w: tensor %s: axis %d of %v", errManifest, name, e.Axis, e.Shape)
		}
		want[e.Axis] = h.e.Stop - h.e.Start
		if h.t.DType != e.DType || !slices.Equal(h.t.Shape, want) {
			return nil, fmt.Errorf("%w: %s/%s: tensor %s is %s %v, manifest slice [%d,%d) needs %v", errManifest, h.dir, h.e.File, name, h.t.DType, h.t.Shape, h.e.Start, h.e.Stop, want)
		}
		if !seen[k] {
			seen[k] = true
			parts = append(parts, h)
		}
	}
	slices.SortFunc(parts, func(a, b holder) int { return cmp.Compare(a.e.Start, b.e.Start) })
	dim := e.Shape[e.Axis]
	valid := dim
	if e.Valid > 0 {
		valid = e.Valid
	}
	var at int64
	for _, p := range parts {
		if p.e.Start != at || p.e.Stop <= p.e.Start {
			return nil, fmt.Errorf("%w: tensor %s: slices along axis %d do not tile [0,%d): gap or overlap at %d; is a rank directory missing?", errManifest, name, e.Axis, valid, at)
		}
		at = p.e.Stop
	}
	if at != valid {
		return nil, fmt.Errorf("%w: tensor %s: slices along axis %d cover [0,%d) of [0,%d); is a rank directory missing?", errManifest, name, e.Axis, at, valid)
	}
	inner, _ := safetensors.NumElements(e.Shape[e.Axis+1:])
	if inner*e.DType.Bits()%8 != 0 {
		return nil, fmt.Errorf("%w: tensor %s: a step along axis %d is not a whole number of bytes", errManifest, name, e.Axis)
	}
	size, err := safetensors.ByteSize(e.DType, e.Shape)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	innerB := inner * e.DType.Bits() / 8
	return &slicedTensor{parts: parts, size: size, innerB: innerB, rowB: dim * innerB, valid: valid}, nil
}

// ReadAt gathers [off, off+len(p)) from the slices with one read per slice:
// inside the request only the first and last outer rows are partial, so each
// slice's share is one contiguous range of its file.
func (st *slicedTensor) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= st.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), st.size)
	o0, o1 := off/st.rowB, ceilDiv(end, st.rowB)
	var scratch []byte
	for _, h := range st.parts {
		partRowB := (h.e.Stop - h.e.Start) * st.innerB
		a, b := int64(-1), int64(0)
		for o := o0; o < o1; o++ {
			gs := o*st.rowB + h.e.Start*st.innerB
			lo, hi := max(gs, off), min(gs+partRowB, end)
			if lo < hi {
				if a < 0 {
					a = o*partRowB + lo - gs
				}
				b = o*partRowB + hi - gs
			}
		}
		if a < 0 {
			continue
		}
		if int64(cap(scratch)) < b-a {
			scratch = make([]byte, b-a)
		}
		buf := scratch[:b-a]
		if err := readFull(newFileTensor(h.f, h.t), buf, a); err != nil {
			return 0, fmt.Errorf("%s/%s: %w", h.dir, h.e.File, err)
		}
		for o := o0; o < o1; o++ {
			gs := o*st.rowB + h.e.Start*st.innerB
			lo, hi := max(gs, off), min(gs+partRowB, end)
			if lo < hi {
				src := o*partRowB + lo - gs - a
				copy(p[lo-off:hi-off], buf[src:src+hi-lo])
			}
		}
	}
	if st.valid*st.innerB < st.rowB { // zero the padding a Valid split dropped
		for o := o0; o < o1; o++ {
			lo, hi := max(o*st.rowB+st.valid*st.innerB, off), min((o+1)*st.rowB, end)
			if lo < hi {
				clear(p[lo-off : hi-off])
			}
		}
	}
	n := int(end - off)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
