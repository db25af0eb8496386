package convert

import (
	"fmt"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// undecodedExpert is the error for a routed expert --experts bf16 would
// leave quantized: no decode of its form (I8 codes without DeepSeek-V4's
// X.scale beside them are one), so the output would not be what was asked.
// A float expert (already BF16, F16 or F32) is no error.
func undecodedExpert(module string, s safetensors.TensorSpec) error {
	switch s.DType {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
		return nil
	}
	return fmt.Errorf("tensor %s: %w: --experts bf16 decodes MXFP4 (%s.weight_packed), NVFP4 and block-FP8 (%s.weight_scale_inv or weight_scale) experts and DeepSeek-V4's FP4 ones (I8 codes with an F8_E8M0 %s.scale), not %s %v with these companions; nothing was written",
		s.Name, errNotQuantizable, module, module, module, s.DType, s.Shape)
}
