package convert

import (
	"fmt"

	"github.com/k3ckpt/k3ckpt/internal/remote"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// stepKind is what one step of a shard's program writes.
type stepKind = enum[stepKindSet]

type stepKindSet struct{}

func (stepKindSet) set() ([]string, string, string) { return stepKindNames[:], "StepKind", "step kind" }

const (
	// stepCopy copies a run of kept tensors that lie back to back, in the
	// same order, in the source and in the output.
	stepCopy stepKind = iota
	// stepScales quantizes a weight and writes its scale tensor. Scales
	// (F32) precede the FP8 codes in a canonical file, and the executor
	// hashes the file as it writes it in order, so the codes are held
	// (HoldCodes), spilled to a local file (SpillCodes: a remote source) or
	// made again at their place.
	stepScales
	stepCodes  // a weight's FP8 codes: held, spilled, or quantized again
	stepNVFP4  // one tensor (Part) of an MXFP4 projection cast to NVFP4
	stepDecode // a quantized weight decoded to BF16, chunk by chunk
	stepPack   // one of the two MXFP4 tensors a BF16 weight packs to
)

var stepKindNames = [...]string{stepCopy: "copy", stepScales: "scales", stepCodes: "codes", stepNVFP4: "nvfp4", stepDecode: "decode", stepPack: "pack"}

// nVFP4Part is which of the four NVFP4 tensors of a projection a step writes,
// in nvfp4Specs order.
type nVFP4Part uint8

const (
	partCodes      nVFP4Part = iota // X.weight: the E2M1 codes, U8 [N, K/2]
	partScales                      // X.weight_scale: E4M3 [N, K/16]
	partScale2                      // X.weight_scale_2: F32 [], 2^(K_max − 8)
	partInputScale                  // X.input_scale: F32 [] = 1.0 (no calibration, as NVIDIA's)
)

// castSource is the MXFP4 source of an NVFP4 cast: the packed codes, the
// E8M0 scales, and the scales of the w1/w3 partner sharing K_max (nil for w2).
type castSource struct {
	Packed, Scales safetensors.TensorInfo
	Partner        *safetensors.TensorInfo
}

// k is the number of elements per row.
func (c *castSource) k() int { return int(2 * c.Packed.Shape[1]) }

// kmaxKey names the K_max a cast shares with its partner: the pair's scale
// tensor that sorts first.
func (c *castSource) kmaxKey() string {
	if c.Partner != nil && c.Partner.Name < c.Scales.Name {
		return c.Partner.Name
	}
	return c.Scales.Name
}

// maxRunBytes bounds the tensors one copy run gathers.
const maxRunBytes = 256 << 20

// maxHeldCodes bounds the FP8 codes a job holds in memory between a file's
// scale steps and its code steps. A file whose codes do not fit is quantized
// twice: reading its weights again costs less than reading the output back.
const maxHeldCodes = 32 << 20

// heldCodesBudget is maxHeldCodes, lowered by tests.
var heldCodesBudget int64 = maxHeldCodes

// step is one piece of work on an output shard, decided at plan time. A
// shard's steps write its tensors in file order, each exactly once.
type step struct {
	Kind stepKind
	// First and Last index output tensors in data order: a copy run writes
	// First…Last; StepScales the scale tensor First of the weight Last;
	// StepCodes the FP8 codes First of the weight whose scales are Last.
	First, Last int
	Src, Len    int64 // the source bytes read: absolute offset and length
	// HoldCodes: StepScales keeps the FP8 codes in memory for StepCodes;
	// SpillCodes: they go through a local spill file (a remote source's
	// file whose codes do not fit maxHeldCodes), fetching the weight once.
	HoldCodes, SpillCodes bool
	Source                safetensors.TensorInfo // the weight a scale or code step quantizes
	Part                  nVFP4Part              // a StepNVFP4's tensor
	Cast                  *castSource            // and its source

	xf *transform // what a StepDecode or StepPack reads
}

// planSteps turns a shard's outputs (in data order) into steps in the same
// order: kept tensors whose source bytes are contiguous form one copy run;
// every other output is a step of its own.
func planSteps(cls *model.Classifier, sf *safetensors.File, l *safetensors.FilePlan, outs []outputTensor) ([]step, error) {
	pair := map[string][2]int{} // a quantized weight → its output indices (codes, scale)
	var codes int64
	for i, o := range outs {
		if o.Role == roleWeight || o.Role == roleScale {
			p, ok := pair[o.Source]
			if !ok {
				p = [2]int{-1, -1}
			}
			p[o.Role-roleWeight] = i // roleScale follows roleWeight
			pair[o.Source] = p
		}
		if o.Role == roleWeight {
			codes += l.Tensors[i].Size()
		}
	}
	hold := codes <= heldCodesBudget
	_, fetched := sf.ReaderAt().(*remote.File)
	var steps []step
	casts := map[string]*castSource{}
	for i, o := range outs {
		if o.Role == roleBF16 || o.Role == roleMXFP4 || o.Role == roleNVFP4 {
			var st step
			var err error
			if o.Role == roleNVFP4 {
				st, err = nvfp4Step(cls, sf, o, i, casts)
			} else {
				st, err = transformStep(sf, o, i)
			}
			if err != nil {
				return nil, err
			}
			steps = append(steps, st)
			continue
		}
		src, ok := o.sourceIn(sf)
		if !ok {
			return nil, fmt.Errorf("file %s: tensor %s: %w in the source", sf.Path, o.Source, safetensors.ErrNotFound)
		}
		abs := sf.DataStart + src.Begin
		switch o.Role {
		case roleCopy:
			if src.Size() != l.Tensors[i].Size() {
				return nil, fmt.Errorf("file %s: tensor %s: %w: %d source bytes for %d output bytes", sf.Path, o.Name, safetensors.ErrSizeMismatch, src.Size(), l.Tensors[i].Size())
			}
			if n := len(steps); n > 0 {
				last := &steps[n-1]
				if last.Kind == stepCopy && last.Last == i-1 && last.Src+last.Len == abs && last.Len+src.Size() <= maxRunBytes {
					last.Last, last.Len = i, last.Len+src.Size()
					continue
				}
			}
			steps = append(steps, step{Kind: stepCopy, First: i, Last: i, Src: abs, Len: src.Size()})
		case roleWeight, roleScale:
			p := pair[o.Source]
			if p[0] < 0 || p[1] < 0 {
				return nil, fmt.Errorf("file %s: tensor %s: planned without both its FP8 codes and its scale", sf.Path, o.Source)
			}
			st := step{Kind: stepCodes, First: p[0], Last: p[1], Src: abs, Len: src.Size(), HoldCodes: hold, SpillCodes: !hold && fetched, Source: src}
			if o.Role == roleScale {
				st.Kind, st.First, st.Last = stepScales, p[1], p[0]
			}
			steps = append(steps, st)
		}
	}
	markHeld(steps)
	return steps, nil
}

// nvfp4Step plans the step writing output i, tensor o.part of the NVFP4 cast
// of the MXFP4 projection o.Source (its packed codes). The w1/w3 partner
// whose scales share K_max must lie in the same file, as NVIDIA's converter
// requires.
func nvfp4Step(cls *model.Classifier, sf *safetensors.File, o outputTensor, i int, casts map[string]*castSource) (step, error) {
	base, _, _ := cls.MXFP4Part(o.Source)
	c := casts[base]
	if c == nil {
		c = &castSource{}
		var ok bool
		if c.Packed, ok = sf.Lookup(o.Source); !ok {
			return step{}, fmt.Errorf("file %s: tensor %s: %w in the source", sf.Path, o.Source, safetensors.ErrNotFound)
		}
		scales := mxfp4Scales(base)
		if c.Scales, ok = sf.Lookup(scales); !ok {
			return step{}, fmt.Errorf("file %s: tensor %s: its MXFP4 scales %s: %w in the file", sf.Path, o.Source, scales, safetensors.ErrNotFound)
		}
		n, k := c.Packed.Shape[0], 2*c.Packed.Shape[1]
		if k == 0 || k > quant.MaxK || c.Scales.DType != safetensors.U8 || len(c.Scales.Shape) != 2 || c.Scales.Shape[0] != n || c.Scales.Shape[1]*quant.MXGroupSize != k {
			return step{}, fmt.Errorf("file %s: tensor %s: %w: %s %v are not the E8M0 scales of MXFP4 codes %v (want U8 [%d, %d])",
				sf.Path, scales, errNotQuantizable, c.Scales.DType, c.Scales.Shape, c.Packed.Shape, n, k/quant.MXGroupSize)
		}
		if pb, ok := cls.NVFP4ScalePartner(base); ok {
			ps := mxfp4Scales(pb)
			t, ok := sf.Lookup(ps)
			if !ok {
				return step{}, fmt.Errorf("file %s: tensor %s: %s shares weight_scale_2 with %s (one fused GEMM), whose scales %s are not in the same file",
					sf.Path, o.Source, base, pb, ps)
			}
			if t.DType != safetensors.U8 {
				return step{}, fmt.Errorf("file %s: tensor %s: %w: E8M0 scales of dtype %s", sf.Path, ps, errNotQuantizable, t.DType)
			}
			c.Partner = &t
		}
		casts[base] = c
	}
	st := step{Kind: stepNVFP4, First: i, Last: i, Part: nVFP4Part(o.part), Cast: c}
	switch st.Part {
	case partCodes:
		st.Src, st.Len = sf.DataStart+c.Packed.Begin, c.Packed.Size()
	case partScales, partScale2:
		st.Src, st.Len = sf.DataStart+c.Scales.Begin, c.Scales.Size()
	}
	return st, nil
}

// mxfp4Scales is the E8M0 scale tensor of the MXFP4 expert projection X
// (whose codes are X.weight_packed).
func mxfp4Scales(base string) string { return base + ".weight_scale" }

// nvfp4Specs are the tensors NVIDIA's converter writes in place of the MXFP4
// projection whose codes are packed (X.weight_packed U8 [N, K/2]), in this
// order: X.weight U8 [N, K/2] (the same E2M1 codes), X.weight_scale F8_E4M3
// [N, K/16], X.weight_scale_2 F32 [] and X.input_scale F32 [].
func nvfp4Specs(base string, packed safetensors.TensorSpec) ([4]safetensors.TensorSpec, bool) {
	var out [4]safetensors.TensorSpec
	if packed.DType != safetensors.U8 || len(packed.Shape) != 2 || (2*packed.Shape[1])%quant.NVFP4GroupSize != 0 {
		return out, false
	}
	n, k := packed.Shape[0], 2*packed.Shape[1]
	out[0] = safetensors.TensorSpec{Name: base + ".weight", DType: safetensors.U8, Shape: []int64{n, k / 2}}
	out[1] = safetensors.TensorSpec{Name: base + ".weight_scale", DType: safetensors.F8_E4M3, Shape: []int64{n, k / quant.NVFP4GroupSize}}
	out[2] = safetensors.TensorSpec{Name: base + ".weight_scale_2", DType: safetensors.F32, Shape: []int64{}}
	out[3] = safetensors.TensorSpec{Name: base + ".input_scale", DType: safetensors.F32, Shape: []int64{}}
	return out, true
}
