package convert

import (
	"fmt"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// blockSize is the edge of a quantization block: one scale per 128×128 weights.
const blockSize = quant.BlockSize

// Format is the engine convention an FP8 checkpoint is written in: the name and
// shape of each scale tensor and the shape of the quantization config.
type Format uint8

const (
	// DeepSeek is the DeepSeek-V3 / SGLang "fp8" convention: X.weight_scale_inv
	// F32 [⌈N/128⌉, ⌈K/128⌉], quant_method "fp8" in config.json.
	DeepSeek Format = iota
	// CompressedTensors is vLLM's compressed-tensors convention: X.weight_scale
	// F32 [⌈N/128⌉, ⌈K/128⌉], a float-quantized config group with strategy "block".
	CompressedTensors
	// ModelOpt is NVIDIA ModelOpt's FP8_PB_WO (TensorRT-LLM, tokenspeed):
	// X.weight_scale F32 [⌈N/128⌉, 1, ⌈K/128⌉, 1] and hf_quant_config.json with
	// quant_algo MIXED_PRECISION.
	ModelOpt

	numFormats = int(ModelOpt) + 1
)

// formatFacts names each convention and its scale tensors' names and shapes
// (the schema's table).
var formatFacts = [numFormats]struct {
	name   string
	scales model.BlockScales
}{
	DeepSeek:          {"deepseek", model.DeepSeekScales},
	CompressedTensors: {"compressed-tensors", model.CompressedTensorsScales},
	ModelOpt:          {"modelopt", model.ModelOptScales},
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

// UnmarshalText parses a name.
func (f *Format) UnmarshalText(b []byte) error {
	v, err := ParseFormat(string(b))
	if err == nil {
		*f = v
	}
	return err
}

// ParseFormat maps a --format name to its Format.
func ParseFormat(s string) (Format, error) {
	names := make([]string, numFormats)
	for i, ff := range formatFacts {
		if ff.name == s {
			return Format(i), nil
		}
		names[i] = ff.name
	}
	return 0, fmt.Errorf("%w: convention %q (known: %s)", ErrUnknownFormat, s, strings.Join(names, ", "))
}

// ScaleName is the name of the scale tensor of weight tensor name (X.weight).
func (f Format) ScaleName(weight string) string {
	return formatFacts[f].scales.Name(weight)
}

// ScaleShape is the scale tensor's shape for an [n, k] weight.
func (f Format) ScaleShape(n, k int64) []int64 {
	return formatFacts[f].scales.Shape(blocks(n), blocks(k))
}

// blocks is the number of 128-wide blocks covering n (quant.NumBlocks for int64 sizes).
func blocks(n int64) int64 { return (n + blockSize - 1) / blockSize }

// scaleDType is the dtype of every scale tensor: fp32 in all three
// conventions (with UE8M0 the values are powers of two, still stored as fp32).
const scaleDType = safetensors.F32

// WeightDType is the dtype of every quantized weight.
const WeightDType = safetensors.F8_E4M3

// ParseScaleFmt maps a --scale-fmt name ("fp32", "ue8m0") to the quant
// package's scale format, the one definition of that choice.
func ParseScaleFmt(s string) (quant.ScaleFmt, error) {
	var names []string
	for f := range quant.ScaleFmt(numScaleFmts) {
		if f.String() == s {
			return f, nil
		}
		names = append(names, f.String())
	}
	return 0, fmt.Errorf("%w: scale format %q (known: %s)", ErrUnknownFormat, s, strings.Join(names, ", "))
}

// numScaleFmts is how many quant.ScaleFmt values there are.
const numScaleFmts = int(quant.ScaleUE8M0) + 1

// nonFinitePolicy says what to do with NaN or ±Inf in a weight to quantize.
type nonFinitePolicy uint8

const (
	// NonFiniteError stops with an error naming the tensor and block.
	NonFiniteError nonFinitePolicy = iota
	// nonFiniteZero replaces each non-finite source value by 0 before
	// quantizing, on the user's explicit request; the count is reported.
	nonFiniteZero

	numPolicies = int(nonFiniteZero) + 1
)

var policyNames = [numPolicies]string{NonFiniteError: "error", nonFiniteZero: "zero"}

// String is the --nonfinite name.
func (p nonFinitePolicy) String() string {
	if int(p) < numPolicies {
		return policyNames[p]
	}
	return fmt.Sprintf("NonFinitePolicy(%d)", uint8(p))
}

// MarshalText writes the name.
func (p nonFinitePolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText parses a name.
func (p *nonFinitePolicy) UnmarshalText(b []byte) error {
	v, err := ParseNonFinitePolicy(string(b))
	if err == nil {
		*p = v
	}
	return err
}

// ParseNonFinitePolicy maps a --nonfinite name to its policy.
func ParseNonFinitePolicy(s string) (nonFinitePolicy, error) {
	for i, n := range policyNames {
		if n == s {
			return nonFinitePolicy(i), nil
		}
	}
	return 0, fmt.Errorf("%w: non-finite policy %q (known: %s)", ErrUnknownFormat, s, strings.Join(policyNames[:], ", "))
}
