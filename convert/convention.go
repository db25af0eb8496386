package convert

import (
	"fmt"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// blockSize is the edge of a quantization block: one scale per 128×128 weights.
const blockSize = quant.BlockSize

// The conventions, as --format names them.
const (
	deepSeek          = model.DeepSeek
	compressedTensors = model.CompressedTensors
	modelOpt          = model.ModelOpt
	numFormats        = int(model.ModelOpt) + 1
)

// ParseFormat maps a --format name to its engine convention.
func ParseFormat(s string) (model.Format, error) {
	var f model.Format
	if err := f.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%w: %v", errUnknownFormat, err)
	}
	return f, nil
}

// blocks is ⌈n/128⌉.
func blocks(n int64) int64 { return (n + blockSize - 1) / blockSize }

// The dtypes of quantized weights and their scales in every convention
// (UE8M0 scales are powers of two stored as fp32).
const (
	weightDType = safetensors.F8_E4M3
	scaleDType  = safetensors.F32
)

// ParseScaleFmt maps a --scale-fmt name ("fp32", "ue8m0") to its format.
func ParseScaleFmt(s string) (quant.ScaleFmt, error) {
	return parseName[quant.ScaleFmt]("scale format", s, int(quant.ScaleUE8M0)+1)
}

// nonFinitePolicy says what to do with NaN or ±Inf in a weight to quantize.
type nonFinitePolicy = enum[policySet]

type policySet struct{}

func (policySet) set() ([]string, string, string) {
	return policyNames[:], "NonFinitePolicy", "non-finite policy"
}

const (
	nonFiniteError nonFinitePolicy = iota // an error naming the tensor and block
	nonFiniteZero                         // each replaced by 0 (and counted), on request
)

var policyNames = [...]string{nonFiniteError: "error", nonFiniteZero: "zero"}

// recordedPolicy is the policy as state and manifest record it: only the
// non-default one, so that a default conversion's manifest is unchanged.
func recordedPolicy(p nonFinitePolicy) string {
	if p == nonFiniteZero {
		return p.String()
	}
	return ""
}

// parseNonFinitePolicy maps a --nonfinite name to its policy.
func parseNonFinitePolicy(s string) (nonFinitePolicy, error) { return parseEnum[policySet](s) }
