package model

import (
	"strings"

	"github.com/k3ckpt/k3ckpt/quant"
)

// BlockScales is how an engine convention names and shapes the scale tensor
// of a block-FP8 weight X.weight [N, K]: one F32 scale per 128×128 block.
type BlockScales uint8

const (
	// DeepSeekScales is the DeepSeek-V3 / SGLang "fp8" convention:
	// X.weight_scale_inv [⌈N/128⌉, ⌈K/128⌉].
	DeepSeekScales BlockScales = iota
	// CompressedTensorsScales is vLLM's compressed-tensors block strategy:
	// X.weight_scale [⌈N/128⌉, ⌈K/128⌉].
	CompressedTensorsScales
	// ModelOptScales is NVIDIA ModelOpt's FP8_PB_WO:
	// X.weight_scale [⌈N/128⌉, 1, ⌈K/128⌉, 1].
	ModelOptScales

	numBlockScales = int(ModelOptScales) + 1
)

// blockScaleFacts is the one table of scale names and shapes per convention.
var blockScaleFacts = [numBlockScales]struct {
	role  Role
	fourD bool // [nb, 1, kb, 1] rather than [nb, kb]
}{
	DeepSeekScales:          {RoleScaleInv, false},
	CompressedTensorsScales: {RoleScale, false},
	ModelOptScales:          {RoleScale, true},
}

// Role is the scale tensor's role next to its weight (RoleScaleInv or RoleScale).
func (s BlockScales) Role() Role { return blockScaleFacts[s].role }

// Name is the scale tensor's name for the weight tensor weight (X.weight).
func (s BlockScales) Name(weight string) string {
	return strings.TrimSuffix(weight, "weight") + roleSuffix[s.Role()]
}

// Shape is the scale tensor's shape for an [nb, kb] grid of blocks.
func (s BlockScales) Shape(nb, kb int64) []int64 {
	if blockScaleFacts[s].fourD {
		return []int64{nb, 1, kb, 1}
	}
	return []int64{nb, kb}
}

// BlockScaleOf reports whether name is named as the block-FP8 scale of a
// weight in some convention (X.weight_scale_inv or X.weight_scale) and
// returns that weight's name, X.weight. Whether the weight exists and is
// FP8 is the caller's to check; IsBlockScaleShape checks the shape.
func BlockScaleOf(name string) (weight string, ok bool) {
	module, role := SplitRole(name)
	if role != RoleScaleInv && role != RoleScale || module == "" {
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
	nb := (weight[0] + quant.BlockSize - 1) / quant.BlockSize
	kb := (weight[1] + quant.BlockSize - 1) / quant.BlockSize
	switch len(scale) {
	case 2:
		return scale[0] == nb && scale[1] == kb
	case 4:
		return scale[0] == nb && scale[1] == 1 && scale[2] == kb && scale[3] == 1
	}
	return false
}
