package model

import "strings"

// Quantization methods and ModelOpt algorithms of the configs parseConverted reads.
const (
	// quantModelOptMixed is ModelOpt mixed precision (NVIDIA's Kimi-K3
	// export; SGLang selects its mixed-precision path on exactly this value).
	quantModelOptMixed = "modelopt_mixed"
	quantFP8           = "fp8"       // the DeepSeek-V3 block-FP8 convention
	modelOptNVFP4      = "NVFP4"     // quant_algo of NVFP4 modules
	modelOptFP8Block   = "FP8_PB_WO" // quant_algo of 128×128 block-FP8 weights
)

// Suffixes of an MXFP4 expert projection's two tensors.
const (
	mxfp4Packed = ".weight_packed"
	mxfp4Scale  = ".weight_scale"
)

// MXFP4Part says whether name is X.weight_packed or X.weight_scale of an
// MXFP4 routed expert projection, and returns X.
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
// shared_scale pairs say (K3: w1 and w3 feed one fused GEMM, so NVIDIA's
// cast takes K_max over both; w2 has none, ok false).
func (c *Classifier) NVFP4ScalePartner(base string) (string, bool) {
	if c.Classify(base+mxfp4Packed) != RoutedExperts {
		return "", false
	}
	for _, p := range c.s.engines.SharedScale {
		if b, ok := strings.CutSuffix(base, "."+p[0]); ok {
			return b + "." + p[1], true
		}
		if b, ok := strings.CutSuffix(base, "."+p[1]); ok {
			return b + "." + p[0], true
		}
	}
	return "", false
}
