package model

import (
	"cmp"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// mxfp4Format is the compressed-tensors format name of packed MXFP4 weights.
const mxfp4Format = "mxfp4-pack-quantized"

// parseQuantization reads the routed experts' format: a conversion states it
// at the top level (parseConverted), the released source inside text_config
// (its loader copies it up); without any quantization_config they are BF16.
func (c *Config) parseQuantization(p *fields, top, text jobj) {
	q, ok := p.object(top, "quantization_config", false)
	if !ok && p.err == nil && c.Multimodal {
		q, ok = p.object(text, "quantization_config", false)
	}
	if !ok {
		c.Experts = ExpertsBF16 // none (a read error discards the config anyway)
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
	c.parseCompressedTensors(p, q, text)
}

// compressedTensors is the quant_method of the source's MXFP4 experts.
const compressedTensors = "compressed-tensors"

// parseCompressedTensors finds the MXFP4 expert group of a
// compressed-tensors quantization_config.
func (c *Config) parseCompressedTensors(p *fields, q, text jobj) {
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
		if cmp.Or(p.str(g, "format", false), topFormat) != mxfp4Format {
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
		if c.NumExperts > 0 && c.MoEIntermediate%c.GroupSize != 0 {
			p.fail(text.name("moe_intermediate_size"), "must be a multiple of the MXFP4 group size %d, got %d", c.GroupSize, c.MoEIntermediate)
		}
		if c.NumExperts > 0 && c.LatentDim%c.GroupSize != 0 {
			p.fail(text.name("routed_expert_hidden_size"), "must be a multiple of the MXFP4 group size %d, got %d", c.GroupSize, c.LatentDim)
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
// an MXFP4 group: the experts are FP8 when a float-quantized group's "re:"
// target matches the first MoE bank or its first w1 (any engine spelling),
// else BF16; ok is false when no group is float-quantized.
func (c *Config) floatQuantizedExperts(groups jobj, topFormat string) (ExpertFormat, bool) {
	found := false
	var mods []string
	if bank := c.firstBank(); bank != "" {
		mods = append(k3Classifier.ModuleSpellings(bank), k3Classifier.ModuleSpellings(bank+".0.w1")...)
	}
	for _, g := range groups.m {
		gm, _ := g.(map[string]any)
		if format, _ := gm["format"].(string); cmp.Or(format, topFormat) != "float-quantized" {
			continue
		}
		found = true
		targets, _ := gm["targets"].([]any)
		for _, t := range targets {
			pat, _ := t.(string)
			if re, ok := strings.CutPrefix(pat, "re:"); ok {
				if rx, err := regexp.Compile(`^(?:` + re + `)`); err == nil && slices.ContainsFunc(mods, rx.MatchString) {
					return ExpertsFP8, true
				}
			}
		}
	}
	return ExpertsBF16, found
}
