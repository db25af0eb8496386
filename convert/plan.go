package convert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/k3ckpt/k3ckpt/internal/fsx"
	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// ManifestName is the file, written last, that lists the sha256 and size of
// every other output file; its presence marks a finished conversion.
const ManifestName = "k3ckpt-manifest.json"

// planVersion changes with a plan's meaning: a resume never mixes two versions.
const planVersion = "k3ckpt-convert/2"

// filePlan is one output shard (named as its source) and all writing it takes.
type filePlan struct {
	Name      string                // relative to the checkpoint root
	Source    *safetensors.File     // its headers; the executor reads the data
	Layout    *safetensors.FilePlan // the output's header and tensor offsets
	Steps     []step                // the executor's program, in data order
	ReadBytes int64                 // the source bytes producing it reads
	Totals    totals
	// SourceHeader is the source header's sha256 as planned: a shard
	// replaced since is never converted with a stale plan.
	SourceHeader [sha256.Size]byte

	foreign   []*foreignScale   // the scales its weights read from other files
	stamp     fsx.Stamp         // the source's size and times when planned
	etag      string            // a remote source's ETag when planned
	layoutSum [sha256.Size]byte // the output header's sha256 (the plan's ID covers it)
}

// rereadBytes is what the code steps read again: weights whose codes are
// not held from their scale step, or the spilled codes.
func (fp *filePlan) rereadBytes() int64 {
	var n int64
	for _, st := range fp.Steps {
		switch {
		case st.Kind != stepCodes || st.HoldCodes:
		case st.SpillCodes:
			n += fp.Layout.Tensors[st.First].Size()
		default:
			n += st.Len
		}
	}
	return n
}

// spillBytes is the most the file's spill holds.
func (fp *filePlan) spillBytes() int64 {
	var n int64
	for _, st := range fp.Steps {
		if st.Kind == stepCodes && st.SpillCodes {
			n += fp.Layout.Tensors[st.First].Size()
		}
	}
	return n
}

// Plan is a complete conversion decided from headers and config alone; the
// executor follows it without deciding anything.
type Plan struct {
	Recipe  *Recipe
	Options Options
	SrcRoot string      // the source checkpoint directory
	Files   []*filePlan // the output shards, in source order
	Aux     []auxFile   // side files copied unchanged
	// Config is the output config.json; HFQuantConfig is hf_quant_config.json
	// (ModelOpt only, else nil).
	Config, HFQuantConfig []byte
	ID                    string // fingerprints everything above; outputs carry it
	AuxUnlisted           bool   // an https:// source could not be listed: Aux lacks its side files

	Totals     totals
	FetchBytes int64         // what the plan reads from a remote source (0: local)
	Splits     []SplitReport // the fused groups the recipe splits

	remote *remote.Source // nil for a local source
}

// NewPlan plans the conversion of a checkpoint, local or remote, whose
// config.json is config (read when nil). It fails on a tensor the recipe
// cannot quantize or the config disagrees with, or colliding output names.
func NewPlan(src *safetensors.Checkpoint, config []byte, r *Recipe, opts Options) (*Plan, error) {
	if err := checkExecutable(opts); err != nil {
		return nil, fmt.Errorf("convert %s: %w", src.Root, err)
	}
	if config == nil {
		var err error
		if config, err = src.ReadAux(model.ConfigName); err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
	}
	cfg, err := model.ParseConfig(config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(src.Root, model.ConfigName), err)
	}
	if model.FamilyOfConfig(config) != model.BuiltinFamilies()[0] { // K3's is the default
		opts.cls = cfg.Classifier
	}
	if opts.Experts == ExpertsNVFP4 && cfg.Experts != model.ExpertsMXFP4 {
		return nil, fmt.Errorf("convert %s: --experts nvfp4 casts MXFP4 experts, and %s declares %s ones", src.Root, filepath.Join(src.Root, model.ConfigName), cfg.Experts)
	}
	if err := checkExpertsWay(src.Root, cfg, r, opts); err != nil {
		return nil, err
	}
	xs, err := planForeignScales(src, r, opts)
	if err != nil {
		return nil, err
	}
	p := &Plan{Recipe: r, Options: opts, SrcRoot: src.Root, Files: make([]*filePlan, len(src.Files)), remote: src.Remote}
	mods := newModuleSet(opts.classifier())
	catalog := cfg.CatalogLookup()
	// Within a file the layout rejects duplicate names, and across files
	// only scale names are new: scaleFile maps those planned to their files.
	scaleFile := map[string]string{}
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, f := range src.Files {
		g.Go(func() error {
			if err := checkAgainstConfig(src.Root, f, cfg, catalog); err != nil {
				return err
			}
			fp, outs, err := planFileWith(src.Root, f, r, opts, xs[f.Path])
			if err != nil {
				return locateScale(err, src, filepath.Join(src.Root, f.Path))
			}
			p.Files[i] = fp
			mu.Lock()
			defer mu.Unlock()
			mods.add(outs)
			for _, o := range outs {
				if o.Role != roleScale {
					continue
				}
				if prev, dup := scaleFile[o.Name]; dup {
					return fmt.Errorf("file %s: tensor %s: %w: also written to %s", f.Path, o.Name, errNameCollision, prev)
				}
				scaleFile[o.Name] = f.Path
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	m := mods.sorted()
	m.decodes = r.decodes()
	p.Splits = summarizeSplits(model.FindSplits(m.fp8, m.kept))
	if p.Config, p.HFQuantConfig, err = outputConfigs(cfg, m, opts); err != nil {
		return nil, err
	}
	if p.remote != nil {
		p.Aux, p.AuxUnlisted, err = listRemoteAux(context.Background(), src)
	} else {
		p.Aux, err = listAux(src)
	}
	if err != nil {
		return nil, err
	}
	p.ID = p.fingerprint()
	p.Totals, p.FetchBytes = p.totals(), p.fetchBytes()
	return p, nil
}

// planFileWith plans one output shard from its source's header, and returns
// its outputs in data order too; fx holds what other files share with it.
func planFileWith(root string, f *safetensors.File, r *Recipe, opts Options, fx fileScales) (*filePlan, []outputTensor, error) {
	path := filepath.Join(root, f.Path)
	specs := make([]safetensors.TensorSpec, len(f.Tensors))
	for i, t := range f.Tensors {
		specs[i] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	outs, err := planTensors(r, specs, opts, fx)
	if err != nil {
		return nil, nil, fmt.Errorf("file %s: %w", path, err)
	}
	if len(outs) == 0 && len(fx.taken) > 0 {
		return nil, nil, fmt.Errorf("file %s: %w: it holds only scales of weights in other shards, so its output would hold no tensor and no index could list it: rewrite the shards with each scale beside its weight (and the index's weight_map to match), then run again", path, errNotQuantizable)
	}
	// The header is rendered again when written: K3's would hold ~80 MB.
	l, sum, outs, err := layoutFile(f, outs)
	if err != nil {
		return nil, nil, err
	}
	fp := &filePlan{Name: f.Path, Source: f, Layout: l, layoutSum: sum}
	for _, o := range outs {
		if o.xf != nil && o.xf.foreign != nil {
			fp.foreign = append(fp.foreign, o.xf.foreign)
		}
	}
	if fp.Steps, err = planSteps(opts.classifier(), f, l, outs); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", root, err)
	}
	if rf, ok := f.ReaderAt().(*remote.File); ok { // every response repeats its size and ETag
		fp.etag = rf.Version()
	} else if sum, ok := f.HeaderSum(); ok {
		fp.SourceHeader = sum
	} else if fp.SourceHeader, err = headerSum(f); err != nil {
		return nil, nil, fmt.Errorf("file %s: %w", path, err)
	}
	if fp.stamp, err = fsx.StampReader(f.ReaderAt()); err != nil {
		return nil, nil, fmt.Errorf("file %s: %w", path, err)
	}
	fp.summarize(outs)
	return fp, outs, nil
}

// headerSum hashes a file's header bytes, [0, DataStart), as they are now.
func headerSum(f *safetensors.File) ([sha256.Size]byte, error) {
	h := sha256.New()
	buf := make([]byte, min(f.DataStart, 1<<20))
	if _, err := io.CopyBuffer(h, io.NewSectionReader(f.ReaderAt(), 0, f.DataStart), buf); err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("read header: %w", err)
	}
	return [sha256.Size]byte(h.Sum(nil)), nil
}

// summarize counts a file's tensors and bytes.
func (fp *filePlan) summarize(outs []outputTensor) {
	l := fp.Layout
	t := &fp.Totals
	t.Files = 1
	t.SourceBytes = fp.Source.Size - fp.Source.DataStart
	t.OutputBytes = l.Size - l.DataStart
	kept := 0
	for i, o := range outs {
		sz := l.Tensors[i].Size()
		switch o.Role {
		case roleCopy:
			t.Copied++
			t.CopiedBytes += sz
			fp.ReadBytes += sz
			kept++
		case roleWeight:
			t.Quantized++
			t.FP8Bytes += sz
			src, _ := o.sourceIn(fp.Source)
			t.QuantizedBytes += src.Size()
			fp.ReadBytes += src.Size()
			if isMXFP4Codes(src) { // and their E8M0 scales
				fp.ReadBytes += src.Size() / 16
			}
			kept++
		case roleScale:
			t.ScaleBytes += sz
		case roleNVFP4:
			t.NVFP4Bytes += sz
		}
	}
	for _, st := range fp.Steps {
		if st.xf != nil { // a decode or pack step
			xfReads(st.xf, func(_ safetensors.TensorInfo, _, n int64) { fp.ReadBytes += n })
		}
		nvfp4 := st.Kind == stepNVFP4
		switch {
		case st.Kind == stepDecode:
			t.Decoded++
			t.DecodedBytes += fp.Layout.Tensors[st.First].Size()
			kept++
		case st.Kind == stepPack && st.xf.part == 0:
			t.Packed++
			t.PackedBytes += st.xf.codes.Size()
			kept++
		case nvfp4 && st.Part == partCodes: // both MXFP4 tensors are consumed by the cast
			t.NVFP4++
			t.MXFP4Bytes += st.Cast.Packed.Size() + st.Cast.Scales.Size()
			kept += 2
			fp.ReadBytes += st.Cast.Packed.Size() + st.Cast.Scales.Size()
		case nvfp4 && (st.Part == partScales || st.Part == partScale2): // K_max: once per w1/w3 pair, each reading its own
			fp.ReadBytes += st.Cast.Scales.Size()
		}
	}
	t.Dropped = len(fp.Source.Tensors) - kept
}

// layoutFile lays out one output shard (its header not kept) and orders outs by it.
func layoutFile(f *safetensors.File, outs []outputTensor) (*safetensors.FilePlan, [sha256.Size]byte, []outputTensor, error) {
	specs := make([]safetensors.TensorSpec, len(outs))
	for i, o := range outs {
		specs[i] = o.TensorSpec
	}
	l, sum, err := safetensors.NewFilePlanSum(specs, f.Metadata)
	if err != nil {
		return nil, sum, nil, fmt.Errorf("file %s: %w", f.Path, err)
	}
	ordered := make([]outputTensor, len(outs))
	for _, o := range outs {
		i, _ := l.Index(o.Name) // the layout holds every name once
		ordered[i] = o
	}
	return l, sum, ordered, nil
}

// fingerprint hashes all the plan produces from: two runs with equal
// fingerprints write byte-identical outputs.
func (p *Plan) fingerprint() string {
	h := sha256.New()
	line := func(parts ...string) {
		h.Write([]byte(strings.Join(parts, "\x1f")))
		h.Write([]byte{'\n'})
	}
	line(planVersion, p.Recipe.Name, p.Recipe.Default.String(), "quantize", p.Recipe.Quantize.String())
	// NonFinite is left out: where both policies succeed they write the same bytes.
	line("options", p.Options.Format.String(), p.Options.ScaleFmt.String(), p.Options.Experts.String(), p.Options.Numerics.String())
	for _, f := range p.Files {
		line("file", f.Name, strconv.FormatInt(f.Source.Size, 10))
		h.Write(f.layoutSum[:])
		for _, x := range f.foreign {
			line("xscale", x.weight, x.info.Name, x.file, hex.EncodeToString(x.sum[:]))
		}
	}
	for _, a := range p.Aux {
		line("aux", a.Name, strconv.FormatInt(a.Size, 10))
	}
	h.Write(p.Config)
	h.Write(p.HFQuantConfig)
	return hex.EncodeToString(h.Sum(nil))
}

// totals sums a plan for --dry-run.
type totals struct {
	SourceBytes, OutputBytes     int64 // tensor data bytes
	Copied, Quantized, Dropped   int   // source tensors by action
	CopiedBytes, QuantizedBytes  int64 // source bytes by action
	FP8Bytes, ScaleBytes         int64 // output bytes of quantized tensors
	NVFP4                        int   // MXFP4 expert projections cast to NVFP4
	MXFP4Bytes, NVFP4Bytes       int64 // their source and output bytes
	Decoded, Packed              int   // quantized weights decoded to BF16; BF16 experts packed to MXFP4
	DecodedBytes, PackedBytes    int64 // the BF16 bytes written, and read
	AuxBytes                     int64
	Files, AuxFiles, OutputFiles int
}

func (p *Plan) totals() totals {
	var t totals
	for _, f := range p.Files {
		ft := f.Totals
		t.Files += ft.Files
		t.SourceBytes += ft.SourceBytes
		t.OutputBytes += ft.OutputBytes
		t.Copied += ft.Copied
		t.Quantized += ft.Quantized
		t.Dropped += ft.Dropped
		t.CopiedBytes += ft.CopiedBytes
		t.QuantizedBytes += ft.QuantizedBytes
		t.FP8Bytes += ft.FP8Bytes
		t.ScaleBytes += ft.ScaleBytes
		t.NVFP4 += ft.NVFP4
		t.MXFP4Bytes += ft.MXFP4Bytes
		t.NVFP4Bytes += ft.NVFP4Bytes
		t.Decoded += ft.Decoded
		t.DecodedBytes += ft.DecodedBytes
		t.Packed += ft.Packed
		t.PackedBytes += ft.PackedBytes
	}
	for _, a := range p.Aux {
		t.AuxFiles++
		t.AuxBytes += a.Size
	}
	t.OutputFiles = t.Files + t.AuxFiles + 2 // + index, config.json
	if p.HFQuantConfig != nil {
		t.OutputFiles++
	}
	return t
}
