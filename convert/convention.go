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

// ParseFormat maps a --format name to its model.Format, the engine
// convention an FP8 checkpoint is written in (the name and shape of each
// scale tensor; the quantization config each convention writes is
// qconfig.go's).
func ParseFormat(s string) (model.Format, error) {
	var f model.Format
	if err := f.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%w: %v", errUnknownFormat, err)
	}
	return f, nil
}

// blocks is the number of 128-wide blocks covering n, ⌈n/128⌉.
func blocks(n int64) int64 { return (n + blockSize - 1) / blockSize }

// scaleDType is the dtype of every scale tensor: fp32 in all three
// conventions (with UE8M0 the values are powers of two, still stored as fp32).
const scaleDType = safetensors.F32

// weightDType is the dtype of every quantized weight.
const weightDType = safetensors.F8_E4M3

// ParseScaleFmt maps a --scale-fmt name ("fp32", "ue8m0") to the quant
// package's scale format, the one definition of that choice.
func ParseScaleFmt(s string) (quant.ScaleFmt, error) {
	return parseName[quant.ScaleFmt]("scale format", s, numScaleFmts)
}

// numScaleFmts is how many quant.ScaleFmt values there are.
const numScaleFmts = int(quant.ScaleUE8M0) + 1

// nonFinitePolicy says what to do with NaN or ±Inf in a weight to quantize.
type nonFinitePolicy = enum[policySet]

type policySet struct{}

func (policySet) set() ([]string, string, string) {
	return policyNames[:], "NonFinitePolicy", "non-finite policy"
}

const (
	// nonFiniteError stops with an error naming the tensor and block.
	nonFiniteError nonFinitePolicy = iota
	// nonFiniteZero replaces each non-finite source value by 0 before
	// quantizing, on the user's explicit request; the count is reported.
	nonFiniteZero
)

var policyNames = [...]string{nonFiniteError: "error", nonFiniteZero: "zero"}

// recordedPolicy is the policy as the plan state and manifest record it:
// only the non-default policy is written, so that a default conversion's
// manifest is unchanged.
func recordedPolicy(p nonFinitePolicy) string {
	if p == nonFiniteZero {
		return p.String()
	}
	return ""
}

// parseNonFinitePolicy maps a --nonfinite name to its policy.
func parseNonFinitePolicy(s string) (nonFinitePolicy, error) { return parseEnum[policySet](s) }
