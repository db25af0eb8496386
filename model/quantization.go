package model

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

// mxfp4Format is the compressed-tensors format name of packed MXFP4 weights.
const mxfp4Format = "mxfp4-pack-quantized"

// parseQuantization reads the routed experts' format. A converted
// checkpoint states it at the top level (parseConverted); the released
// source states it inside text_config, where the top level has none (its
// loader copies it up). Without any quantization_config the experts are BF16.
func (c *Config) parseQuantization(p *fields, top, text jobj) {
	q, ok := p.object(top, "quantization_config", false)
	if !ok && p.err == nil && c.Multimodal {
		q, ok = p.object(text, "quantization_config", false)
	}
	if !ok {
		if p.err == nil {
			c.Experts = ExpertsBF16
		}
		return
	}
	c.QuantizationPath = q.path
	qm := p.str(q, "quant_method", true)
	if p.err != nil {
		return
	}
	if qm != compressedTensors {
		c.parseConverted(p, q, qm, text)
		return
	}
	c.parseCompressedTensors(p, q)
}

// compressedTensors is the quant_method of the source's MXFP4 experts.
const compressedTensors = "compressed-tensors"

// parseCompressedTensors finds the MXFP4 expert group of a
// compressed-tensors quantization_config.
func (c *Config) parseCompressedTensors(p *fields, q jobj) {
	topFormat := p.str(q, "format", false)
	groups, _ := p.object(q, "config_groups", true)
	if p.err != nil {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(groups.m)) {
		g, _ := p.object(groups, k, true)
		if p.err != nil {
			return
		}
		format := p.str(g, "format", false)
		if format == "" {
			format = topFormat
		}
		if format != mxfp4Format {
			continue
		}
		w, _ := p.object(g, "weights", true)
		if p.err != nil {
			return
		}
		if bits := p.size(w, "num_bits", 64); p.err == nil && bits != 4 {
			p.fail(w.name("num_bits"), "MXFP4 weights must be 4-bit, got %d", bits)
		}
		if t := p.str(w, "type", true); p.err == nil && t != "float" {
			p.fail(w.name("type"), "MXFP4 weights must be \"float\", got %q", t)
		}
		c.GroupSize = p.size(w, "group_size", maxDim)
		if p.err == nil && c.GroupSize != 32 {
			p.fail(w.name("group_size"), "MXFP4 blocks are 32 elements, got %d", c.GroupSize)
		}
		if p.err != nil {
			return
		}
		c.Experts = ExpertsMXFP4
		text := "text_config."
		if !c.Multimodal {
			text = ""
		}
		if c.NumExperts > 0 && c.MoEIntermediate%c.GroupSize != 0 {
			p.fail(text+"moe_intermediate_size", "must be a multiple of the MXFP4 group size %d, got %d", c.GroupSize, c.MoEIntermediate)
		}
		if c.NumExperts > 0 && c.LatentDim%c.GroupSize != 0 {
			p.fail(text+"routed_expert_hidden_size", "must be a multiple of the MXFP4 group size %d, got %d", c.GroupSize, c.LatentDim)
		}
		return
	}
	if f, ok := c.floatQuantizedExperts(groups, topFormat); ok {
		c.Experts = f
		return
	}
	p.fail(groups.path, "no %q group: the source's routed experts must be MXFP4", mxfp4Format)
}

// floatQuantizedExperts reads a converted compressed-tensors config without
// an MXFP4 group: when some float-quantized (FP8) group targets the routed
// experts (a "re:" pattern matching the first MoE layer's bank or its first
// expert's w1, under any engine spelling) they are FP8, else BF16. ok is
// false when no group is float-quantized (not a conversion's config).
func (c *Config) floatQuantizedExperts(groups jobj, topFormat string) (ExpertFormat, bool) {
	found := false
	var mods []string
	if bank := c.firstBank(); bank != "" {
		mods = append(k3Classifier.ModuleSpellings(bank), k3Classifier.ModuleSpellings(bank+".0.w1")...)
	}
	for _, g := range groups.m {
		gm, _ := g.(map[string]any)
		format, _ := gm["format"].(string)
		if format == "" {
			format = topFormat
		}
		if format != "float-quantized" {
			continue
		}
		found = true
		targets, _ := gm["targets"].([]any)
		for _, t := range targets {
			pat, ok := t.(string)
			if !ok {
				continue
			}
			re, ok := strings.CutPrefix(pat, "re:")
			if !ok {
				continue
			}
			rx, err := regexp.Compile(`^(?:` + re + `)`)
			if err != nil {
				continue
			}
			for _, m := range mods {
				if rx.MatchString(m) {
					return ExpertsFP8, true
				}
			}
		}
	}
	return ExpertsBF16, found
}
