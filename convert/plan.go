package convert

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// ManifestName is the file, written last, that lists the sha256 and size of
// every other output file; its presence marks a finished conversion.
const ManifestName = "k3ckpt-manifest.json"

// planVersion changes whenever the meaning of a plan changes, so that a resume
// never mixes outputs of two versions.
const planVersion = "k3ckpt-convert/1"

// FilePlan is one output shard: same name as its source shard. Only its
// summary is kept; Layout rebuilds the full layout (deterministically, from
// the headers) when the file is written or checked, so a plan of K3's
// 497,220 tensors does not hold every output header at once.
type FilePlan struct {
	// Name is the shard's path relative to the checkpoint root.
	Name string
	// Source is the source shard (its headers; data is read by the executor).
	Source *safetensors.File
	// Size and DataStart are the output file's size and data offset.
	Size, DataStart int64
	// ReadBytes is how many source bytes producing the file reads.
	ReadBytes int64
	// Totals counts the file's tensors and bytes.
	Totals Totals
	// Steps is the executor's program for the file, in the layout's data
	// order of its first output: copy runs and quantized weights.
	Steps []Step

	plan      *Plan
	headerSum [sha256.Size]byte
}

// Layout returns the shard's output layout and its output tensors in the
// layout's data order.
func (fp *FilePlan) Layout() (*safetensors.Layout, []OutputTensor, error) {
	specs := make([]safetensors.TensorSpec, len(fp.Source.Tensors))
	for i, t := range fp.Source.Tensors {
		specs[i] = safetensors.TensorSpec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	outs, err := PlanTensors(fp.plan.Recipe, specs, fp.plan.Options)
	if err != nil {
		return nil, nil, fmt.Errorf("file %s: %w", filepath.Join(fp.plan.SrcRoot, fp.Source.Path), err)
	}
	return layoutFile(fp.Source, outs)
}

// rereadBytes is what the file's code steps read again (weights whose codes
// are not held from their scale step).
func (fp *FilePlan) rereadBytes() int64 {
	var n int64
	for _, st := range fp.Steps {
		if st.Kind == StepCodes && !st.HoldCodes {
			n += st.Len
		}
	}
	return n
}

// AuxFile is a side file (tokenizer, chat template, custom code) copied as is.
type AuxFile struct {
	// Name is the path relative to the checkpoint root, with forward slashes.
	Name string
	Size int64
}

// Plan is a complete conversion decided from headers and config alone. The
// executor follows it without making decisions.
type Plan struct {
	Recipe  *Recipe
	Options Options
	// SrcRoot is the source checkpoint directory.
	SrcRoot string
	// Files are the output shards, in source order.
	Files []*FilePlan
	// Aux are the side files copied unchanged.
	Aux []AuxFile
	// Config is the output config.json; HFQuantConfig is hf_quant_config.json
	// (ModelOpt only, else nil).
	Config, HFQuantConfig []byte
	// ID fingerprints everything above; outputs of one plan carry it.
	ID string
}

// NewPlan plans the conversion of a local checkpoint. config is the source
// config.json (read from the checkpoint when nil). It fails, before anything
// is written, on a tensor the recipe cannot quantize, a tensor whose shape or
// dtype disagrees with the config, or output names that collide.
func NewPlan(src *safetensors.Checkpoint, config []byte, r *Recipe, opts Options) (*Plan, error) {
	if strings.Contains(src.Root, "://") {
		return nil, fmt.Errorf("convert %s: the source must be a local directory", src.Root)
	}
	if config == nil {
		var err error
		if config, err = src.ReadAux(ConfigName); err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
	}
	cfg, err := model.ParseConfig(config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(src.Root, ConfigName), err)
	}
	p := &Plan{Recipe: r, Options: opts, SrcRoot: src.Root, Files: make([]*FilePlan, len(src.Files))}
	mods := newModuleSet()
	var seen nameSet
	var mu sync.Mutex
	// Files are planned concurrently (each is independent); what they add
	// to the shared module and name sets is merged under a lock.
	shardIndex := make(map[string]int, cfg.NumShards())
	for i := range cfg.NumShards() {
		shardIndex[cfg.ShardName(i)] = i
	}
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, f := range src.Files {
		g.Go(func() error {
			if err := checkAgainstConfig(src.Root, f, cfg, shardIndex); err != nil {
				return err
			}
			fp := &FilePlan{Name: f.Path, Source: f, plan: p}
			l, outs, err := fp.Layout()
			if err != nil {
				return err
			}
			fp.Size, fp.DataStart, fp.headerSum = l.Size, l.DataStart, sha256.Sum256(l.Header)
			if fp.Steps, err = planSteps(f, l, outs); err != nil {
				return fmt.Errorf("%s: %w", src.Root, err)
			}
			fp.summarize(l, outs)
			p.Files[i] = fp
			mu.Lock()
			defer mu.Unlock()
			mods.add(outs)
			return seen.add(f.Path, outs)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if p.Config, p.HFQuantConfig, err = outputConfigs(cfg, mods.sorted(), opts); err != nil {
		return nil, err
	}
	if p.Aux, err = listAux(src); err != nil {
		return nil, err
	}
	p.ID = p.fingerprint()
	return p, nil
}

// nameSet finds an output name planned twice across files. Within a file the
// layout rejects duplicates; across files only the scale names are new, so
// only they (and the names they could collide with) need remembering.
type nameSet struct {
	files map[string]string
}

func (n *nameSet) add(file string, outs []OutputTensor) error {
	if n.files == nil {
		n.files = map[string]string{}
	}
	for _, o := range outs {
		if o.Role != RoleScale {
			continue
		}
		if prev, dup := n.files[o.Name]; dup {
			return fmt.Errorf("file %s: tensor %s: %w: also written to %s", file, o.Name, ErrNameCollision, prev)
		}
		n.files[o.Name] = file
	}
	return nil
}

// summarize counts a file's tensors and bytes for Totals.
func (fp *FilePlan) summarize(l *safetensors.Layout, outs []OutputTensor) {
	t := &fp.Totals
	t.Files = 1
	t.SourceBytes = fp.Source.DataSize()
	t.OutputBytes = l.Size - l.DataStart
	kept := 0
	for i, o := range outs {
		sz := l.Tensors[i].Size()
		switch o.Role {
		case RoleCopy:
			t.Copied++
			t.CopiedBytes += sz
			fp.ReadBytes += sz
			kept++
		case RoleWeight:
			t.Quantized++
			t.FP8Bytes += sz
			src, _ := fp.Source.Lookup(o.Source)
			t.QuantizedBytes += src.Size()
			fp.ReadBytes += src.Size()
			kept++
		case RoleScale:
			t.ScaleBytes += sz
		}
	}
	t.Dropped = len(fp.Source.Tensors) - kept
}

// layoutFile lays out one output shard and orders its outputs like the layout.
func layoutFile(f *safetensors.File, outs []OutputTensor) (*safetensors.Layout, []OutputTensor, error) {
	specs := make([]safetensors.TensorSpec, len(outs))
	byName := make(map[string]int, len(outs))
	for i, o := range outs {
		specs[i] = o.TensorSpec
		byName[o.Name] = i
	}
	l, err := safetensors.NewLayout(specs, f.Metadata)
	if err != nil {
		return nil, nil, fmt.Errorf("file %s: %w", f.Path, err)
	}
	ordered := make([]OutputTensor, len(outs))
	for i, t := range l.Tensors {
		ordered[i] = outs[byName[t.Name]]
	}
	return l, ordered, nil
}

// checkAgainstConfig compares every tensor of a source file that the
// config's catalog knows with its catalog dtype and shape, one catalog shard
// at a time (a K3 file holds one).
func checkAgainstConfig(root string, f *safetensors.File, cfg *model.Config, shardIndex map[string]int) error {
	cached := -1
	var want map[string]safetensors.TensorSpec
	for _, t := range f.Tensors {
		i, ok := shardIndex[cfg.ShardOf(t.Name)]
		if !ok {
			continue
		}
		if i != cached {
			specs := cfg.ShardTensors(i)
			want = make(map[string]safetensors.TensorSpec, len(specs))
			for _, s := range specs {
				want[s.Name] = s
			}
			cached = i
		}
		s, ok := want[t.Name]
		if !ok {
			continue
		}
		if s.DType != t.DType || !slices.Equal(s.Shape, t.Shape) {
			return fmt.Errorf("file %s: tensor %s: %w: %s %v, config.json implies %s %v",
				filepath.Join(root, f.Path), t.Name, ErrConfigMismatch, t.DType, t.Shape, s.DType, s.Shape)
		}
	}
	return nil
}

// outputConfigs rewrites config.json's quantization_config for the chosen
// convention and renders hf_quant_config.json for ModelOpt.
func outputConfigs(cfg *model.Config, mods modules, opts Options) (config, hfq []byte, err error) {
	raw := cfg.Raw()
	// The source's own description of its experts: inside text_config in
	// the release, where the schema found it.
	srcQC := cfg.QuantizationConfig()
	qc, hf, err := quantConfigs(srcQC, cfg.GroupSize, mods, opts)
	if err != nil {
		return nil, nil, err
	}
	raw["quantization_config"] = qc
	if config, err = marshalConfig(raw); err != nil {
		return nil, nil, err
	}
	if hf != nil {
		if hfq, err = marshalConfig(hf); err != nil {
			return nil, nil, err
		}
	}
	return config, hfq, nil
}

// replacedNames are source side files the conversion rewrites or must not
// carry over (a stale hf_quant_config.json would describe the wrong formats).
var replacedNames = map[string]bool{
	ConfigName: true, HFQuantConfigName: true, safetensors.IndexName: true, ManifestName: true,
}

// listAux finds the side files to copy: every regular file under the source
// root (symlinks followed, as in a Hugging Face cache snapshot) except the
// shards, the files the conversion rewrites, and hidden entries.
func listAux(src *safetensors.Checkpoint) ([]AuxFile, error) {
	shards := make(map[string]bool, len(src.Files))
	for _, f := range src.Files {
		shards[f.Path] = true
	}
	var aux []AuxFile
	err := filepath.WalkDir(src.Root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src.Root, path)
		if err != nil || rel == "." {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		name := filepath.ToSlash(rel)
		if shards[name] || replacedNames[name] {
			return nil
		}
		st, err := os.Stat(path) // follows symlinks
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return nil
		}
		aux = append(aux, AuxFile{Name: name, Size: st.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list side files of %s: %w", src.Root, err)
	}
	slices.SortFunc(aux, func(a, b AuxFile) int { return cmp.Compare(a.Name, b.Name) })
	return aux, nil
}

// fingerprint hashes what the plan produces: the tool version, the recipe,
// the options, every output header and source size, the side files and the
// configs. Two runs with equal fingerprints write byte-identical outputs.
func (p *Plan) fingerprint() string {
	h := sha256.New()
	line := func(parts ...string) {
		h.Write([]byte(strings.Join(parts, "\x1f")))
		h.Write([]byte{'\n'})
	}
	line(planVersion, p.Recipe.Name, p.Recipe.Default.String())
	for _, r := range p.Recipe.Rules {
		line("rule", r.Pattern, r.Action.String())
	}
	// NonFinite is left out: where both policies succeed they write the same bytes.
	line("options", p.Options.Format.String(), p.Options.ScaleFmt.String())
	for _, f := range p.Files {
		line("file", f.Name, strconv.FormatInt(f.Source.Size, 10))
		h.Write(f.headerSum[:])
	}
	for _, a := range p.Aux {
		line("aux", a.Name, strconv.FormatInt(a.Size, 10))
	}
	h.Write(p.Config)
	h.Write(p.HFQuantConfig)
	return hex.EncodeToString(h.Sum(nil))
}

// UnitKind says how a unit of work is produced.
type UnitKind uint8

const (
	// UnitShard is an output shard written from its source shard.
	UnitShard UnitKind = iota
	// UnitAux is a side file copied byte for byte.
	UnitAux
)

// String names the kind.
func (k UnitKind) String() string {
	if k == UnitAux {
		return "aux"
	}
	return "shard"
}

// Unit is one output file the workers produce (the index, configs and
// manifest are written by Finalize once every unit is done).
type Unit struct {
	Name string
	Kind UnitKind
	// Size is the output file's size.
	Size int64
	// Work is the bytes read and hashed to produce it (what progress counts).
	Work int64
	// File is set for shards.
	File *FilePlan
}

// Units lists the plan's units sorted by name.
func (p *Plan) Units() []Unit {
	us := make([]Unit, 0, len(p.Files)+len(p.Aux))
	for _, f := range p.Files {
		us = append(us, Unit{Name: f.Name, Kind: UnitShard, Size: f.Size, Work: f.ReadBytes + f.rereadBytes() + f.Size, File: f})
	}
	for _, a := range p.Aux {
		us = append(us, Unit{Name: a.Name, Kind: UnitAux, Size: a.Size, Work: 2 * a.Size})
	}
	slices.SortFunc(us, func(a, b Unit) int { return cmp.Compare(a.Name, b.Name) })
	return us
}

// Slice returns worker i's share of the units out of n workers: units are
// dealt largest first to the least loaded worker (ties to the lowest worker
// and then by name), which balances bytes and depends only on the plan, so
// every worker computes the same partition on its own.
func (p *Plan) Slice(i, n int) ([]Unit, error) {
	if n < 1 || i < 0 || i >= n {
		return nil, fmt.Errorf("%w: %d/%d (want 0 ≤ I < N)", ErrWorker, i, n)
	}
	us := p.Units()
	order := slices.Clone(us)
	slices.SortStableFunc(order, func(a, b Unit) int { return cmp.Compare(b.Size, a.Size) })
	load := make([]int64, n)
	var mine []Unit
	for _, u := range order {
		w := 0
		for j := 1; j < n; j++ {
			if load[j] < load[w] {
				w = j
			}
		}
		load[w] += max(u.Size, 1)
		if w == i {
			mine = append(mine, u)
		}
	}
	slices.SortFunc(mine, func(a, b Unit) int { return cmp.Compare(a.Name, b.Name) })
	return mine, nil
}

// Totals sums a plan for --dry-run.
type Totals struct {
	SourceBytes, OutputBytes     int64 // tensor data bytes
	Copied, Quantized, Dropped   int   // source tensors by action
	CopiedBytes, QuantizedBytes  int64 // source bytes by action
	FP8Bytes, ScaleBytes         int64 // output bytes of quantized tensors
	AuxBytes                     int64
	Files, AuxFiles, OutputFiles int
}

// Totals counts the plan's tensors and bytes.
func (p *Plan) Totals() Totals {
	var t Totals
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
