package model

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/k3ckpt/k3ckpt/quant"
)

// parseConverted reads the quantization_config a conversion wrote at the top
// level and settles the routed experts' format from what it states:
//   - modelopt_mixed: NVFP4 when quantized_layers lists an expert bank as
//     NVFP4; BF16 when exclude_modules (ignore) covers the banks; otherwise
//     MXFP4, which is how a ModelOpt loader that knows MXFP4 reads undeclared
//     experts (TensorRT-LLM's K3 loader defaults them to MXFP4).
//   - fp8 (DeepSeek): the block-FP8 config says nothing about the experts, so
//     their description stays where the source had it, in
//     text_config.quantization_config; without one they are BF16.
func (c *Config) parseConverted(p *fields, q jobj, qm string, text jobj) {
	switch qm {
	case quantModelOptMixed:
		c.Converted = qm
		c.parseModelOptExperts(p, q)
	case quantFP8:
		c.Converted = qm
		var eq jobj
		ok := false
		if c.Multimodal {
			eq, ok = p.object(text, "quantization_config", false)
		}
		switch {
		case p.err != nil:
		case !ok:
			c.Experts = c.deepSeekExperts(q)
		case p.str(eq, "quant_method", true) != compressedTensors:
			p.fail(eq.name("quant_method"), "the experts must be %q (MXFP4), got %q", compressedTensors, eq.m["quant_method"])
		default:
			c.parseCompressedTensors(p, eq, text)
		}
	default:
		p.fail(q.name("quant_method"), "must be %q (MXFP4 experts), or %q/%q for a converted checkpoint, got %q",
			compressedTensors, quantModelOptMixed, quantFP8, qm)
	}
}

// parseModelOptExperts finds the experts' format in a ModelOpt mixed
// quantization_config (quantized_layers and ignore).
func (c *Config) parseModelOptExperts(p *fields, q jobj) {
	if algo := p.str(q, "quant_algo", true); p.err == nil && algo != "MIXED_PRECISION" {
		p.fail(q.name("quant_algo"), "a %q config must be \"MIXED_PRECISION\", got %q", quantModelOptMixed, algo)
	}
	layers, _ := p.object(q, "quantized_layers", true)
	if p.err != nil {
		return
	}
	nvfp4, fp8 := false, false
	for _, k := range slices.Sorted(maps.Keys(layers.m)) {
		if !strings.HasSuffix(k, ".experts") {
			continue
		}
		// The first problem sticks: later reads and failures are no-ops.
		e, _ := p.object(layers, k, true)
		switch algo := p.str(e, "quant_algo", true); {
		case p.err != nil:
		case algo == modelOptFP8Block:
			fp8 = true
		case algo != modelOptNVFP4:
			p.fail(e.name("quant_algo"), "routed experts must be NVFP4 or %s when declared, got %q", modelOptFP8Block, algo)
		default:
			if g := p.sizeOr(e, "group_size", 1, maxDim, quant.NVFP4GroupSize); p.err == nil && g != quant.NVFP4GroupSize {
				p.fail(e.name("group_size"), "NVFP4 blocks are %d elements, got %d", quant.NVFP4GroupSize, g)
			}
			nvfp4 = true
		}
	}
	switch {
	case nvfp4 && fp8:
		p.fail(layers.path, "routed experts declared both NVFP4 and %s", modelOptFP8Block)
	case fp8:
		c.Experts = ExpertsFP8
	case nvfp4:
		c.Experts, c.GroupSize = ExpertsNVFP4, quant.NVFP4GroupSize
	case c.firstBank() != "" && ignores(q.m["ignore"], c.firstBank()):
		c.Experts = ExpertsBF16
	default:
		c.Experts, c.GroupSize = ExpertsMXFP4, 32
	}
}

// firstBank is the routed-expert bank of the first MoE layer, "" when
// the config has none.
func (c *Config) firstBank() string {
	if c.NumExperts == 0 || c.FirstKDense >= c.NumLayers {
		return ""
	}
	return c.textPrefix() + "layers." + strconv.Itoa(c.FirstKDense) + ".block_sparse_moe.experts"
}

// ignores reports whether a ModelOpt ignore list matches module under any
// engine spelling.
func ignores(v any, module string) bool {
	list, _ := v.([]any)
	for _, e := range list {
		pat, ok := e.(string)
		if !ok {
			continue
		}
		for _, n := range k3Classifier.ModuleSpellings(module) {
			if ModuleMatcher(pat)(n) {
				return true
			}
		}
	}
	return false
}

// deepSeekExperts reads the experts' format from a DeepSeek-V3 "fp8" config
// without an expert description: every linear module is block FP8 unless
// ignored_layers or modules_to_not_convert names it.
func (c *Config) deepSeekExperts(q jobj) ExpertFormat {
	bank := c.firstBank()
	if bank == "" || ignores(q.m["ignored_layers"], bank) || ignores(q.m["modules_to_not_convert"], bank) {
		return ExpertsBF16
	}
	return ExpertsFP8
}
