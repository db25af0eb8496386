package model

import (
	"strings"

	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Quantization methods of the converted configs parseConverted reads.
const (
	// quantModelOptMixed is ModelOpt mixed precision (NVIDIA's Kimi-K3
	// export; SGLang selects its mixed-precision path on exactly this value).
	quantModelOptMixed = "modelopt_mixed"
	// quantFP8 is the DeepSeek-V3 block-FP8 convention.
	quantFP8 = "fp8"
)

// modelOptNVFP4 is the quant_algo of NVFP4 modules in a ModelOpt manifest.
const modelOptNVFP4 = "NVFP4"

// Suffixes of an MXFP4 expert projection's two tensors.
const (
	mxfp4Packed = ".weight_packed"
	mxfp4Scale  = ".weight_scale"
)

// MXFP4Part says whether name is one of the two tensors of an MXFP4 routed
// expert projection (X.weight_packed, X.weight_scale) of the family and
// returns X.
func (c *Classifier) MXFP4Part(name string) (base string, packed, ok bool) {
	if c.Classify(name) != RoutedExperts {
		return "", false, false
	}
	if b, ok := strings.CutSuffix(name, mxfp4Packed); ok {
		return b, true, true
	}
	if b, ok := strings.CutSuffix(name, mxfp4Scale); ok {
		return b, false, true
	}
	return "", false, false
}

// MXFP4Scales is the E8M0 scale tensor of the MXFP4 expert projection X
// (whose codes are X.weight_packed).
func MXFP4Scales(base string) string { return base + mxfp4Scale }

// NVFP4Specs are the tensors NVIDIA's converter writes in place of the MXFP4
// projection whose codes are packed (X.weight_packed U8 [N, K/2]), in this
// order: X.weight U8 [N, K/2] (the same E2M1 codes), X.weight_scale F8_E4M3
// [N, K/16], X.weight_scale_2 F32 [] and X.input_scale F32 [].
func NVFP4Specs(base string, packed safetensors.TensorSpec) ([4]safetensors.TensorSpec, bool) {
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

// NVFP4ScalePartner returns the projection that shares weight_scale_2 with
// the routed-expert projection base (X of X.weight_packed), as the family's
// shared_scale pairs say: w1 and w3 of one K3 expert feed one fused GEMM
// (gate and up), so NVIDIA's cast takes K_max over both; w2 has none (ok
// false).
func (c *Classifier) NVFP4ScalePartner(base string) (string, bool) {
	if c.Classify(base+mxfp4Packed) != RoutedExperts {
		return "", false
	}
	for _, p := range c.s.sharedScale {
		if b, ok := strings.CutSuffix(base, "."+p[0]); ok {
			return b + "." + p[1], true
		}
		if b, ok := strings.CutSuffix(base, "."+p[1]); ok {
			return b + "." + p[0], true
		}
	}
	return "", false
}
