package convert

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// xfKind is how a transform step turns its source tensors into its output.
type xfKind uint8

const (
	xfFP8   xfKind = iota // block-FP8 codes F8_E4M3 [N, K] and their 128×128 block scales to BF16
	xfMXFP4               // MXFP4 (or DeepSeek-V4's FP4: I8 codes, F8_E8M0 scales) to BF16
	xfNVFP4               // NVFP4 (weight, weight_scale, weight_scale_2) to BF16
	xfPack                // BF16 [N, K] to MXFP4: part 0 weight_packed, part 1 weight_scale
)

// transform is what a StepDecode or StepPack reads and the shape [n, k] of
// the BF16 matrix.
type transform struct {
	kind  xfKind
	codes safetensors.TensorInfo // FP8 codes, packed E2M1 codes, or the BF16 weight (pack)
	// scales are an FP8 source's block scales (row-major F32 or F8_E8M0,
	// one per 128×128 block, or DeepGEMM's packed UE8M0 I32 buffer), or FP4
	// codes' group scales; not for pack.
	scales safetensors.TensorInfo
	scale2 safetensors.TensorInfo // NVFP4's weight_scale_2
	n, k   int64
	part   int        // pack: 0 weight_packed, 1 weight_scale
	held   bool       // pack: the pair's first step keeps this part's bytes for it
	pair   *transform // pack: the other part's step
	xscale []byte     // the scales' bytes when another file holds them
}

// xfSpec is a planned transform before the file's offsets are known.
type xfSpec struct {
	kind     xfKind
	sources  []string // codes, then scales, then scale_2
	outs     []safetensors.TensorSpec
	consumed []string      // companions the output no longer holds
	foreign  *foreignScale // an FP8 weight's scale in another file
}

// decodes reports whether the recipe decodes quantized weights to BF16.
func (r *Recipe) decodes() bool { return r.Default == decode }

// planTransforms finds, among one file's specs, every quantized weight to
// decode to BF16 and every BF16 expert to pack to MXFP4, with the companions
// each consumes; fx.in adds the scales other files hold.
func planTransforms(r *Recipe, in []safetensors.TensorSpec, opts Options, fx fileScales) (map[string]*xfSpec, map[string]bool, error) {
	if !r.decodes() && opts.Experts != ExpertsBF16 && opts.Experts != ExpertsMXFP4 {
		return nil, nil, nil
	}
	byName := specsByName(in)
	for name, x := range fx.in {
		if _, ok := byName[name]; !ok {
			byName[name] = safetensors.TensorSpec{Name: name, DType: x.info.DType, Shape: x.info.Shape}
		}
	}
	xf := map[string]*xfSpec{}
	consumed := map[string]bool{}
	for _, s := range in {
		module, role := model.SplitRole(s.Name)
		if role != model.RoleWeight && role != model.RolePacked {
			continue
		}
		expert := opts.classifier().Classify(s.Name) == model.RoutedExperts
		var x *xfSpec
		var err error
		switch {
		case expert && opts.Experts == ExpertsMXFP4:
			x, err = packSpec(module, s)
		case expert && opts.Experts == ExpertsBF16, !expert && r.decodes():
			x, err = decodeSpec(module, s, byName)
			if err == nil && x == nil && expert && opts.Experts == ExpertsBF16 && !quantizableDTypes[s.DType] {
				err = fmt.Errorf("tensor %s: %w: --experts bf16 decodes MXFP4 (%s.weight_packed), NVFP4 and block-FP8 (%s.weight_scale_inv or weight_scale) experts and DeepSeek-V4's FP4 ones (I8 codes with an F8_E8M0 %s.scale), not %s %v with these companions; nothing was written",
					s.Name, errNotQuantizable, module, module, module, s.DType, s.Shape)
			}
		}
		if err != nil {
			return nil, nil, err
		}
		if x == nil {
			continue
		}
		if x.kind == xfFP8 {
			if f := fx.in[x.sources[1]]; f != nil && f.weight == s.Name {
				x.foreign = f
			}
		}
		xf[s.Name] = x
		for _, c := range x.consumed {
			consumed[c] = true
		}
	}
	return xf, consumed, nil
}

// decodeSpec plans the BF16 decode of weight s (nil when s is not quantized).
func decodeSpec(module string, s safetensors.TensorSpec, byName map[string]safetensors.TensorSpec) (*xfSpec, error) {
	all := slices.DeleteFunc([]string{module + ".weight_scale", module + ".weight_scale_inv", module + ".weight_scale_2", module + ".input_scale",
		module + ".weight_global_scale", module + ".input_global_scale", module + ".weight_zero_point", v4ScaleName(module)}, func(n string) bool {
		_, ok := byName[n]
		return !ok
	})
	need := func(name string) (safetensors.TensorSpec, error) {
		t, ok := byName[name]
		if !ok {
			return t, &missingScaleError{s.Name, []string{name}}
		}
		return t, nil
	}
	bf16 := func(kind xfKind, n, k int64, sources ...string) *xfSpec {
		return &xfSpec{kind: kind, sources: sources, consumed: all,
			outs: []safetensors.TensorSpec{{Name: module + ".weight", DType: safetensors.BF16, Shape: []int64{n, k}}}}
	}
	switch {
	case s.DType == safetensors.F8_E4M3 && len(s.Shape) == 2:
		n, k := s.Shape[0], s.Shape[1]
		if n < 1 || k < 1 || k > quant.MaxK || n > quant.MaxK {
			return nil, fmt.Errorf("tensor %s: %w: FP8 matrix %v outside [1, %d]²", s.Name, errNotQuantizable, s.Shape, quant.MaxK)
		}
		var sc safetensors.TensorSpec
		ok := false
		for _, name := range []string{module + ".weight_scale_inv", module + ".weight_scale", v4ScaleName(module)} {
			if sc, ok = byName[name]; ok {
				break
			}
		}
		if !ok {
			return nil, &missingScaleError{s.Name, []string{module + ".weight_scale_inv", module + ".weight_scale"}}
		}
		if err := checkFP8Scales(s, sc); err != nil {
			return nil, err
		}
		if _, ok := byName[module+".weight_zero_point"]; ok {
			return nil, fmt.Errorf("tensor %s: %w: an asymmetric FP8 weight (weight_zero_point) is not block FP8", s.Name, errNotQuantizable)
		}
		return bf16(xfFP8, n, k, s.Name, sc.Name), nil
	case s.DType.String() == "I8" && len(s.Shape) == 2 && roleOfName(s.Name) == model.RoleWeight:
		if _, ok := byName[v4ScaleName(module)]; !ok {
			return nil, nil // not DeepSeek-V4's FP4: no decode (planTransforms refuses an expert's)
		}
		sc, n, k, err := v4FP4Scales(s, byName)
		if err != nil {
			return nil, err
		}
		return bf16(xfMXFP4, n, k, s.Name, sc.Name), nil
	case s.DType == safetensors.U8 && len(s.Shape) == 2 && roleOfName(s.Name) == model.RolePacked:
		n, k := s.Shape[0], 2*s.Shape[1]
		sc, err := need(module + ".weight_scale")
		if err != nil {
			return nil, err
		}
		if sc.DType != safetensors.U8 || len(sc.Shape) != 2 || sc.Shape[0] != n || sc.Shape[1]*quant.MXGroupSize != k {
			return nil, fmt.Errorf("tensor %s: %w: %s %v are not the E8M0 scales of MXFP4 codes %v (want U8 [%d, %d])",
				sc.Name, errNotQuantizable, sc.DType, sc.Shape, s.Shape, n, k/quant.MXGroupSize)
		}
		return bf16(xfMXFP4, n, k, s.Name, sc.Name), nil
	case s.DType == safetensors.U8 && len(s.Shape) == 2:
		n, k := s.Shape[0], 2*s.Shape[1]
		sc, err := need(module + ".weight_scale")
		if err != nil {
			return nil, err
		}
		s2, err := need(module + ".weight_scale_2")
		if err != nil {
			return nil, err
		}
		if sc.DType != safetensors.F8_E4M3 || len(sc.Shape) != 2 || sc.Shape[0] != n || sc.Shape[1]*quant.NVFP4GroupSize != k {
			return nil, fmt.Errorf("tensor %s: %w: %s %v are not the E4M3 scales of NVFP4 codes %v (want F8_E4M3 [%d, %d])",
				sc.Name, errNotQuantizable, sc.DType, sc.Shape, s.Shape, n, k/quant.NVFP4GroupSize)
		}
		if s2.DType != safetensors.F32 || slices.ContainsFunc(s2.Shape, func(d int64) bool { return d != 1 }) { // one element
			return nil, fmt.Errorf("tensor %s: %w: %s %v is not NVFP4's F32 scalar weight_scale_2", s2.Name, errNotQuantizable, s2.DType, s2.Shape)
		}
		return bf16(xfNVFP4, n, k, s.Name, sc.Name, s2.Name), nil
	}
	return nil, nil
}

// missingScaleError: a quantized weight's scale tensor (one of scales, the
// likeliest first) is not in its file; locateScale names the file holding it.
type missingScaleError struct {
	weight string
	scales []string
}

func (e *missingScaleError) Error() string {
	return fmt.Sprintf("tensor %s: %v: its scale tensor %s%s is not in the same file", e.weight, errNotQuantizable, e.scales[0], orNames(e.scales[1:]))
}

func (e *missingScaleError) Unwrap() error { return errNotQuantizable }

// orNames is " (or A, B)", or "" for no names.
func orNames(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " (or " + strings.Join(names, ", ") + ")"
}

// locateScale rewords a missingScaleError to name the file of src holding
// the scale, or to say that none does.
func locateScale(err error, src *safetensors.Checkpoint, file string) error {
	var m *missingScaleError
	if !errors.As(err, &m) {
		return err
	}
	for _, name := range m.scales {
		if f, _, ok := src.Lookup(name); ok {
			return fmt.Errorf("file %s: tensor %s: %w: its scale tensor %s is not in the same file but in %s; convert reads the scales of MXFP4 and NVFP4 weights from the weight's own file: rewrite the two files with %s beside its weight (and the index's weight_map to match), then run again",
				file, m.weight, errNotQuantizable, name, f.Path, name)
		}
	}
	return fmt.Errorf("file %s: tensor %s: %w: its scale tensor %s%s is not in the same file nor in any other shard of the checkpoint: the checkpoint is incomplete or damaged; fetch it again",
		file, m.weight, errNotQuantizable, m.scales[0], orNames(m.scales[1:]))
}

// checkFP8Scales checks that sc holds w's 128×128 block scales in a layout
// some convention writes, or DeepGEMM's packed UE8M0 buffer.
func checkFP8Scales(w, sc safetensors.TensorSpec) error {
	n, k := w.Shape[0], w.Shape[1]
	nb, kb := blocks(n), blocks(k)
	switch {
	case sc.DType == safetensors.F32 && len(sc.Shape) == 2 && sc.Shape[0] == nb && sc.Shape[1] == kb:
	case sc.DType == safetensors.F32 && len(sc.Shape) == 4 && sc.Shape[0] == nb && sc.Shape[1] == 1 && sc.Shape[2] == kb && sc.Shape[3] == 1:
	case isE8M0(sc.DType) && len(sc.Shape) == 2 && sc.Shape[0] == nb && sc.Shape[1] == kb:
	case sc.DType == safetensors.I32 && len(sc.Shape) == 2:
		words, stride := quant.PackedUE8M0Shape(int(n), int(k))
		if sc.Shape[0] != int64(words) || sc.Shape[1] != int64(stride) {
			return fmt.Errorf("tensor %s: %w: packed UE8M0 scales %v of FP8 weight %v, want I32 [%d, %d]", sc.Name, errNotQuantizable, sc.Shape, w.Shape, words, stride)
		}
	default:
		return fmt.Errorf("tensor %s: %w: %s %v are not the block scales of FP8 weight %s %v (want F32 or F8_E8M0 [%d, %d], F32 [%d, 1, %d, 1], or packed UE8M0 I32)",
			sc.Name, errNotQuantizable, sc.DType, sc.Shape, w.Name, w.Shape, nb, kb, nb, kb)
	}
	return nil
}

// packSpec plans the MXFP4 packing of a routed expert's weight s.
func packSpec(module string, s safetensors.TensorSpec) (*xfSpec, error) {
	if roleOfName(s.Name) == model.RolePacked || s.DType == safetensors.U8 {
		return nil, fmt.Errorf("tensor %s: %w: --experts mxfp4 packs BF16 experts, and this one is already packed (%s %v): the source is already mxfp4-pack-quantized", s.Name, errNotQuantizable, s.DType, s.Shape)
	}
	if s.DType != safetensors.BF16 || len(s.Shape) != 2 {
		return nil, fmt.Errorf("tensor %s: %w: --experts mxfp4 packs BF16 [N, K] experts, not %s %v (decode it first with --experts bf16)", s.Name, errNotQuantizable, s.DType, s.Shape)
	}
	n, k := s.Shape[0], s.Shape[1]
	if k%quant.MXGroupSize != 0 || k < 1 || k > quant.MaxK || n < 1 {
		return nil, fmt.Errorf("tensor %s: %w: K = %d is not a positive multiple of %d (MXFP4 groups 32 elements of a row)", s.Name, errNotQuantizable, k, quant.MXGroupSize)
	}
	return &xfSpec{kind: xfPack, sources: []string{s.Name}, outs: []safetensors.TensorSpec{
		{Name: module + ".weight_packed", DType: safetensors.U8, Shape: []int64{n, k / 2}},
		{Name: module + ".weight_scale", DType: safetensors.U8, Shape: []int64{n, k / quant.MXGroupSize}},
	}}, nil
}

// v4ScaleName is DeepSeek-V4's X.scale (inference/model.py Linear: per
// 128×128 block of FP8, per 32 along K of FP4, float8_e8m0fnu).
func v4ScaleName(module string) string { return module + ".scale" }

// v4FP4Scales finds the F8_E8M0 [N, K/32] scale of DeepSeek-V4 FP4 codes s
// (I8 [N, K/2], low nibble first as float4_e2m1fn_x2) and the decoded shape.
func v4FP4Scales(s safetensors.TensorSpec, byName map[string]safetensors.TensorSpec) (safetensors.TensorSpec, int64, int64, error) {
	module, _ := model.SplitRole(s.Name)
	sc, ok := byName[v4ScaleName(module)]
	n, k := s.Shape[0], 2*s.Shape[1]
	if !ok {
		return sc, n, k, fmt.Errorf("tensor %s: %w: DeepSeek-V4 FP4 codes %v without their F8_E8M0 scale %s in the same file", s.Name, errNotQuantizable, s.Shape, v4ScaleName(module))
	}
	if n < 1 || k < quant.MXGroupSize || k > quant.MaxK || k%quant.MXGroupSize != 0 ||
		!isE8M0(sc.DType) || len(sc.Shape) != 2 || sc.Shape[0] != n || sc.Shape[1]*quant.MXGroupSize != k {
		return sc, n, k, fmt.Errorf("tensor %s: %w: %s %v are not the E8M0 scales of DeepSeek-V4 FP4 codes %s %v (want F8_E8M0 [%d, %d], one per 32 codes along K)",
			sc.Name, errNotQuantizable, sc.DType, sc.Shape, s.Name, s.Shape, n, k/quant.MXGroupSize)
	}
	return sc, n, k, nil
}

// isE8M0 reports whether d is F8_E8M0 (torch's float8_e8m0fnu).
func isE8M0(d safetensors.DType) bool { return d.String() == "F8_E8M0" }

// roleOfName is the role a tensor's last name segment gives it.
func roleOfName(name string) model.Role {
	_, r := model.SplitRole(name)
	return r
}

// checkExpertsWay refuses expert modes unfit for the experts config.json declares.
func checkExpertsWay(root string, cfg *model.Config, r *Recipe, opts Options) error {
	cfgPath := filepath.Join(root, model.ConfigName)
	switch {
	case !r.decodes() && cfg.Raw()["model_type"] == "deepseek_v4": // no convention describes X.scale
		return fmt.Errorf("convert %s: %w: --recipe %s keeps DeepSeek-V4's FP8 weights as they are (F8_E4M3 with an F8_E8M0 X.scale), and no --format describes those in the output's config.json: convert DeepSeek-V4 with --recipe bf16 (with --experts bf16 or fp8)",
			root, errNotQuantizable, r.Name)
	case opts.Experts == ExpertsMXFP4 && cfg.Experts == model.ExpertsMXFP4:
		return fmt.Errorf("convert %s: %w: --experts mxfp4 packs BF16 experts, and %s declares them already mxfp4-pack-quantized (compressed-tensors MXFP4): there is nothing to pack; keep them with --experts keep, or decode them with --experts bf16",
			root, errNotQuantizable, cfgPath)
	case opts.Experts == ExpertsMXFP4 && cfg.Experts == model.ExpertsNVFP4:
		return fmt.Errorf("convert %s: %w: --experts mxfp4 packs BF16 experts, and %s declares NVFP4 ones: decode them first (--experts bf16), then pack that", root, errNotQuantizable, cfgPath)
	case r.decodes() && opts.Experts == ExpertsKeep && cfg.Experts == model.ExpertsNVFP4:
		return fmt.Errorf("convert %s: --recipe %s writes a config without a ModelOpt description, which NVFP4 experts need: decode them too (--experts bf16)", root, r.Name)
	case opts.Experts == ExpertsFP8 && cfg.Experts == model.ExpertsNVFP4:
		return fmt.Errorf("convert %s: %w: --experts fp8 casts MXFP4 or BF16 experts, and %s declares NVFP4 ones: decode them first (--experts bf16), then cast that", root, errNotQuantizable, model.ConfigName)
	case opts.Experts == ExpertsFP8 && cfg.Experts == model.ExpertsFP8:
		return fmt.Errorf("convert %s: %w: --experts fp8 casts MXFP4 or BF16 experts, and %s declares them block FP8 already: keep them (--experts keep)", root, errNotQuantizable, model.ConfigName)
	}
	return nil
}
