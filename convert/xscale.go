package convert

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// A block-FP8 weight's scale may sit in another shard: DeepSeek's
// inference/fp8_cast_bf16.py (github.com/deepseek-ai/DeepSeek-V3 @
// 9b4e9788e4a3a731f7567338ed15d3ec549ce03b, main) looks `<name>_scale_inv`
// up through the index's weight_map and loads whichever file holds it. A
// decode to BF16 does the same: the BF16 weight goes to the weight's shard
// and the scale is dropped from its own. The plan reads such a scale's
// bytes once (they are 1/4096 of their weight's codes) and its ID covers
// their sha256, so an output shard depends on the scale's file as on its
// own: a scale changed since a run started makes another plan, which a
// resume, a --worker of the split and verify refuse as such, and the
// weight's shard is written only while the scale's file has the stamp and
// header it was planned with (checkForeign).

// maxForeignScaleBytes bounds the scale bytes a plan holds for weights
// whose scales sit in other shards (a real checkpoint has at most a few
// per shard boundary).
const maxForeignScaleBytes = 64 << 20

// foreignScale is a weight's block scale read from another shard.
type foreignScale struct {
	weight string                 // the FP8 weight's name
	info   safetensors.TensorInfo // the scale tensor as its own file holds it
	file   string                 // that file's path in the checkpoint
	data   []byte                 // its bytes, read when planned
	sum    [sha256.Size]byte
}

// foreignScales are, per source file, the scales of its weights that other
// files hold (by scale name) and the scales it holds for other files'
// weights (dropped from it: the decode consumes them).
type foreignScales struct {
	in    map[string]map[string]*foreignScale
	taken map[string]map[string]bool
}

// decodesFP8 tells whether planTransforms decodes the quantized weight name
// to BF16 under the recipe and options.
func decodesFP8(r *Recipe, opts Options, name string) bool {
	expert := opts.classifier().Classify(name) == model.RoutedExperts
	return expert && opts.Experts == ExpertsBF16 || !expert && r.decodes()
}

// planForeignScales finds every block-FP8 weight the plan decodes whose
// scale (weight_scale_inv, or weight_scale) is not in the weight's file
// but in another shard, and reads that scale. A scale held by no file is
// left to planTransforms, which names it as missing.
func planForeignScales(src *safetensors.Checkpoint, r *Recipe, opts Options) (*foreignScales, error) {
	fs := &foreignScales{in: map[string]map[string]*foreignScale{}, taken: map[string]map[string]bool{}}
	if !r.decodes() && opts.Experts != ExpertsBF16 {
		return fs, nil
	}
	var held int64
	for _, f := range src.Files {
		for _, t := range f.Tensors {
			if t.DType != safetensors.F8_E4M3 || len(t.Shape) != 2 {
				continue
			}
			module, role := model.SplitRole(t.Name)
			if role != model.RoleWeight {
				continue
			}
			inv, plain := module+".weight_scale_inv", module+".weight_scale"
			if _, ok := f.Lookup(inv); ok {
				continue
			}
			if _, ok := f.Lookup(plain); ok {
				continue
			}
			if !decodesFP8(r, opts, t.Name) {
				continue
			}
			sf, si, ok := src.Lookup(inv)
			if !ok {
				if sf, si, ok = src.Lookup(plain); !ok {
					continue
				}
			}
			if sf == f {
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
			x := &foreignScale{weight: t.Name, info: si, file: sf.Path, data: b, sum: sha256.Sum256(b)}
			if fs.in[f.Path] == nil {
				fs.in[f.Path] = map[string]*foreignScale{}
			}
			fs.in[f.Path][si.Name] = x
			if fs.taken[sf.Path] == nil {
				fs.taken[sf.Path] = map[string]bool{}
			}
			fs.taken[sf.Path][si.Name] = true
		}
	}
	return fs, nil
}

// fingerprintLine is what the plan's ID holds of a foreign scale.
func (x *foreignScale) fingerprintLine() []string {
	return []string{"xscale", x.weight, x.info.Name, x.file, hex.EncodeToString(x.sum[:])}
}

// checkForeign makes sure the files that hold fp's foreign scales are
// still what the plan read them from: their stamps, and with header also
// their header bytes (a remote file is checked by every response). A shard
// written from scales of a file that changed since would disagree with
// that file's own output.
func (p *Plan) checkForeign(fp *filePlan, header bool) error {
	for _, x := range fp.foreign {
		for _, other := range p.Files {
			if other.Name != x.file {
				continue
			}
			var err error
			if header {
				err = checkSource(p.SrcRoot, other)
			} else {
				err = checkStampNow(other.Source.ReaderAt(), other.stamp, filepath.Join(p.SrcRoot, other.Name))
			}
			if err != nil {
				return fmt.Errorf("file %s: tensor %s: its scale %s: %w", filepath.Join(p.SrcRoot, fp.Name), x.weight, x.info.Name, err)
			}
		}
	}
	return nil
}
