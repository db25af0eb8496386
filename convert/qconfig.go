package convert

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/k3ckpt/k3ckpt/quant"
)

// Names of the configuration files a conversion writes or replaces.
const (
	// ConfigName is the model config, rewritten with the output's quantization_config.
	ConfigName = "config.json"
	// HFQuantConfigName is ModelOpt's quantization description, written for --format modelopt.
	HFQuantConfigName = "hf_quant_config.json"
)

// Facts of the configs written per convention (SPEC §2 and the engines'
// loaders: SGLang/vLLM Fp8Config, compressed-tensors FP8_BLOCK, ModelOpt
// hf_quant_config MIXED_PRECISION).
const (
	// ExpertsConfigKey keeps the source's compressed-tensors description of
	// the MXFP4 experts inside a deepseek or modelopt quantization_config, so
	// the config still states the format of every tensor.
	ExpertsConfigKey = "experts_quantization_config"
	// modelOptProducer is the producer name vLLM requires before it reads a
	// ModelOpt config; the version says who really wrote it.
	modelOptProducer = "modelopt"
	modelOptVersion  = "k3ckpt"
	// fp8BlockAlgo is ModelOpt's name for 128×128 block FP8 weights.
	fp8BlockAlgo = "FP8_PB_WO"
	// mxfp4Algo is the ModelOpt/TensorRT-LLM name for weight-only MXFP4.
	mxfp4Algo = "W4A16_MXFP4"
	// ctFloatFormat is compressed-tensors' format of FP8 float weights.
	ctFloatFormat = "float-quantized"
	// ctMixedFormat is the top-level format when groups differ.
	ctMixedFormat = "mixed-precision"
	// ue8m0 is the scale_fmt value engines read.
	ue8m0 = "ue8m0"
)

// modules sorts the output's linear modules into the sets each convention
// names: FP8 weights, other 2-D float weights left unquantized, and the MXFP4
// expert subtrees (one per MoE layer).
type modules struct {
	fp8, kept, experts []string
}

// moduleSet accumulates modules file by file.
type moduleSet struct{ fp8, kept, experts map[string]bool }

func newModuleSet() *moduleSet {
	return &moduleSet{fp8: map[string]bool{}, kept: map[string]bool{}, experts: map[string]bool{}}
}

// expertSubtree returns the ".experts" module that holds a routed expert's
// tensor (X.experts.N.…), or "" for any other name.
func expertSubtree(name string) string {
	i := strings.Index(name, ".experts.")
	if i < 0 {
		return ""
	}
	rest := name[i+len(".experts."):]
	d := 0
	for d < len(rest) && rest[d] >= '0' && rest[d] <= '9' {
		d++
	}
	if d == 0 || d == len(rest) || rest[d] != '.' {
		return ""
	}
	return name[:i+len(".experts")]
}

// add records the modules of one file's outputs (names are cloned: they
// alias the source header otherwise).
func (m *moduleSet) add(outs []OutputTensor) {
	for _, o := range outs {
		if sub := expertSubtree(o.Name); sub != "" {
			if !m.experts[sub] {
				m.experts[strings.Clone(sub)] = true
			}
			continue
		}
		switch {
		case o.Role == RoleWeight:
			m.fp8[strings.Clone(strings.TrimSuffix(o.Name, ".weight"))] = true
		case o.Role == RoleCopy && len(o.Shape) == 2 && quantizableDTypes[o.DType] && strings.HasSuffix(o.Name, ".weight"):
			m.kept[strings.Clone(strings.TrimSuffix(o.Name, ".weight"))] = true
		}
	}
}

func (m *moduleSet) sorted() modules {
	return modules{fp8: slices.Sorted(maps.Keys(m.fp8)), kept: slices.Sorted(maps.Keys(m.kept)), experts: slices.Sorted(maps.Keys(m.experts))}
}

// quantConfigs builds the output's quantization_config (for config.json) and,
// for ModelOpt, hf_quant_config.json. src is the source quantization_config
// (nil for a BF16 source), groupSize the MXFP4 group of its experts.
func quantConfigs(src map[string]any, groupSize int64, m modules, opts Options) (qc map[string]any, hfq map[string]any, err error) {
	switch opts.Format {
	case DeepSeek:
		qc = map[string]any{
			"quant_method":      "fp8",
			"fmt":               "e4m3",
			"activation_scheme": "dynamic",
			"weight_block_size": []any{BlockSize, BlockSize},
		}
		if opts.ScaleFmt == quant.ScaleUE8M0 {
			qc["scale_fmt"] = ue8m0
		}
		// SGLang reads ignored_layers, transformers modules_to_not_convert;
		// both say "not FP8", the experts' own format is in ExpertsConfigKey.
		notFP8 := slices.Concat(m.kept, m.experts)
		slices.Sort(notFP8)
		qc["ignored_layers"] = anyStrings(notFP8)
		qc["modules_to_not_convert"] = anyStrings(notFP8)
		if src != nil {
			qc[ExpertsConfigKey] = src
		}
	case CompressedTensors:
		qc, err = compressedTensorsConfig(src, m, opts)
	case ModelOpt:
		layers := make(map[string]any, len(m.fp8)+len(m.experts))
		for _, mod := range m.fp8 {
			layers[mod] = map[string]any{"quant_algo": fp8BlockAlgo}
		}
		exclude := m.kept
		if src != nil {
			for _, mod := range m.experts {
				layers[mod] = map[string]any{"quant_algo": mxfp4Algo, "group_size": groupSize}
			}
		} else { // BF16 experts: not quantized at all
			exclude = slices.Sorted(slices.Values(slices.Concat(m.kept, m.experts)))
		}
		section := map[string]any{
			"quant_algo":          "MIXED_PRECISION",
			"kv_cache_quant_algo": nil,
			"quantized_layers":    layers,
			"exclude_modules":     anyStrings(exclude),
		}
		if opts.ScaleFmt == quant.ScaleUE8M0 {
			section["scale_fmt"] = ue8m0
		}
		producer := map[string]any{"name": modelOptProducer, "version": modelOptVersion}
		hfq = map[string]any{"producer": producer, "quantization": section}
		qc = maps.Clone(section)
		qc["quant_method"] = "modelopt"
		qc["producer"] = producer
		if src != nil {
			qc[ExpertsConfigKey] = src
		}
	default:
		return nil, nil, fmt.Errorf("%w: %v", ErrUnknownFormat, opts.Format)
	}
	return qc, hfq, err
}

// compressedTensorsConfig adds an FP8 block group (compressed-tensors'
// FP8_BLOCK scheme: static 128×128 weights, dynamic per-token-group-128
// activations) targeting the converted modules by exact name, keeps the source
// groups (the MXFP4 experts) as they are, and rewrites ignore so that no
// converted module is ignored while every module the removed entries covered
// stays ignored by name.
func compressedTensorsConfig(src map[string]any, m modules, opts Options) (map[string]any, error) {
	qc := map[string]any{}
	if src != nil {
		qc = deepCopyJSON(src).(map[string]any)
	}
	qc["quant_method"] = "compressed-tensors"
	if _, ok := qc["quantization_status"]; !ok {
		qc["quantization_status"] = "compressed"
	}
	groups, _ := qc["config_groups"].(map[string]any)
	if groups == nil {
		groups = map[string]any{}
	}
	srcFormat, _ := qc["format"].(string)
	if len(groups) > 0 && srcFormat != ctFloatFormat {
		// Groups in different formats: each states its own.
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
	weights := map[string]any{
		"num_bits": 8, "type": "float", "strategy": "block", "block_structure": []any{BlockSize, BlockSize},
		"symmetric": true, "dynamic": false,
	}
	fp8 := map[string]any{
		"format":  ctFloatFormat,
		"targets": anyStrings(m.fp8),
		"weights": weights,
		"input_activations": map[string]any{
			"num_bits": 8, "type": "float", "strategy": "group", "group_size": BlockSize,
			"symmetric": true, "dynamic": true,
		},
	}
	if opts.ScaleFmt == quant.ScaleUE8M0 {
		fp8["scale_fmt"] = ue8m0
	}
	name := ""
	for i := len(groups); name == ""; i++ {
		if _, taken := groups["group_"+strconv.Itoa(i)]; !taken {
			name = "group_" + strconv.Itoa(i)
		}
	}
	groups[name] = fp8
	qc["config_groups"] = groups

	ignore, err := rewriteIgnore(qc["ignore"], m)
	if err != nil {
		return nil, err
	}
	qc["ignore"] = ignore
	return qc, nil
}

// ctMatcher compiles one compressed-tensors ignore/targets entry: "re:<regex>"
// is matched from the start of the module name (Python re.match), anything
// else must equal the name.
func ctMatcher(entry string) (func(string) bool, error) {
	if pat, ok := strings.CutPrefix(entry, "re:"); ok {
		re, err := regexp.Compile(`^(?:` + pat + `)`)
		if err != nil {
			return nil, fmt.Errorf("%w: quantization_config.ignore entry %q: %v", ErrConfig, entry, err)
		}
		return re.MatchString, nil
	}
	return func(s string) bool { return s == entry }, nil
}

func rewriteIgnore(v any, m modules) ([]any, error) {
	var entries []string
	switch t := v.(type) {
	case nil:
	case []any:
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%w: quantization_config.ignore holds %v, not a string", ErrConfig, e)
			}
			entries = append(entries, s)
		}
	default:
		return nil, fmt.Errorf("%w: quantization_config.ignore is not a list", ErrConfig)
	}
	var keep []string
	named := map[string]bool{}
	for _, e := range entries {
		match, err := ctMatcher(e)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(m.fp8, match) {
			keep = append(keep, e)
			continue
		}
		for _, k := range m.kept {
			if match(k) {
				named[k] = true
			}
		}
	}
	out := make([]any, 0, len(keep)+len(named))
	for _, e := range keep {
		out = append(out, e)
	}
	for _, k := range slices.Sorted(maps.Keys(named)) {
		out = append(out, k)
	}
	return out, nil
}

func anyStrings(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func deepCopyJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopyJSON(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopyJSON(x)
		}
		return s
	}
	return v
}

// marshalConfig renders a JSON object as config files are written: indented
// by two spaces, keys sorted, a final newline (json.Number values re-encode
// exactly as read).
func marshalConfig(v map[string]any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return append(b, '\n'), nil
}
