package layout

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// maxMetadataBytes bounds a source file's __metadata__ (keys and values), so
// that what a file claims cannot grow every output.
const maxMetadataBytes = 64 << 10

// metadataFormatKey is the one metadata key written rank files keep
// (loaders check it).
const metadataFormatKey = "format"

// maxPlanPieces bounds the tensor pieces one export plans over its ranks
// together: the plan holds every piece until the run ends.
const maxPlanPieces = 1 << 24

const (
	opExport     = "export"
	opReassemble = "reassemble"
)

// ExportOptions selects what PlanExport plans.
type ExportOptions struct {
	Ranks []int      // the ranks to write (nil: all)
	Pack  packFormat // how block scales are stored
}

// dirName is the output directory of a rank: stage-NN for a pipeline layout
// with one rank per stage, rank-NN otherwise.
func dirName(l *Layout, rank int) string {
	if l.RanksPerStage == 1 && l.Stages() > 1 {
		return fmt.Sprintf("%s%02d", stageDirPrefix, rank)
	}
	return fmt.Sprintf("%s%02d", rankDirPrefix, rank)
}

// PlanExport plans, for each selected rank, the directory rank-NN (or
// stage-NN): the rank's tensors in safetensors files (a source shard the
// rank holds whole and unchanged is copied under its own name), an index,
// the side files (a stage's config.json records its layer range) and
// layout.json. Planning reads headers only; the plan's checks read data.
func PlanExport(src *Source, l *Layout, o ExportOptions) (*Plan, error) {
	if err := checkMetadata(src); err != nil {
		return nil, err
	}
	// Names are read by the source's own layer schedule (without a
	// config.json: K3's), which rules by group need.
	var cls *model.Classifier
	if src.config() != nil {
		m, err := src.Model()
		if err == nil {
			if err := l.checkLayers(m); err != nil {
				return nil, fmt.Errorf("%s: %w", src.Root, err)
			}
		} else if slices.ContainsFunc(l.Rules, func(r rule) bool { return len(r.Groups) > 0 }) {
			return nil, err
		}
		cls = m.cls
	}
	pl, err := l.place(src.Specs, cls)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Root, err)
	}
	ranks, err := selectRanks(o.Ranks, pl.ranks())
	if err != nil {
		return nil, err
	}
	total := 0
	for _, r := range ranks {
		total += pl.RankPieces[r]
	}
	if total > maxPlanPieces {
		return nil, fmt.Errorf("%w: %s: %d ranks (ranks_per_stage %d) hold %d tensor pieces together, more than one plan holds (%d); export fewer ranks per run with --ranks",
			errLayout, l.Name, len(ranks), l.RanksPerStage, total, maxPlanPieces)
	}
	p := &Plan{Op: opExport, Source: src.Root, Layout: l.Name, Stages: l.Stages(), Partition: l.Partition,
		Ranks: pl.ranks(), PackScales: string(o.Pack), DroppedBytes: pl.DroppedBytes, Unaligned: pl.Unaligned, src: src}
	for _, i := range pl.Dropped {
		p.Dropped = append(p.Dropped, pl.Tensors[i].Name)
	}
	p.Dropped = append(p.Dropped, src.missing...)
	sort.Strings(p.Dropped)
	p.Dirs = make([]dirPlan, len(ranks))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, r := range ranks {
		g.Go(func() error { return planRank(src, pl, r, o.Pack, p.Dropped, &p.Dirs[i]) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	p.Checks = append(paddingChecks(src, pl), packingChecks(p)...)
	p.describe()
	return p, nil
}

func checkMetadata(src *Source) error {
	for _, f := range src.info.Files {
		n := 0
		for k, v := range f.Metadata {
			n += len(k) + len(v)
		}
		if n > maxMetadataBytes {
			return fmt.Errorf("%w: %s: %s has %d bytes of __metadata__ (limit %d)", errMetadata, src.Root, f.Name, n, maxMetadataBytes)
		}
	}
	return nil
}

// planRank lays out one rank's files, index, side files and manifest.
// Pieces in source order fill output files of up to maxShardBytes; a
// verbatim source shard becomes one file of its own.
func planRank(src *Source, pl *Placement, rank int, pack packFormat, dropped []string, d *dirPlan) error {
	l := pl.Layout
	pcs, err := pl.Pieces(rank)
	if err != nil {
		return err
	}
	stage := pl.stageOf(rank)
	first, end := l.StageLayers(stage)
	*d = dirPlan{Dir: dirName(l, rank), Rank: rank, Stage: stage, Layers: [2]int{first, end}}
	man := &manifest{Format: manifestFormat, Layout: l, Rank: rank, Ranks: pl.ranks(), Stage: stage,
		Stages: l.Stages(), Layers: [2]int{first, end}, PackScales: string(pack), Loader: loaderNote(pack != packNone), Source: src.info,
		SourceConfig: string(src.config()), Dropped: dropped, Tensors: make([]entry, 0, len(pcs))}
	// The source files' metadata is recorded once, in rank 0's manifest.
	if rank != 0 {
		man.Source.IndexMetadata = nil
		man.Source.Files = make([]sourceFile, len(src.info.Files))
		for i, f := range src.info.Files {
			man.Source.Files[i] = sourceFile{Name: f.Name}
		}
	}

	weights := map[string]piece{}
	for _, pc := range pcs {
		if pc.DType == safetensors.F8_E4M3 {
			weights[pc.Name] = pc
		}
	}
	verbatim, err := verbatimFiles(src, pcs, pack)
	if err != nil {
		return err
	}
	var cur *outFile
	var curBytes int64
	whole := map[string]*outFile{}
	opened := map[string]bool{}
	fileOf := make([]*outFile, 0, len(pcs)) // output file of each manifest entry
	for _, pc := range pcs {
		sf := src.fileOf[pc.Index]
		if !opened[sf] {
			opened[sf] = true
			man.SourceFiles = append(man.SourceFiles, sf)
		}
		ot := outTensor{spec: safetensors.TensorSpec{Name: pc.Name, DType: pc.DType, Shape: pc.sliceShape()},
			src: src.data[pc.Index], shape: pc.Shape, held: pc.Held, axis: pc.Axis, start: pc.Start, stop: pc.Stop}
		e := entry{Name: pc.Name, SourceFile: sf, DType: pc.DType, Shape: pc.Shape, Held: pc.Held, Axis: pc.Axis,
			Start: pc.Start, Stop: pc.Stop, Valid: pc.Valid, Rule: pc.Rule, ScaleOf: pc.ScaleOf, Scale: pc.Scale}
		if pack == packUE8M0 && pc.ScaleOf != "" {
			pj, err := newPackJob(pc, weights[pc.ScaleOf], src.data[pc.Index])
			if err != nil {
				return err
			}
			ot.pack = pj
			ot.spec = safetensors.TensorSpec{Name: pc.Name, DType: safetensors.I32, Shape: pj.shape()}
			e.Packed = &packedScale{Format: string(packUE8M0), Rows: pj.rows, Cols: pj.cols, Shape: ot.spec.Shape}
		}
		man.Tensors = append(man.Tensors, e)
		if vf := verbatim[sf]; vf != nil {
			of := whole[sf]
			if of == nil {
				of = &outFile{name: sf, meta: vf.Metadata, verbatim: vf}
				whole[sf] = of
				d.files = append(d.files, of)
			}
			of.tensors = append(of.tensors, ot)
			fileOf = append(fileOf, of)
			continue
		}
		size := ot.size()
		if cur == nil || (curBytes > 0 && curBytes+size > maxShardBytes) {
			cur = &outFile{meta: rankFileMeta(src, sf)}
			curBytes = 0
			d.files = append(d.files, cur)
		}
		cur.tensors = append(cur.tensors, ot)
		curBytes += size
		fileOf = append(fileOf, cur)
	}
	if err := nameFiles(d.files, src); err != nil {
		return err
	}
	for _, of := range d.files {
		if err := of.plan(); err != nil {
			return err
		}
	}
	for i := range man.Tensors {
		man.Tensors[i].File = fileOf[i].name
	}
	d.man = man
	d.index = indexOf(d.files, nil)
	d.indexNewline = !src.info.IndexNoFinalNewline
	d.side = map[string][]byte{}
	for name, b := range src.aux {
		if name == model.ConfigName && l.Stages() > 1 {
			if b, err = stageConfig(b, l, man); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		d.side[name] = b
	}
	return nil
}

// nameFiles names the written (not copied) files model-NNNNN-of-NNNNNN in
// order; a name a copy already holds is an error, not an overwrite.
func nameFiles(files []*outFile, src *Source) error {
	var written []*outFile
	taken := map[string]bool{}
	for _, of := range files {
		if of.verbatim != nil {
			taken[of.name] = true
		} else {
			written = append(written, of)
		}
	}
	for i, of := range written {
		of.name = fmt.Sprintf(model.ShardNameFormat, i+1, len(written))
		if taken[of.name] {
			return fmt.Errorf("%w: %s: written file %s would replace the copy of the source file of that name", errLayout, src.Root, of.name)
		}
	}
	return nil
}

// rankFileMeta is the metadata of a written rank file: the "format" key of
// the source file its first tensor comes from, and nothing else.
func rankFileMeta(src *Source, name string) map[string]string {
	if v, ok := fileMeta(src, name)[metadataFormatKey]; ok {
		return map[string]string{metadataFormatKey: v}
	}
	return nil
}

func indexOf(files []*outFile, meta map[string]any) *safetensors.Index {
	idx := &safetensors.Index{WeightMap: map[string]string{}, Metadata: meta}
	for _, of := range files {
		for _, t := range of.tensors {
			idx.TotalSize += t.size()
			idx.WeightMap[t.spec.Name] = of.name
		}
	}
	return idx
}

// verbatimFiles picks the source shards a rank holds entirely and unchanged
// whose header is already canonical: those are copied as files.
func verbatimFiles(src *Source, pcs []piece, pack packFormat) (map[string]*safetensors.File, error) {
	if src.files == nil {
		return nil, nil
	}
	held := map[string]int{}
	changed := map[string]bool{}
	for _, pc := range pcs {
		sf := src.fileOf[pc.Index]
		held[sf]++
		if pc.Held == HeldSlice || (pack != packNone && pc.ScaleOf != "") {
			changed[sf] = true
		}
	}
	out := map[string]*safetensors.File{}
	for sf, n := range held {
		f := src.files[sf]
		if changed[sf] || f == nil || n != len(f.Tensors) {
			continue
		}
		specs := make([]safetensors.TensorSpec, len(f.Tensors))
		for i, t := range f.Tensors {
			specs[i] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
		}
		lay, err := safetensors.NewFilePlan(specs, f.Metadata)
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", sf, err)
		}
		if int64(len(lay.Header)) != f.DataStart || lay.Size != f.Size {
			continue
		}
		hdr := make([]byte, f.DataStart)
		if err := readFull(f.ReaderAt(), hdr, 0); err != nil {
			return nil, fmt.Errorf("file %s: %w", sf, err)
		}
		if bytes.Equal(hdr, lay.Header) {
			out[sf] = f
		}
	}
	return out, nil
}

func stageConfig(cfg []byte, l *Layout, m *manifest) ([]byte, error) {
	obj, err := decodeJSONObject(cfg)
	if err != nil {
		return nil, err
	}
	obj[stageKey] = map[string]any{
		"layout":    l.Name,
		"stage":     m.Stage,
		"stages":    m.Stages,
		"layers":    m.Layers,
		"partition": l.Partition,
	}
	return encodeJSON(obj)
}
