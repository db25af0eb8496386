package model

import "strings"

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
