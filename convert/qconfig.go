package convert

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
)

// HFQuantConfigName is ModelOpt's quantization description (--format modelopt).
const HFQuantConfigName = "hf_quant_config.json"

// The configs' vocabulary, as engines and NVIDIA's Kimi-K3 exporter spell it.
const (
	modelOptProducer = "modelopt" // vLLM reads a ModelOpt config from this producer alone
	modelOptVersion  = "k3ckpt"   // who really wrote it
	modelOptMixed    = "MIXED_PRECISION"
	fp8BlockAlgo     = "FP8_PB_WO" // 128×128 block FP8 weights
	nvfp4Algo        = "NVFP4"
	ctFloatFormat    = "float-quantized"
	ctMXFP4Format    = "mxfp4-pack-quantized" // the release's MXFP4 experts
	ctMixedFormat    = "mixed-precision"      // groups in different formats
	ue8m0            = "ue8m0"                // DeepSeek-style loaders' scale_fmt
	quantKey         = "quantization_config"
	textKey          = "text_config" // a multimodal config's language model
)

// modules are the output's linear modules as the conventions name them: FP8
// weights, other 2-D float weights, and the routed-expert banks.
type modules struct {
	fp8, kept, experts []string
	decodes            bool // the recipe decodes: with no FP8 left, no block-FP8 config
}

// moduleSet accumulates modules file by file.
type moduleSet struct {
	fp8, kept, experts map[string]bool
	cls                *model.Classifier // reads the expert banks' names
}

func newModuleSet(cls *model.Classifier) *moduleSet {
	return &moduleSet{fp8: map[string]bool{}, kept: map[string]bool{}, experts: map[string]bool{}, cls: cls}
}

// add records the modules of one file's outputs (cloned: they alias its header).
func (m *moduleSet) add(outs []outputTensor) {
	put := func(set map[string]bool, name string) {
		if !set[name] {
			set[strings.Clone(name)] = true
		}
	}
	for _, o := range outs {
		if sub := m.cls.ExpertBank(o.Name); sub != "" {
			put(m.experts, sub)
			continue
		}
		switch {
		case o.Role == roleWeight:
			put(m.fp8, strings.TrimSuffix(o.Name, ".weight"))
		case (o.Role == roleCopy || o.Role == roleBF16) && len(o.Shape) == 2 && quantizableDTypes[o.DType] && strings.HasSuffix(o.Name, ".weight"):
			put(m.kept, strings.TrimSuffix(o.Name, ".weight"))
		}
	}
}

func (m *moduleSet) sorted() modules {
	return modules{fp8: slices.Sorted(maps.Keys(m.fp8)), kept: slices.Sorted(maps.Keys(m.kept)), experts: slices.Sorted(maps.Keys(m.experts))}
}

// outputConfigs writes the output's config.json (the source's, with the
// convention's quantization_config) and, for ModelOpt, hf_quant_config.json.
func outputConfigs(cfg *model.Config, mods modules, opts Options) (config, hfq []byte, err error) {
	raw := cfg.Raw()
	// DeepSeek-V4's expert_dtype says what the routed experts hold: "fp4"
	// (the release), "fp8"; absent, BF16 (inference/model.py MoE).
	if _, ok := raw["expert_dtype"]; ok {
		switch opts.Experts {
		case ExpertsBF16:
			delete(raw, "expert_dtype")
		case ExpertsFP8:
			raw["expert_dtype"] = "fp8"
		}
	}
	text, _ := raw[textKey].(map[string]any)
	var srcQC map[string]any // the source's description of its experts
	var mxQC map[string]any  // a compressed-tensors MXFP4 one, top level or in text_config
	for _, holder := range []map[string]any{raw, text} {
		if v, ok := holder[quantKey]; ok {
			qc, ok := v.(map[string]any)
			if !ok {
				return nil, nil, fmt.Errorf("%w: %s is not an object", errConfig, quantKey)
			}
			if qc["format"] == ctMXFP4Format && mxQC == nil {
				mxQC = qc
			}
			if srcQC == nil {
				srcQC = qc
				delete(holder, quantKey)
			} else if mods.decodes || opts.Experts == ExpertsBF16 || opts.Experts == ExpertsMXFP4 || opts.Experts == ExpertsFP8 {
				delete(holder, quantKey)
			}
		}
	}
	switch opts.Experts {
	case ExpertsBF16, ExpertsFP8:
		srcQC = nil // the experts' description goes with their quantization
	case ExpertsMXFP4:
		srcQC = releaseMXFP4Config()
	}
	if len(mods.fp8) == 0 && opts.Experts != ExpertsNVFP4 && opts.Experts != ExpertsFP8 && (mods.decodes || opts.Experts == ExpertsBF16 || opts.Experts == ExpertsMXFP4) {
		// Nothing block-FP8 left: no quantization_config but the MXFP4
		// experts', where the release keeps it; no hf_quant_config.json.
		if outputExperts(cfg, opts) == model.ExpertsMXFP4 {
			if mxQC == nil {
				mxQC = releaseMXFP4Config()
			}
			holder := text
			if holder == nil {
				holder = raw
			}
			holder[quantKey] = mxQC
		}
		config, err = marshalConfig(raw)
		return config, nil, err
	}
	var qc, hf map[string]any
	switch opts.Format {
	case deepSeek:
		qc = deepSeekConfig(mods, opts)
		// The block-FP8 config says nothing about the experts: their
		// description stays where the released checkpoint keeps it.
		if srcQC != nil {
			if text == nil {
				return nil, nil, fmt.Errorf("%w: --format deepseek keeps the MXFP4 experts' quantization_config in text_config, and a bare kimi_linear config has no text_config: use --format modelopt or --format compressed-tensors", errConfig)
			}
			text[quantKey] = srcQC
		}
	case compressedTensors:
		qc, err = compressedTensorsConfig(srcQC, mods, opts)
	case modelOpt:
		qc, hf, err = modelOptConfigs(cfg, mods, opts)
	default:
		err = fmt.Errorf("%w: %v", errUnknownFormat, opts.Format)
	}
	if err != nil {
		return nil, nil, err
	}
	raw[quantKey] = qc
	// Both share maps they only read, and each lists every quantized module.
	var hfErr error
	var wg sync.WaitGroup
	if hf != nil {
		wg.Go(func() { hfq, hfErr = marshalConfig(hf) })
	}
	config, err = marshalConfig(raw)
	wg.Wait()
	if err = cmp.Or(err, hfErr); err != nil {
		return nil, nil, err
	}
	return config, hfq, nil
}

// spellAll lists every engine spelling of each module, sorted and unique.
func spellAll(cls *model.Classifier, mods []string) []string {
	var out []string
	for _, m := range mods {
		out = append(out, cls.ModuleSpellings(m)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// deepSeekConfig is the DeepSeek-V3 "fp8" config: ignored_layers (SGLang,
// vLLM) and modules_to_not_convert (transformers) list every non-FP8 module
// under every spelling.
func deepSeekConfig(m modules, opts Options) map[string]any {
	qc := map[string]any{
		"quant_method":      model.DeepSeek.QuantMethod(),
		"fmt":               "e4m3",
		"activation_scheme": "dynamic",
		"weight_block_size": []any{blockSize, blockSize},
	}
	if opts.ScaleFmt == quant.ScaleUE8M0 {
		qc["scale_fmt"] = ue8m0
	}
	ignored := slices.Concat(m.kept, m.experts)
	if opts.Experts == ExpertsFP8 {
		ignored = m.kept // banks of FP8 experts are FP8 modules, not modules to ignore
	}
	notFP8 := anyStrings(spellAll(opts.classifier(), ignored))
	qc["ignored_layers"] = notFP8
	qc["modules_to_not_convert"] = slices.Clone(notFP8)
	return qc
}

// modelOptConfigs builds hf_quant_config.json and config.json's
// quantization_config as NVIDIA's Kimi-K3 exporter does
// (examples/kimi/kimi_k3/quantize_to_nvfp4.py: _build_hf_quant_config,
// _rewrite_config_json, convert_hf_quant_config_format): every quantized
// module and fused layer under all spellings; NVIDIA's exclude_modules less
// the patterns reaching a quantized module; NVFP4 experts declared per bank,
// MXFP4 ones undeclared (TensorRT-LLM's K3 loader reads undeclared experts
// as MXFP4, and an exclusion would override that).
func modelOptConfigs(cfg *model.Config, m modules, opts Options) (qc, hfq map[string]any, err error) {
	layers, configGroups := map[string]any{}, map[string]any{}
	declare := func(mods []string, entry map[string]any) {
		if len(mods) == 0 {
			return
		}
		targets := spellAll(opts.classifier(), mods)
		for _, n := range targets {
			layers[n] = entry
		}
		g := modelOptGroup(entry)
		g["targets"] = anyStrings(targets)
		configGroups["group_"+strconv.Itoa(len(configGroups))] = g
	}
	if opts.Experts == ExpertsNVFP4 {
		declare(m.experts, map[string]any{"quant_algo": nvfp4Algo, "group_size": quant.NVFP4GroupSize})
	}
	fp8 := slices.Concat(m.fp8, model.FusedNames(m.fp8))
	if opts.Experts == ExpertsFP8 { // the expert banks are block FP8 too
		fp8 = append(fp8, m.experts...)
	}
	declare(fp8, map[string]any{"quant_algo": fp8BlockAlgo})
	if len(layers) == 0 {
		return nil, nil, fmt.Errorf("%w: --format modelopt with nothing quantized: ModelOpt mixed-precision loaders refuse an empty quantized_layers", errConfig)
	}
	protected := slices.Collect(maps.Keys(layers))
	outExperts := outputExperts(cfg, opts)
	if outExperts == model.ExpertsMXFP4 {
		protected = append(protected, spellAll(opts.classifier(), m.experts)...)
	}
	var aliases []string
	for _, pat := range cfg.ModelOptExcludes() {
		aliases = append(aliases, opts.classifier().ModuleSpellings(pat)...)
	}
	reaches := reachesAny(aliases, protected)
	var exclude []string
	for i, alias := range aliases {
		if !reaches[i] {
			exclude = append(exclude, alias)
		}
	}
	if outExperts == model.ExpertsBF16 {
		exclude = append(exclude, spellAll(opts.classifier(), m.experts)...)
	}
	seen := map[string]bool{}
	exclude = slices.DeleteFunc(exclude, func(n string) bool {
		dup := seen[n]
		seen[n] = true
		return dup
	})
	producer := map[string]any{"name": modelOptProducer, "version": modelOptVersion}
	hfq = map[string]any{
		"producer": producer,
		"quantization": map[string]any{
			"quant_algo":          modelOptMixed,
			"kv_cache_quant_algo": nil,
			"group_size":          quant.NVFP4GroupSize,
			"quantized_layers":    layers,
			"exclude_modules":     anyStrings(exclude),
		},
	}
	qc = map[string]any{
		"config_groups":    configGroups,
		"quantized_layers": layers,
		"ignore":           anyStrings(exclude),
		"quant_algo":       modelOptMixed,
		"producer":         producer,
		"quant_method":     model.ModelOpt.QuantMethod(),
	}
	return qc, hfq, nil
}

// reachesAny reports for each pattern whether it matches one of mods.
func reachesAny(patterns, mods []string) []bool {
	out := make([]bool, len(patterns))
	n := min(runtime.GOMAXPROCS(0), len(patterns))
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for i := w; i < len(patterns); i += n {
				out[i] = slices.ContainsFunc(mods, model.ModuleMatcher(patterns[i]))
			}
		})
	}
	wg.Wait()
	return out
}

// modelOptGroup is convert_hf_quant_config_format's config group for one
// per-layer entry; FP8_PB_WO, which it does not map, keeps its quant_algo.
func modelOptGroup(entry map[string]any) map[string]any {
	if entry["quant_algo"] == nvfp4Algo {
		args := func() map[string]any {
			return map[string]any{"dynamic": false, "num_bits": 4, "type": "float", "group_size": entry["group_size"]}
		}
		return map[string]any{"input_activations": args(), "weights": args()}
	}
	return map[string]any{"quant_algo": entry["quant_algo"]}
}

// compressedTensorsConfig adds an FP8_BLOCK group to qc, the source's (the
// caller's copy, or nil), and rewrites ignore so that no converted module is
// ignored, by "re:" patterns matching under any prefix (engines match runtime
// names). Only keys compressed-tensors knows appear (extra="forbid").
func compressedTensorsConfig(qc map[string]any, m modules, opts Options) (map[string]any, error) {
	if qc == nil {
		qc = map[string]any{}
	}
	qc["quant_method"] = model.CompressedTensors.QuantMethod()
	if _, ok := qc["quantization_status"]; !ok {
		qc["quantization_status"] = "compressed"
	}
	groups, _ := qc["config_groups"].(map[string]any)
	if groups == nil {
		groups = map[string]any{}
	}
	srcFormat, _ := qc["format"].(string)
	if len(groups) > 0 && srcFormat != ctFloatFormat {
		for _, g := range groups {
			if gm, ok := g.(map[string]any); ok {
				if _, has := gm["format"]; !has && srcFormat != "" {
					gm["format"] = srcFormat
				}
			}
		}
		qc["format"] = ctMixedFormat
	} else {
		qc["format"] = ctFloatFormat
	}
	targets := model.ModulePatterns(m.fp8, m.kept)
	if opts.Experts == ExpertsFP8 && len(m.experts) > 0 {
		targets = append(targets, expertsTarget)
	}
	fp8 := map[string]any{
		"format":  ctFloatFormat,
		"targets": anyStrings(targets),
		"weights": map[string]any{
			"num_bits": 8, "type": "float", "strategy": "block", "block_structure": []any{blockSize, blockSize},
			"symmetric": true, "dynamic": false,
		},
		"input_activations": map[string]any{
			"num_bits": 8, "type": "float", "strategy": "group", "group_size": blockSize,
			"symmetric": true, "dynamic": true,
		},
	}
	name := ""
	for i := len(groups); name == ""; i++ {
		if _, taken := groups["group_"+strconv.Itoa(i)]; !taken {
			name = "group_" + strconv.Itoa(i)
		}
	}
	groups[name] = fp8
	qc["config_groups"] = groups

	ignore, err := rewriteIgnore(opts.classifier(), qc["ignore"], m)
	if err != nil {
		return nil, err
	}
	qc["ignore"] = ignore
	return qc, nil
}

// ctMatcher compiles a compressed-tensors ignore/targets entry: "re:<regex>"
// matches from the start of the name (Python re.match), else equality.
func ctMatcher(entry string) (func(string) bool, error) {
	if pat, ok := strings.CutPrefix(entry, "re:"); ok {
		re, err := regexp.Compile(`^(?:` + pat + `)`)
		if err != nil {
			return nil, fmt.Errorf("%w: quantization_config.ignore entry %q: %v", errConfig, entry, err)
		}
		return re.MatchString, nil
	}
	return func(s string) bool { return s == entry }, nil
}

// rewriteIgnore drops entries matching a converted module; kept ones they covered stay ignored.
func rewriteIgnore(cls *model.Classifier, v any, m modules) ([]any, error) {
	list, ok := v.([]any)
	if !ok && v != nil {
		return nil, fmt.Errorf("%w: quantization_config.ignore is not a list", errConfig)
	}
	fp8 := spellAll(cls, m.fp8)
	var keep, covered []string
	for _, x := range list {
		e, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("%w: quantization_config.ignore holds %v, not a string", errConfig, x)
		}
		match, err := ctMatcher(e)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(fp8, match) {
			keep = append(keep, e)
			continue
		}
		for _, k := range m.kept {
			if slices.ContainsFunc(cls.ModuleSpellings(k), match) {
				covered = append(covered, k)
			}
		}
	}
	return anyStrings(append(keep, model.ModulePatterns(covered, m.fp8)...)), nil
}

func anyStrings(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// marshalConfig renders a config as NVIDIA's exporter writes config.json:
// json.dumps(indent=2, sort_keys=True) and a final newline.
func marshalConfig(v map[string]any) ([]byte, error) {
	b, err := model.MarshalConfig(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errConfig, err)
	}
	return append(b, '\n'), nil
}

// outputExpertFormats are the expert formats the modes but keep write.
var outputExpertFormats = map[ExpertsMode]model.ExpertFormat{
	ExpertsNVFP4: model.ExpertsNVFP4, ExpertsBF16: model.ExpertsBF16, ExpertsMXFP4: model.ExpertsMXFP4, ExpertsFP8: model.ExpertsFP8,
}

// outputExperts is the format of the output's routed experts.
func outputExperts(cfg *model.Config, opts Options) model.ExpertFormat {
	if f, ok := outputExpertFormats[opts.Experts]; ok {
		return f
	}
	return cfg.Experts
}

// releaseMXFP4Config is text_config.quantization_config of
// moonshotai/Kimi-K3's config.json, which --experts mxfp4 writes back.
func releaseMXFP4Config() map[string]any {
	return map[string]any{
		"config_groups": map[string]any{
			"group_0": map[string]any{
				"format":             ctMXFP4Format,
				"input_activations":  nil,
				"output_activations": nil,
				"targets":            []any{"Linear"},
				"weights": map[string]any{
					"actorder":        nil,
					"block_structure": nil,
					"dynamic":         false,
					"group_size":      quant.MXGroupSize,
					"num_bits":        4,
					"observer":        "minmax",
					"observer_kwargs": map[string]any{},
					"scale_dtype":     "torch.uint8",
					"strategy":        "group",
					"symmetric":       true,
					"type":            "float",
					"zp_dtype":        nil,
				},
			},
		},
		"format":                   ctMXFP4Format,
		"global_compression_ratio": nil,
		"ignore": []any{
			"re:.*self_attn.*",
			"re:.*shared_experts.*",
			`re:.*mlp\.(gate|up|gate_up|down)_proj.*`,
			"re:.*lm_head.*",
			"re:.*vision_tower.*",
			"re:.*mm_projector.*",
		},
		"kv_cache_scheme":     nil,
		"quant_method":        "compressed-tensors",
		"quantization_status": "compressed",
	}
}
