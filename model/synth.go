package model

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/internal/filewrite"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// errOutputExists: synth was pointed at a non-empty directory without Force.
var errOutputExists = errors.New("output directory is not empty")

// synthChunkElems bounds the values generated at once per worker, so memory
// stays flat whatever the tensor size.
const synthChunkElems = 64 << 10

// SynthOptions controls Synth.
type SynthOptions struct {
	// Family ("" for Kimi-K3; see BuiltinFamilies) and Scale pick a built-in
	// config, unless Config is set.
	Family string
	Scale  Scale
	// Config, when non-nil, is a config.json to replicate, copied verbatim.
	Config []byte
	// HeaderOnly leaves every data region a hole of a sparse file.
	HeaderOnly bool
	// Seed selects the values; the same seed gives the same bytes on every machine.
	Seed uint64
	// Force allows writing into a non-empty directory: files synth writes
	// are replaced, stale shards (shardFileRE) and temporaries of killed runs
	// removed, nothing else touched.
	Force bool
	// Workers bounds how many shards are written at once (0: GOMAXPROCS).
	Workers int
	// Progress, if set, is called after each shard (from worker goroutines).
	Progress func(done, total int)
}

// Synth writes a replica checkpoint into dir: config.json, the shards laid
// out as the released files are and model.safetensors.index.json. Values
// are seeded normals per tensor (rng.go), encoded to each tensor's dtype.
// The config is validated before dir is touched.
func Synth(dir string, opts SynthOptions) error {
	cfgJSON := opts.Config
	if cfgJSON == nil {
		b, err := FamilyConfigJSON(opts.Family, opts.Scale)
		if err != nil {
			return err
		}
		cfgJSON = b
	}
	cfg, err := ParseConfig(cfgJSON)
	if err != nil {
		return err
	}
	files := cfg.synthFiles()
	if err := prepareDir(dir, files, opts.Force); err != nil {
		return err
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	s := &synth{cfg: cfg, dir: dir, opts: opts}
	if !opts.HeaderOnly {
		s.live = cfg.liveCounts()
	}
	n := len(files)
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(workers)
	var done atomic.Int64
	for _, f := range files {
		g.Go(func() error {
			if err := s.writeShard(ctx, f.name, f.specs); err != nil {
				return err
			}
			if opts.Progress != nil {
				opts.Progress(int(done.Add(1)), n)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("synth %s: %w", dir, err)
	}
	idx := &safetensors.Index{TotalSize: cfg.TotalBytes(), WeightMap: make(map[string]string, cfg.NumTensors())}
	for _, f := range files {
		for _, ts := range f.specs {
			idx.WeightMap[ts.Name] = f.name
		}
	}
	if err := filewrite.WriteFile(filepath.Join(dir, ConfigName), cfgJSON, 0o644); err != nil {
		return fmt.Errorf("synth %s: %w", dir, err)
	}
	// The index goes last: a directory with an index is a complete replica.
	if err := safetensors.WriteIndex(filepath.Join(dir, safetensors.IndexName), idx); err != nil {
		return fmt.Errorf("synth %s: %w", dir, err)
	}
	return nil
}

// shardFileRE matches any shard name, to find stale shards under Force.
var shardFileRE = regexp.MustCompile(`^model-\d{5}-of-\d{5,6}\.safetensors$`)

type synthFile struct {
	name  string
	specs []safetensors.TensorSpec
}

// synthFiles lists the files synth writes: the family's release split when
// it has one that fits the config (DeepSeek-V3's 163 files), else one file
// per shard.
func (c *Config) synthFiles() []synthFile {
	if rf := c.releaseFiles(); rf != nil {
		out := make([]synthFile, len(rf))
		for i, specs := range rf {
			out[i] = synthFile{fmt.Sprintf(ShardNameFormat, i+1, len(rf)), specs}
		}
		return out
	}
	out := make([]synthFile, c.NumShards())
	for i := range out {
		out[i] = synthFile{c.ShardName(i), c.ShardTensors(i)}
	}
	return out
}

// SynthShards is the number of files Synth writes for this config.
func (c *Config) SynthShards() int {
	if rf := c.releaseFiles(); rf != nil {
		return len(rf)
	}
	return c.NumShards()
}

// liveCounts maps each zero-padded tensor (A_log) to its count of values.
func (c *Config) liveCounts() map[string]int64 {
	live := map[string]int64{}
	for i := range c.NumShards() {
		c.shardUnits(i, func(prefix string, ts []tmpl) {
			for _, x := range ts {
				if x.live >= 0 {
					live[prefix+x.suffix] = x.live
				}
			}
		})
	}
	return live
}

func prepareDir(dir string, files []synthFile, force bool) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("synth: %w", err)
	case len(ents) == 0:
		return nil
	case !force:
		return fmt.Errorf("synth: %s: %w (%d entries; use --force to overwrite)", dir, errOutputExists, len(ents))
	}
	for _, e := range ents {
		written := slices.ContainsFunc(files, func(f synthFile) bool { return f.name == e.Name() })
		if e.Type().IsRegular() && shardFileRE.MatchString(e.Name()) && !written {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("synth: remove stale shard: %w", err)
			}
		}
	}
	if _, err := filewrite.RemoveTemps(dir); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

type synth struct {
	cfg  *Config
	dir  string
	opts SynthOptions
	live map[string]int64 // liveCounts
}

// mxfp4PackedRE finds an MXFP4 weight's packed codes (its scales are
// "<weight>_scale").
var mxfp4PackedRE = regexp.MustCompile(`^(.*\.weight)_packed$`)

func (s *synth) writeShard(ctx context.Context, name string, specs []safetensors.TensorSpec) error {
	layout, err := safetensors.NewFilePlan(specs, nil)
	if err != nil {
		return err
	}
	w, err := safetensors.Create(filepath.Join(s.dir, name), layout)
	if err != nil {
		return err
	}
	defer w.Abort()
	if s.opts.HeaderOnly {
		return w.CommitSparse()
	}
	byName := make(map[string]safetensors.TensorSpec, len(specs))
	for _, ts := range specs {
		byName[ts.Name] = ts
	}
	// A weight's scale is written with it: MXFP4's from one stream of
	// normals, block FP8's from one cast.
	scaleOf := map[string]safetensors.TensorSpec{}
	paired := map[string]bool{}
	for _, ts := range specs {
		sc, ok := fP8Scale(ts, byName)
		if m := mxfp4PackedRE.FindStringSubmatch(ts.Name); m != nil {
			if sc, ok = byName[m[1]+"_scale"]; !ok {
				return fmt.Errorf("tensor %s: no %s_scale beside it", ts.Name, m[1])
			}
		}
		if ok {
			scaleOf[ts.Name], paired[sc.Name] = sc, true
		}
	}
	buf := &synthBuf{}
	for _, ts := range specs {
		if err := ctx.Err(); err != nil {
			return err
		}
		sc, scaled := scaleOf[ts.Name]
		switch {
		case paired[ts.Name]:
			continue
		case scaled && ts.DType == safetensors.F8_E4M3:
			err = s.fillFP8(w, ts, sc, buf)
		case scaled:
			err = s.fillMXFP4(w, strings.TrimSuffix(ts.Name, "_packed"), ts, sc, buf)
		case rawFilled(ts.DType):
			err = s.fillRaw(w, ts, buf)
		default:
			err = s.fillFloat(w, ts, buf)
		}
		if err != nil {
			return err
		}
	}
	return w.Commit()
}

// synthBuf is one worker's scratch space, reused across tensors.
type synthBuf struct {
	f32    []float32
	out    []byte
	scales []byte
	fp8    []byte
}

// writeChunks writes tensor ts synthChunkElems elements at a time: fill
// sets the chunk b, which starts at element pos.
func writeChunks(w *safetensors.Writer, ts safetensors.TensorSpec, buf *synthBuf, fill func(b []byte, pos int64)) error {
	n, err := safetensors.NumElements(ts.Shape)
	if err != nil {
		return fmt.Errorf("tensor %s: %w", ts.Name, err)
	}
	tw, err := w.Tensor(ts.Name)
	if err != nil {
		return err
	}
	width := int64(ts.DType.Bits() / 8)
	buf.out = bufs.Grow(buf.out, synthChunkElems*int(width))
	for pos := int64(0); pos < n; pos += synthChunkElems {
		b := buf.out[:min(n-pos, synthChunkElems)*width]
		fill(b, pos)
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// fillFloat writes seeded normals as BF16 or F32.
func (s *synth) fillFloat(w *safetensors.Writer, ts safetensors.TensorSpec, buf *synthBuf) error {
	if ts.DType != safetensors.BF16 && ts.DType != safetensors.F32 {
		return fmt.Errorf("tensor %s: synth cannot generate %s values", ts.Name, ts.DType)
	}
	live, ok := s.live[ts.Name]
	if !ok {
		live = math.MaxInt64
	}
	dist := distOf(ts.Name)
	r := tensorStream(s.opts.Seed, ts.Name)
	bf16 := ts.DType == safetensors.BF16
	return writeChunks(w, ts, buf, func(b []byte, pos int64) {
		for j := range int64(len(b)) / int64(ts.DType.Bits()/8) {
			var v float32
			if pos+j < live {
				v = dist.draw(&r)
			}
			if bf16 {
				binary.LittleEndian.PutUint16(b[2*j:], quant.F32ToBF16(v))
			} else {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(v))
			}
		}
	})
}

// fillMXFP4 draws the [N, K] weight row band by row band and writes its
// packed codes [N, K/2] and E8M0 scales [N, K/32] (the config's group size
// is 32 wherever it has MXFP4 weights).
func (s *synth) fillMXFP4(w *safetensors.Writer, weight string, packed, scale safetensors.TensorSpec, buf *synthBuf) error {
	const g = quant.MXGroupSize
	if s.cfg.GroupSize != g || len(packed.Shape) != 2 || len(scale.Shape) != 2 || packed.Shape[0] != scale.Shape[0] ||
		packed.Shape[1]*2 != scale.Shape[1]*g {
		return fmt.Errorf("tensor %s: packed %v and scale %v do not describe one MXFP4 matrix", weight, packed.Shape, scale.Shape)
	}
	rows, k := packed.Shape[0], packed.Shape[1]*2
	pw, err := w.Tensor(packed.Name)
	if err != nil {
		return err
	}
	sw, err := w.Tensor(scale.Name)
	if err != nil {
		return err
	}
	band := max(1, synthChunkElems/k)
	r := tensorStream(s.opts.Seed, weight)
	buf.out = bufs.Grow(buf.out, int(band*k/2))
	buf.scales = bufs.Grow(buf.scales, int(band*k/g))
	tables := mxTablesFor(distOf(weight))
	for row := int64(0); row < rows; row += band {
		m := min(band, rows-row) * k
		p, sc := buf.out[:m/2], buf.scales[:m/g]
		if err := tables.encodeGroups(&r, p, sc); err != nil {
			return fmt.Errorf("tensor %s: %w", weight, err)
		}
		if _, err := pw.Write(p); err != nil {
			return err
		}
		if _, err := sw.Write(sc); err != nil {
			return err
		}
	}
	return nil
}
