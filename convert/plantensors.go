package convert

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// role is what an output tensor is.
type role = enum[roleSet]

type roleSet struct{}

func (roleSet) set() ([]string, string, string) { return roleNames[:], "Role", "role" }

const (
	roleCopy   role = iota // a source tensor copied byte for byte
	roleWeight             // the FP8 E4M3 codes of a quantized weight
	roleScale              // the fp32 block scales of a quantized weight
	roleNVFP4              // an NVFP4 expert tensor (nvfp4Specs) cast from weight_packed
	roleBF16               // a quantized weight decoded to BF16
	roleMXFP4              // weight_packed or weight_scale of a BF16 weight packed to MXFP4
)

var roleNames = [...]string{roleCopy: "copy", roleWeight: "fp8", roleScale: "scale", roleNVFP4: "nvfp4", roleBF16: "bf16", roleMXFP4: "mxfp4"}

// Options are the choices that shape the output checkpoint.
type Options struct {
	Format    model.Format    // the engine convention of scale names, shapes and config
	ScaleFmt  quant.ScaleFmt  // plain fp32 or power-of-two (UE8M0) block scales
	NonFinite nonFinitePolicy // what a NaN or Inf in a weight to quantize does
	Experts   ExpertsMode     // keep, cast (NVFP4, FP8), decode (BF16) or pack (MXFP4) routed experts
	Numerics  quant.Numerics  // the block-FP8 cast: DeepGEMM's or ModelOpt's

	cls *model.Classifier // the source family's (NewPlan sets it); nil: Kimi-K3's
}

// classifier is the classifier names are read with.
func (o Options) classifier() *model.Classifier { return cmp.Or(o.cls, k3Classifier) }

// k3Classifier reads names with Kimi-K3's public schedule.
var k3Classifier = model.K3Classifier()

// outputTensor is one tensor of the output and the source tensor its bytes
// come from (a copy's Shape shares the source spec's array).
type outputTensor struct {
	safetensors.TensorSpec
	Source string
	Role   role

	src  int32   // 1 + the source's index among PlanTensors' specs, 0 if unknown
	xf   *xfSpec // the transform of a RoleBF16 or RoleMXFP4 output
	part int     // which of xf's outputs, or of nvfp4Specs
}

// sourceIn finds the output's source tensor in f.
func (o outputTensor) sourceIn(f *safetensors.File) (safetensors.TensorInfo, bool) {
	if i := int(o.src) - 1; i >= 0 && i < len(f.Tensors) && f.Tensors[i].Name == o.Source {
		return f.Tensors[i], true
	}
	return f.Lookup(o.Source)
}

// quantizableDTypes are the source dtypes block quantization reads.
var quantizableDTypes = map[safetensors.DType]bool{safetensors.BF16: true, safetensors.F16: true, safetensors.F32: true}

// PlanTensors decides every output tensor from the source specs alone, in
// input order (a quantized weight's FP8 codes, then its scale). It is pure
// and cheap, for header-only tools (inspect --recipe).
func PlanTensors(r *Recipe, in []safetensors.TensorSpec, opts Options) ([]outputTensor, error) {
	return planTensors(r, in, opts, fileScales{})
}

// fileScales is what one file shares with the others: the scales of its FP8
// weights they hold (by name), and its tensors their weights consume.
type fileScales struct {
	in    map[string]*foreignScale
	taken map[string]bool
}

// planTensors is PlanTensors for one file of a checkpoint.
func planTensors(r *Recipe, in []safetensors.TensorSpec, opts Options, fx fileScales) ([]outputTensor, error) {
	if int(opts.Format) >= numFormats {
		return nil, fmt.Errorf("%w: %v", errUnknownFormat, opts.Format)
	}
	// Room for what real shards make, so that out never regrows: a scale per
	// quantized weight, or four NVFP4 tensors for two MXFP4 ones.
	n := len(in) + len(in)/8 + 16
	if opts.Experts == ExpertsNVFP4 || opts.Experts == ExpertsFP8 {
		n = 2*len(in) + 16
	}
	out := make([]outputTensor, 0, n)
	xf, consumed, err := planTransforms(r, in, opts, fx)
	if err != nil {
		return nil, fmt.Errorf("recipe %s, experts %s: %w", r.Name, opts.Experts, err)
	}
	quantized := map[string]string{} // X.weight's scale name → X.weight
	var names map[string]safetensors.TensorSpec
	if opts.Experts == ExpertsFP8 {
		names = specsByName(in)
	}
	for i, s := range in {
		src := int32(i + 1)
		if consumed[s.Name] || fx.taken[s.Name] {
			continue
		}
		if x := xf[s.Name]; x != nil {
			role := roleBF16
			if x.kind == xfPack {
				role = roleMXFP4
			}
			for part, o := range x.outs {
				out = append(out, outputTensor{TensorSpec: o, Source: s.Name, Role: role, src: src, xf: x, part: part})
			}
			continue
		}
		if opts.Experts == ExpertsFP8 {
			o, handled, err := fp8ExpertOutputs(s, src, names, opts)
			if err != nil {
				return nil, fmt.Errorf("recipe %s, experts %s: %w", r.Name, opts.Experts, err)
			}
			if handled {
				out = append(out, o...)
				continue
			}
		}
		if opts.Experts == ExpertsNVFP4 {
			if base, packed, ok := opts.classifier().MXFP4Part(s.Name); ok {
				if !packed {
					continue // the MXFP4 scales are consumed by the cast
				}
				specs, ok := nvfp4Specs(base, s)
				if !ok {
					return nil, fmt.Errorf("tensor %s: %w: %s %v is not MXFP4 packed codes", s.Name, errNotQuantizable, s.DType, s.Shape)
				}
				for part, o := range specs {
					out = append(out, outputTensor{TensorSpec: o, Source: s.Name, Role: roleNVFP4, src: src, part: part})
				}
				continue
			}
		}
		// The built-in recipes name Kimi-K3's groups, which another family
		// meets through the spellings K3 shares: its names are read as K3's.
		switch r.classify(k3Classifier, s.Name) {
		case keep, decode:
			out = append(out, outputTensor{TensorSpec: s, Source: s.Name, Role: roleCopy, src: src})
		case quantize:
			if err := checkQuantizable(s); err != nil {
				return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
			}
			if opts.Numerics == quant.ModelOpt && s.DType != safetensors.BF16 {
				return nil, fmt.Errorf("recipe %s: tensor %s: %w: --numerics modelopt reproduces ModelOpt's cast of BF16 weights, not %s", r.Name, s.Name, errNotQuantizable, s.DType)
			}
			q := fp8Outputs(s.Name, src, s.Name, s.Shape[0], s.Shape[1], opts.Format)
			out = append(out, q...)
			scale := q[1].Name
			if prev, dup := quantized[scale]; dup {
				return nil, fmt.Errorf("tensor %s: %w: its scale %s is also %s's", s.Name, errNameCollision, scale, prev)
			}
			quantized[scale] = s.Name
		}
	}
	// A scale name can only collide with a source tensor's.
	for _, s := range in {
		if w, ok := quantized[s.Name]; ok {
			return nil, fmt.Errorf("tensor %s: %w: the source already holds %s (is it already converted?)", w, errNameCollision, s.Name)
		}
	}
	return out, nil
}

// fp8Outputs are the FP8 codes name [n, k] that quantize source tensor
// (index src-1) makes, and their block scales.
func fp8Outputs(source string, src int32, name string, n, k int64, f model.Format) []outputTensor {
	return []outputTensor{
		{TensorSpec: safetensors.TensorSpec{Name: name, DType: weightDType, Shape: []int64{n, k}}, Source: source, Role: roleWeight, src: src},
		{TensorSpec: safetensors.TensorSpec{Name: f.ScaleName(name), DType: scaleDType, Shape: f.ScaleShape(n, k)}, Source: source, Role: roleScale, src: src},
	}
}

// checkQuantizable rejects weights block quantization cannot take.
func checkQuantizable(s safetensors.TensorSpec) error {
	switch {
	case !quantizableDTypes[s.DType]:
		return fmt.Errorf("tensor %s: %w: dtype %s (want BF16, F16 or F32)", s.Name, errNotQuantizable, s.DType)
	case len(s.Shape) != 2:
		return fmt.Errorf("tensor %s: %w: shape %v is not 2-D", s.Name, errNotQuantizable, s.Shape)
	case !strings.HasSuffix(s.Name, ".weight"):
		return fmt.Errorf("tensor %s: %w: a scale can only be named after a tensor called X.weight", s.Name, errNotQuantizable)
	}
	return nil
}
