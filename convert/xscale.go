package convert

import (
	"crypto/sha256"
	"fmt"
	"io"
	"path/filepath"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// A block-FP8 weight's scale may sit in another shard: DeepSeek-V3's
// inference/fp8_cast_bf16.py finds `<name>_scale_inv` through the index's
// weight_map. A decode to BF16 does the same: the plan holds the scale's
// bytes, its ID covers their sha256, and checkForeign checks their file.

// maxForeignScaleBytes bounds the scale bytes a plan holds (real ones: a few).
const maxForeignScaleBytes = 64 << 20

// foreignScale is a weight's block scale read from another shard.
type foreignScale struct {
	weight string                 // the FP8 weight's name
	info   safetensors.TensorInfo // the scale tensor as its own file holds it
	file   string                 // that file's path in the checkpoint
	data   []byte                 // its bytes, read when planned
	sum    [sha256.Size]byte
}

// planForeignScales reads the scale of every block-FP8 weight the plan
// decodes that another shard holds, and returns what each file shares so; a
// scale no file holds is left to planTransforms, which names it as missing.
func planForeignScales(src *safetensors.Checkpoint, r *Recipe, opts Options) (map[string]fileScales, error) {
	fs := map[string]fileScales{}
	file := func(path string) fileScales {
		if _, ok := fs[path]; !ok {
			fs[path] = fileScales{in: map[string]*foreignScale{}, taken: map[string]bool{}}
		}
		return fs[path]
	}
	if !r.decodes() && opts.Experts != ExpertsBF16 {
		return fs, nil
	}
	var held int64
	for _, f := range src.Files {
		for _, t := range f.Tensors {
			module, role := model.SplitRole(t.Name)
			if t.DType != safetensors.F8_E4M3 || len(t.Shape) != 2 || role != model.RoleWeight {
				continue
			}
			inv, plain := module+".weight_scale_inv", module+".weight_scale"
			_, local := f.Lookup(inv)
			if _, ok := f.Lookup(plain); local || ok {
				continue
			}
			// Only the weights planTransforms decodes.
			expert := opts.classifier().Classify(t.Name) == model.RoutedExperts
			if expert && opts.Experts != ExpertsBF16 || !expert && !r.decodes() {
				continue
			}
			sf, si, ok := src.Lookup(inv)
			if !ok {
				sf, si, ok = src.Lookup(plain)
			}
			if !ok || sf == f {
				continue
			}
			path := filepath.Join(src.Root, sf.Path)
			if held += si.Size(); held > maxForeignScaleBytes {
				return nil, fmt.Errorf("file %s: tensor %s: %w: its scale %s is in %s, and the scales of weights in other shards than their own pass %d MiB: rewrite the shards with each scale beside its weight (and the index's weight_map to match), then run again",
					filepath.Join(src.Root, f.Path), t.Name, errNotQuantizable, si.Name, path, maxForeignScaleBytes>>20)
			}
			b := make([]byte, si.Size())
			if _, err := sf.Section(si).ReadAt(b, 0); err != nil && err != io.EOF {
				return nil, fmt.Errorf("file %s: tensor %s (the scale of %s in %s): read: %w", path, si.Name, t.Name, f.Path, err)
			}
			file(f.Path).in[si.Name] = &foreignScale{weight: t.Name, info: si, file: sf.Path, data: b, sum: sha256.Sum256(b)}
			file(sf.Path).taken[si.Name] = true
		}
	}
	return fs, nil
}

// checkForeign makes sure the files holding fp's foreign scales are as
// planned: their stamps, and with header their header bytes.
func (p *Plan) checkForeign(fp *filePlan, header bool) error {
	for _, x := range fp.foreign {
		for _, other := range p.Files {
			var err error
			switch {
			case other.Name != x.file:
			case header:
				err = checkSource(p.SrcRoot, other)
			default:
				err = checkStampNow(other.Source.ReaderAt(), other.stamp, filepath.Join(p.SrcRoot, other.Name))
			}
			if err != nil {
				return fmt.Errorf("file %s: tensor %s: its scale %s: %w", filepath.Join(p.SrcRoot, fp.Name), x.weight, x.info.Name, err)
			}
		}
	}
	return nil
}
