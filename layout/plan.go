package layout

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Plan is everything an export (the shard and export commands) or a
// reassembly writes, decided before the first byte: for each output
// directory its files (header and copy steps), index, side files and
// manifest, and the data checks that must pass before anything is written.
// PlanExport and PlanReassemble build it from headers only; it prints as
// text (WriteText) or JSON; Execute carries it out without deciding anything.
type Plan struct {
	Op     string `json:"op"`     // "export" or "reassemble"
	Source string `json:"source"` // the path the source was opened from
	// Layout, Stages, Partition and Ranks describe the layout (export only).
	Layout     string `json:"layout,omitempty"`
	Stages     int    `json:"stages,omitempty"`
	Partition  []int  `json:"partition,omitempty"`
	Ranks      int    `json:"ranks,omitempty"`
	PackScales string `json:"pack_scales,omitempty"`
	// Dirs are the output directories, relative to DST ("." for a reassembly).
	Dirs []dirPlan `json:"dirs"`
	// Checks are the data checks Validate runs, and Execute before any write.
	Checks []dataCheck `json:"checks"`
	// Dropped names the source tensors no output holds; DroppedBytes is their size.
	Dropped      []string `json:"dropped,omitempty"`
	DroppedBytes int64    `json:"dropped_bytes"`
	// Unaligned names the block-FP8 weights whose scales stay replicated.
	Unaligned []string `json:"unaligned,omitempty"`
	// Files and Bytes count the safetensors files and tensor bytes to write.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`

	src *Source
}

// dirPlan is one output directory: a rank's (or stage's) files, or the
// reassembled checkpoint.
type dirPlan struct {
	Dir string `json:"dir"` // relative to DST
	// Rank and Stage place it (-1 for a reassembly); Layers is the stage's
	// [first, end).
	Rank   int    `json:"rank"`
	Stage  int    `json:"stage"`
	Layers [2]int `json:"layers"`
	// Tensors and Bytes count the tensors (pieces) and tensor bytes it holds.
	Tensors int   `json:"tensors"`
	Bytes   int64 `json:"bytes"`
	// Files are its safetensors files; SideFiles the other files written.
	Files     []filePlan `json:"files"`
	SideFiles []string   `json:"side_files"`

	files []*outFile
	man   *manifest // export only
	index *safetensors.Index
	// indexNewline ends the written index with a newline, as the source's
	// did; without it the index has the codec's form.
	indexNewline bool
	side         map[string][]byte // side files by name
}

type filePlan struct {
	Name    string `json:"name"`
	Tensors int    `json:"tensors"`
	Size    int64  `json:"size"`
	// CopyOf names the source file it copies byte for byte.
	CopyOf string `json:"copy_of,omitempty"`
	// Steps is the number of writes (copy runs and single tensors).
	Steps int `json:"steps"`
}

// dataCheck is one data-dependent check of the validation pass: Kind
// checkZeroPadding or checkUE8M0Scale, of one tensor.
type dataCheck struct {
	Kind   string `json:"kind"`
	Tensor string `json:"tensor"`

	run func(ctx context.Context) error
}

// Validate runs the validation pass, reading every checked tensor, and
// fails with the first problem found. Nothing is written.
func (p *Plan) Validate(ctx context.Context) error {
	for _, c := range p.Checks {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.run(ctx); err != nil {
			return fmt.Errorf("%s: check %s: %w", p.Source, c.Kind, err)
		}
	}
	return nil
}

func (d *dirPlan) indexBytes() ([]byte, error) {
	b, err := d.index.Marshal()
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	if d.indexNewline {
		b = append(b, '\n')
	}
	return b, nil
}

// completionBytes is the directory's completion record (see completionName).
func (d *dirPlan) completionBytes() ([]byte, error) {
	if d.man != nil {
		return d.man.marshal()
	}
	return d.indexBytes()
}

// memoryFiles maps the names d's run writes whole from memory (side files,
// the index, the completion record) to their bytes.
func (d *dirPlan) memoryFiles(completion []byte) (map[string][]byte, error) {
	want := map[string][]byte{d.completionName(): completion}
	if d.man != nil {
		b, err := d.indexBytes()
		if err != nil {
			return nil, err
		}
		want[safetensors.IndexName] = b
	}
	maps.Copy(want, d.side)
	return want, nil
}

type namedBytes struct {
	name string
	b    []byte
}

// finishFiles is what a run writes into d's directory once its last
// safetensors file is committed, in order: the side files and index, the
// SHA256SUMS (files maps each safetensors file to its sha256), then the
// completion record, whose presence marks the directory finished.
func (d *dirPlan) finishFiles(completion []byte, files map[string]string) ([]namedBytes, error) {
	mem, err := d.memoryFiles(completion)
	if err != nil {
		return nil, err
	}
	var out []namedBytes
	for _, n := range slices.Sorted(maps.Keys(mem)) {
		if n != d.completionName() {
			out = append(out, namedBytes{n, mem[n]})
		}
	}
	if d.hasSums() {
		sums, err := d.sumsFile(completion, files)
		if err != nil {
			return nil, err
		}
		out = append(out, namedBytes{sumsName, sums})
	}
	return append(out, namedBytes{d.completionName(), completion}), nil
}

func (p *Plan) describe() {
	for i := range p.Dirs {
		d := &p.Dirs[i]
		for _, of := range d.files {
			fp := filePlan{Name: of.name, Tensors: len(of.tensors), Size: of.lay.Size, Steps: len(of.steps)}
			if of.verbatim != nil {
				fp.CopyOf, fp.Steps = of.verbatim.Path, 1
			}
			d.Files = append(d.Files, fp)
			d.Tensors += len(of.tensors)
			d.Bytes += of.tensorBytes()
		}
		d.SideFiles = append([]string{safetensors.IndexName}, slices.Sorted(maps.Keys(d.side))...)
		if d.man != nil {
			d.SideFiles = append(d.SideFiles, manifestName)
		}
		p.Files += len(d.files)
		p.Bytes += d.Bytes
	}
}

const gibibyte = 1 << 30

// WriteText prints the plan: one line per output directory, then what is
// dropped, replicated and checked.
func (p *Plan) WriteText(w io.Writer) error {
	var b bytes.Buffer
	printf := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	switch p.Op {
	case opExport:
		printf("export %s: layout %s, %d ranks", p.Source, p.Layout, p.Ranks)
		if p.Stages > 1 {
			printf(" in %d stages %v", p.Stages, p.Partition)
		}
		if p.PackScales != "" {
			printf(", scales packed %s", p.PackScales)
		}
		printf("\n")
	default:
		printf("reassemble %s\n", p.Source)
	}
	printf("%-10s %7s %8s %6s %7s %11s\n", "dir", "layers", "tensors", "files", "copies", "GiB")
	for _, d := range p.Dirs {
		layers := "-"
		if d.Rank >= 0 {
			layers = fmt.Sprintf("%d-%d", d.Layers[0], d.Layers[1]-1)
		}
		copies := 0
		for _, f := range d.Files {
			if f.CopyOf != "" {
				copies++
			}
		}
		printf("%-10s %7s %8d %6d %7d %11.3f\n", filepath.ToSlash(d.Dir), layers, d.Tensors, len(d.Files), copies, float64(d.Bytes)/gibibyte)
	}
	printf("total: %d files, %.3f GiB of tensors\n", p.Files, float64(p.Bytes)/gibibyte)
	if len(p.Dropped) > 0 {
		printf("dropped %d tensors (%.3f GiB), e.g. %s\n", len(p.Dropped), float64(p.DroppedBytes)/gibibyte, p.Dropped[0])
	}
	if len(p.Unaligned) > 0 {
		printf("%d block-FP8 weights split across a 128 block keep their scale replicated, e.g. %s\n", len(p.Unaligned), p.Unaligned[0])
	}
	kinds := map[string]int{}
	for _, c := range p.Checks {
		kinds[c.Kind]++
	}
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		printf("check %s: %d tensors\n", k, kinds[k])
	}
	_, err := w.Write(b.Bytes())
	return err
}
