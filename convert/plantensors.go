package convert

import (
	"fmt"
	"slices"
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
	// roleCopy is a source tensor copied byte for byte.
	roleCopy role = iota
	// roleWeight is the FP8 E4M3 codes of a quantized weight.
	roleWeight
	// roleScale is the fp32 block scales of a quantized weight.
	roleScale
	// roleNVFP4 is an NVFP4 expert tensor cast from an MXFP4 projection
	// (Source is its weight_packed): codes, E4M3 block scales, the fp32
	// second-level scale or the fp32 input scale, in nvfp4Specs order.
	roleNVFP4
	// roleBF16 is a quantized weight decoded to BF16 (Source is its codes).
	roleBF16
	// roleMXFP4 is weight_packed or weight_scale of a BF16 weight packed to
	// MXFP4 (Source is the BF16 weight).
	roleMXFP4
)

var roleNames = [...]string{roleCopy: "copy", roleWeight: "fp8", roleScale: "scale", roleNVFP4: "nvfp4", roleBF16: "bf16", roleMXFP4: "mxfp4"}

// Options are the choices that shape the output checkpoint.
type Options struct {
	// Format is the engine convention of scale names, shapes and config.
	Format model.Format
	// ScaleFmt chooses plain fp32 or power-of-two (UE8M0) block scales.
	ScaleFmt quant.ScaleFmt
	// NonFinite decides what a NaN or Inf in a weight to quantize does.
	NonFinite nonFinitePolicy
	// Experts keeps the routed experts, casts them (NVFP4, block FP8), decodes
	// them to BF16 or packs BF16 ones to MXFP4.
	Experts ExpertsMode
	// Numerics chooses the block-FP8 cast (DeepGEMM's or ModelOpt's).
	Numerics quant.Numerics

	// cls reads names as the source config's family does (NewPlan sets
	// it); nil reads them as Kimi-K3's.
	cls *model.Classifier
}

// classifier is the classifier names are read with: the source config's,
// Kimi-K3's when the options were not planned from a config.
func (o Options) classifier() *model.Classifier {
	if o.cls != nil {
		return o.cls
	}
	return k3Classifier
}

// k3Classifier reads names with Kimi-K3's public schedule.
var k3Classifier = model.K3Classifier()

// outputTensor is one tensor of the output and where its bytes come from. The
// Shape shares its backing array with the source spec for copied tensors.
type outputTensor struct {
	safetensors.TensorSpec
	// Source is the source tensor's name: the tensor itself for a copy, the
	// BF16/F16/F32 weight for both outputs of a quantized weight.
	Source string
	// SourceDType and SourceShape describe the source tensor.
	SourceDType safetensors.DType
	SourceShape []int64
	Role        role

	src  int32   // 1 + the source's index among PlanTensors' specs, 0 if unknown
	xf   *xfSpec // the transform of a RoleBF16 or RoleMXFP4 output
	part int     // which of xf's outputs
}

// sourceIn finds the output's source tensor in f, whose tensors were the
// specs it was planned from (in order) when it was planned from a file's.
func (o outputTensor) sourceIn(f *safetensors.File) (safetensors.TensorInfo, bool) {
	if i := int(o.src) - 1; i >= 0 && i < len(f.Tensors) && f.Tensors[i].Name == o.Source {
		return f.Tensors[i], true
	}
	return f.Lookup(o.Source)
}

// quantizableDTypes are the source dtypes block quantization reads.
var quantizableDTypes = map[safetensors.DType]bool{safetensors.BF16: true, safetensors.F16: true, safetensors.F32: true}

// PlanTensors decides every output tensor from the source specs alone: copies
// for tensors the recipe keeps, an FP8 weight plus its scale tensor for each
// weight it quantizes, nothing for dropped ones. Outputs follow the input order
// (a quantized weight's FP8 codes, then its scale). It is pure and cheap, so
// header-only tools (inspect --recipe) can call it on a whole checkpoint.
func PlanTensors(r *Recipe, in []safetensors.TensorSpec, opts Options) ([]outputTensor, error) {
	return planTensors(r, in, opts, fileScales{})
}

// fileScales is what planning one file of a checkpoint knows of the others:
// the scales of its FP8 weights that other files hold (by scale name), and
// its tensors that other files' decoded weights consume.
type fileScales struct {
	in    map[string]*foreignScale
	taken map[string]bool
}

// planTensors is PlanTensors for one file of a checkpoint whose FP8
// weights may have their scales in other files.
func planTensors(r *Recipe, in []safetensors.TensorSpec, opts Options, fx fileScales) ([]outputTensor, error) {
	if int(opts.Format) >= numFormats {
		return nil, fmt.Errorf("%w: %v", errUnknownFormat, opts.Format)
	}
	// The built-in recipes name Kimi-K3's groups, and another family's
	// tensors meet them through the spellings K3 shares (Qwen3-MoE's
	// self_attn.*_proj are K3's KDA names): they are read as K3's.
	classify := r.memoClassifier(k3Classifier)
	// Room for what real shards make, so that out never regrows: a weight
	// quantized adds its scale (a few per hundred tensors of a layer), an
	// MXFP4 projection cast to NVFP4 is four tensors for two.
	n := len(in) + len(in)/8 + 16
	if opts.Experts == ExpertsNVFP4 || opts.Experts == ExpertsFP8 {
		n = 2*len(in) + 16
	}
	out := make([]outputTensor, 0, n)
	xf, consumed, err := planTransforms(r, in, opts, fx)
	if err != nil {
		return nil, fmt.Errorf("recipe %s, experts %s: %w", r.Name, opts.Experts, err)
	}
	var quantized map[string]string // X.weight's scale name → X.weight
	var names map[string]safetensors.TensorSpec
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
				out = append(out, outputTensor{TensorSpec: o, Source: s.Name, SourceDType: s.DType, SourceShape: s.Shape, Role: role, src: src, xf: x, part: part})
			}
			continue
		}
		if opts.Experts == ExpertsFP8 {
			if names == nil {
				names = specsByName(in)
			}
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
				for _, o := range specs {
					out = append(out, outputTensor{TensorSpec: o, Source: s.Name, SourceDType: s.DType, SourceShape: s.Shape, Role: roleNVFP4, src: src})
				}
				continue
			}
		}
		switch classify(s.Name) {
		case drop:
		case keep, decode:
			out = append(out, outputTensor{TensorSpec: s, Source: s.Name, SourceDType: s.DType, SourceShape: s.Shape, Role: roleCopy, src: src})
		case quantize:
			if err := checkQuantizable(s); err != nil {
				return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
			}
			if opts.Numerics == quant.ModelOpt && s.DType != safetensors.BF16 {
				return nil, fmt.Errorf("recipe %s: tensor %s: %w: --numerics modelopt reproduces ModelOpt's cast of BF16 weights, not %s", r.Name, s.Name, errNotQuantizable, s.DType)
			}
			n, k := s.Shape[0], s.Shape[1]
			scale := opts.Format.ScaleName(s.Name)
			out = append(out,
				outputTensor{TensorSpec: safetensors.TensorSpec{Name: s.Name, DType: weightDType, Shape: s.Shape}, Source: s.Name, SourceDType: s.DType, SourceShape: s.Shape, Role: roleWeight, src: src},
				outputTensor{TensorSpec: safetensors.TensorSpec{Name: scale, DType: scaleDType, Shape: opts.Format.ScaleShape(n, k)}, Source: s.Name, SourceDType: s.DType, SourceShape: s.Shape, Role: roleScale, src: src})
			if quantized == nil {
				quantized = make(map[string]string)
			}
			if prev, dup := quantized[scale]; dup {
				return nil, fmt.Errorf("tensor %s: %w: its scale %s is also %s's", s.Name, errNameCollision, scale, prev)
			}
			quantized[scale] = s.Name
		}
	}
	// A scale name can only collide with a source tensor of the same name
	// (source names are unique): scan the names ending like a scale.
	if len(quantized) > 0 {
		role := opts.Format.Role()
		for _, s := range in {
			if _, r := model.SplitRole(s.Name); r != role {
				continue
			}
			if w, ok := quantized[s.Name]; ok && classify(s.Name) != drop {
				return nil, fmt.Errorf("tensor %s: %w: the source already holds %s (is it already converted?)", w, errNameCollision, s.Name)
			}
		}
	}
	return out, nil
}

// checkQuantizable rejects weights block quantization cannot take: it reads
// 2-D BF16/F16/F32 matrices named X.weight (the scale is named after them).
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

// memoClassifier returns a classifier that remembers its answers per name
// skeleton (every ASCII digit replaced by '#'). Half a million K3 names have
// a few dozen skeletons, so this turns ~2.5M regexp runs into map lookups. It
// is exact when no rule pattern mentions a digit: RE2 patterns without digit
// literals cannot tell two digits apart, and the skeleton keeps positions.
// Otherwise every name goes through the rules.
func (r *Recipe) memoClassifier(cls *model.Classifier) func(string) action {
	// With groups, the action depends on the layer number (o_proj and
	// g_proj are KDA or MLA by the schedule); the schema's parser is as
	// cheap as the memo.
	if r.Quantize != 0 || slices.ContainsFunc(r.Rules, func(rule rule) bool { return strings.ContainsAny(rule.Pattern, "0123456789") }) {
		return func(name string) action { a, _ := r.classify(cls, name); return a }
	}
	memo := make(map[string]action, 64)
	var buf []byte
	return func(name string) action {
		buf = append(buf[:0], name...)
		for i, c := range buf {
			if c >= '0' && c <= '9' {
				buf[i] = '#'
			}
		}
		if a, ok := memo[string(buf)]; ok {
			return a
		}
		a, _ := r.classify(cls, name)
		memo[string(buf)] = a
		return a
	}
}
