package model

// ExpertsQuantizationKey is where a converted checkpoint's quantization_config
// (quant_method fp8 or modelopt) keeps the source's compressed-tensors
// description of the MXFP4 experts, so the config states every tensor's format.
const ExpertsQuantizationKey = "experts_quantization_config"

// parseConverted reads the top-level quantization_config of a converted
// checkpoint, whose quant_method is qm (not compressed-tensors): it records
// the method in c.Converted and returns the compressed-tensors description
// of the routed experts it carries. ok is false after a failure (recorded
// in p).
func (c *Config) parseConverted(p *fields, q jobj, qm string) (experts jobj, ok bool) {
	if qm != "fp8" && qm != "modelopt" {
		p.fail(q.name("quant_method"), "must be %q (MXFP4 experts), or \"fp8\"/\"modelopt\" for a converted checkpoint, got %q", compressedTensors, qm)
		return jobj{}, false
	}
	// A block-FP8 conversion (convert's deepseek or modelopt convention)
	// keeps the experts' own compressed-tensors description under
	// ExpertsQuantizationKey; without it their format would be a guess.
	c.Converted = qm
	eq, ok := p.object(q, ExpertsQuantizationKey, false)
	if !ok {
		if p.err == nil {
			p.fail(q.name(ExpertsQuantizationKey), "a %q quantization_config must describe the routed experts' format here", qm)
		}
		return jobj{}, false
	}
	if m := p.str(eq, "quant_method", true); p.err == nil && m != compressedTensors {
		p.fail(eq.name("quant_method"), "the experts must be %q (MXFP4), got %q", compressedTensors, m)
	}
	return eq, p.err == nil
}
