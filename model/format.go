package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/quant"
)

// Format is an engine convention for block-FP8 weights, as --format names
// it: how the scale tensor of X.weight [N, K] is named and shaped (one F32
// scale per 128×128 block).
type Format uint8

const (
	// DeepSeek is the DeepSeek-V3 / SGLang "fp8" convention:
	// X.weight_scale_inv [⌈N/128⌉, ⌈K/128⌉].
	DeepSeek Format = iota
	// CompressedTensors is vLLM's compressed-tensors block strategy:
	// X.weight_scale [⌈N/128⌉, ⌈K/128⌉].
	CompressedTensors
	// ModelOpt is NVIDIA ModelOpt's FP8_PB_WO:
	// X.weight_scale [⌈N/128⌉, 1, ⌈K/128⌉, 1].
	ModelOpt

	numFormats = int(ModelOpt) + 1
)

// formatFacts is the one table of names, scale names and shapes per
// convention.
var formatFacts = [numFormats]struct {
	name   string
	method string // quant_method of the config a conversion writes
	role   Role   // the scale's, roleScaleInv or roleScale
	fourD  bool   // [nb, 1, kb, 1] rather than [nb, kb]
}{
	DeepSeek:          {"deepseek", quantFP8, roleScaleInv, false},
	CompressedTensors: {"compressed-tensors", compressedTensors, roleScale, false},
	ModelOpt:          {"modelopt", quantModelOptMixed, roleScale, true},
}

// String is the convention's name as given to --format.
func (f Format) String() string {
	if int(f) < numFormats {
		return formatFacts[f].name
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// MarshalText writes the name.
func (f Format) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText parses a name as given to --format.
func (f *Format) UnmarshalText(b []byte) error {
	names := make([]string, numFormats)
	for i, ff := range formatFacts {
		if ff.name == string(b) {
			*f = Format(i)
			return nil
		}
		names[i] = ff.name
	}
	return fmt.Errorf("convention %q (known: %s)", b, strings.Join(names, ", "))
}

// QuantMethod is the quant_method of the quantization_config a conversion
// in this convention writes.
func (f Format) QuantMethod() string { return formatFacts[f].method }

// ScaleName is the scale tensor's name for the weight tensor weight (X.weight).
func (f Format) ScaleName(weight string) string {
	return strings.TrimSuffix(weight, "weight") + roleSuffix[formatFacts[f].role]
}

// ScaleShape is the scale tensor's shape for an [n, k] weight.
func (f Format) ScaleShape(n, k int64) []int64 {
	nb := (n + quant.BlockSize - 1) / quant.BlockSize
	kb := (k + quant.BlockSize - 1) / quant.BlockSize
	if formatFacts[f].fourD {
		return []int64{nb, 1, kb, 1}
	}
	return []int64{nb, kb}
}

// BlockScaleOf reports whether name is named as the block-FP8 scale of a
// weight in some convention (X.weight_scale_inv or X.weight_scale) and
// returns X.weight; the caller checks the weight and the shape.
func BlockScaleOf(name string) (weight string, ok bool) {
	module, role := SplitRole(name)
	if role != roleScaleInv && role != roleScale || module == "" {
		return "", false
	}
	return module + "." + roleSuffix[RoleWeight], true
}

// IsBlockScaleShape reports whether scale is the shape a block-FP8 scale of
// a 2-D weight of shape weight takes in some convention: [⌈N/128⌉, ⌈K/128⌉]
// or ModelOpt's [⌈N/128⌉, 1, ⌈K/128⌉, 1].
func IsBlockScaleShape(scale, weight []int64) bool {
	if len(weight) != 2 || weight[0] < 0 || weight[1] < 0 {
		return false
	}
	return slices.Equal(scale, DeepSeek.ScaleShape(weight[0], weight[1])) || slices.Equal(scale, ModelOpt.ScaleShape(weight[0], weight[1]))
}
