package model

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// errInvalidConfig is wrapped by the errors of a config that is no JSON
// object; the others are fieldErrors.
var errInvalidConfig = errors.New("invalid config")

// fieldError is a config error that names the offending JSON field by its
// dotted path, e.g. "text_config.linear_attn_config.full_attn_layers[3]".
type fieldError struct {
	Field string
	Msg   string
}

func (e *fieldError) Error() string { return "config: " + e.Field + ": " + e.Msg }

// Limits that keep a hostile or mistyped config from making the catalog (and
// everything sized from it) explode.
const (
	maxLayers  = 4096    // num_hidden_layers
	maxDim     = 1 << 24 // every single dimension (hidden size, vocabulary, ranks…)
	maxExperts = 1 << 16
	maxTensors = 16 << 20 // the catalog (K3 has 497,220 tensors)
	// MaxConfigSize bounds the config.json bytes ParseConfig accepts.
	MaxConfigSize = 16 << 20
)

// attnKind is the attention type of a decoder layer.
type attnKind uint8

const (
	kDA attnKind = iota // Kimi Delta Attention, the linear-attention layer
	mLA                 // multi-head latent attention, the full-attention layer
)

// ExpertFormat is how routed expert weights are stored, by the name
// reports and errors print.
type ExpertFormat string

const (
	// ExpertsMXFP4 is compressed-tensors mxfp4-pack-quantized: weight_packed + weight_scale (U8).
	ExpertsMXFP4 ExpertFormat = "mxfp4"
	// ExpertsBF16 is unquantized BF16 weights (a config without quantization_config).
	ExpertsBF16 ExpertFormat = "bf16"
	// ExpertsNVFP4 is ModelOpt NVFP4: weight, weight_scale (E4M3 per 16), weight_scale_2, input_scale.
	ExpertsNVFP4 ExpertFormat = "nvfp4"
	// ExpertsFP8 is 128×128 block FP8 (--experts fp8), as other FP8 weights.
	ExpertsFP8 ExpertFormat = "fp8"
)

// layer is one entry of the layer schedule.
type layer struct {
	Index     int // 0-based, as tensor names number it
	Attention attnKind
	MoE       bool   // false for the first_k_dense_replace dense layers
	parts     uint64 // the family's layer parts this layer has, by index
	extra     bool   // a layer after the main ones (DeepSeek's MTP layer)
}

// Config is a validated config: the keys the product reads by meaning (the
// schema reads every key), named after the JSON; sizes are element counts.
type Config struct {
	// Multimodal is true for a top-level kimi_k3 config (tensor names under
	// language_model.), false for a bare kimi_linear text config.
	Multimodal bool

	NumLayers int
	Hidden    int64
	NumHeads  int64 // MLA

	// KDA (linear_attn_config)
	KDAHeads       int64
	FullAttnLayers []int // 1-based, as in the config

	AttnResBlockSize int

	// MoE
	FirstKDense     int
	NumExperts      int64
	MoEIntermediate int64
	LatentDim       int64 // routed_expert_hidden_size

	Experts   ExpertFormat
	GroupSize int64 // MXFP4 group (32)
	// Converted is the quant_method of a conversion's top-level config
	// ("modelopt_mixed", "fp8"), "" for a source or compressed-tensors one.
	Converted string

	Vision bool // the config has a vision_config

	// QuantizationPath is the dotted path of the quantization_config read
	// ("text_config.quantization_config" in the release), "" for none.
	QuantizationPath string
	// Classifier reads names with this config's schedule (immutable, shared).
	Classifier *Classifier

	raw    map[string]any
	layers []layer
	sch    *schema          // the family
	tmpl   *templates       // the schema as this config reads it
	values map[string]int64 // what a schema's reader read, by key
}

// ParseConfig parses and validates a config.json: a top-level kimi_k3 config
// with text_config, or a bare kimi_linear text config.
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, &fieldError{Field: "(file)", Msg: fmt.Sprintf("%d bytes, over the %d-byte limit", len(data), MaxConfigSize)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("config: not a JSON object: %v: %w", err, errInvalidConfig)
	}
	if raw == nil {
		return nil, fmt.Errorf("config: not a JSON object: %w", errInvalidConfig)
	}
	if dec.More() {
		return nil, fmt.Errorf("config: trailing data after the JSON object: %w", errInvalidConfig)
	}
	s := familyOf(modelType(raw))
	if s != nil && s.reader == "" {
		return s.readGeneric(raw)
	}
	return fromRaw(raw, cmp.Or(s, k3Schema))
}

// FamilyOfConfig names the family that reads a config.json by its
// model_type alone (Kimi-K3 for any unlisted one), even for a config
// ParseConfig refuses.
func FamilyOfConfig(data []byte) string {
	var raw map[string]any
	_ = json.Unmarshal(data, &raw) // raw stays nil for anything but a JSON object
	if s := familyOf(modelType(raw)); s != nil {
		return s.family
	}
	return k3Schema.family
}

// Raw returns a deep copy of the parsed JSON (numbers as json.Number, so they
// re-encode exactly). convert edits it and writes it back as config.json.
func (c *Config) Raw() map[string]any { return deepCopy(c.raw).(map[string]any) }

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	}
	return v
}

func fromRaw(raw map[string]any, s *schema) (*Config, error) {
	p := &fields{read: map[string]int64{}}
	top := jobj{m: raw}
	c := &Config{raw: raw, sch: s, Experts: ExpertsMXFP4}

	text := top
	if _, ok := raw["text_config"]; ok {
		c.Multimodal = true
		if mt := p.str(top, "model_type", true); p.err == nil && mt != "kimi_k3" {
			p.fail("model_type", "must be \"kimi_k3\" for a config with text_config, got %q", mt)
		}
		text, _ = p.object(top, "text_config", true)
		if mt := p.str(text, "model_type", true); p.err == nil && mt != "kimi_linear" {
			p.fail(text.name("model_type"), "must be \"kimi_linear\", got %q", mt)
		}
	} else if mt := p.str(top, "model_type", true); p.err == nil && mt != "kimi_linear" {
		p.fail("model_type", "must be \"kimi_k3\" (with text_config) or \"kimi_linear\", got %q", mt)
	}
	if p.err != nil {
		return nil, p.err
	}

	c.NumLayers = int(p.size(text, "num_hidden_layers", maxLayers))
	c.Hidden = p.size(text, "hidden_size", maxDim)
	p.size(text, "vocab_size", maxDim)
	p.positive(text, "rms_norm_eps")
	c.NumHeads = p.size(text, "num_attention_heads", maxDim)
	kvHeads := p.sizeOr(text, "num_key_value_heads", 1, maxDim, c.NumHeads)
	if p.err == nil && c.NumHeads%kvHeads != 0 {
		p.fail(text.name("num_key_value_heads"), "%d does not divide num_attention_heads %d", kvHeads, c.NumHeads)
	}
	for _, k := range []string{"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"} {
		p.size(text, k, maxDim)
	}
	p.boolean(text, "mla_use_output_gate", false)

	lin, _ := p.object(text, "linear_attn_config", true)
	if p.err == nil {
		p.size(lin, "head_dim", maxDim)
		c.KDAHeads = p.size(lin, "num_heads", maxDim)
		p.size(lin, "short_conv_kernel_size", maxDim)
		if !p.boolean(lin, "use_full_rank_gate", true) {
			p.fail(lin.name("use_full_rank_gate"), "only full-rank output gates (g_proj) are supported, got false")
		}
		if p.err == nil {
			c.parseSchedule(p, lin)
		}
	}
	c.AttnResBlockSize = int(p.size(text, "attn_res_block_size", maxLayers))

	c.FirstKDense = int(p.sizeOr(text, "first_k_dense_replace", 0, int64(c.NumLayers), 0))
	if c.FirstKDense > 0 {
		p.size(text, "intermediate_size", maxDim)
	}
	if c.FirstKDense < c.NumLayers {
		c.NumExperts = p.size(text, "num_experts", maxExperts)
		topK := p.size(text, "num_experts_per_token", maxExperts)
		if p.err == nil && topK >= c.NumExperts {
			p.fail(text.name("num_experts"), "must be greater than num_experts_per_token (%d), got %d", topK, c.NumExperts)
		}
		p.sizeOr(text, "num_shared_experts", 0, maxExperts, 0)
		c.MoEIntermediate = p.size(text, "moe_intermediate_size", maxDim)
		c.LatentDim = p.size(text, "routed_expert_hidden_size", maxDim)
		p.boolean(text, "latent_moe_use_norm", false)
	}
	p.boolean(text, "tie_word_embeddings", false)
	if p.err != nil {
		return nil, p.err
	}

	c.parseQuantization(p, top, text)
	if c.Multimodal {
		c.parseVision(p, top)
	}
	if p.err != nil {
		return nil, p.err
	}
	c.buildLayers()
	// The schema's expressions name the text config's keys as they are there.
	c.values = map[string]int64{"quantization.group_size": c.GroupSize, "vision_config": b2i(c.Vision)}
	for k, v := range p.read {
		c.values[strings.TrimPrefix(k, "text_config.")] = v
	}
	return c.finish(text.name("num_experts"))
}

// finish builds the classifier and the templates and bounds the catalog's
// size, blaming field when it is too big.
func (c *Config) finish(field string) (*Config, error) {
	c.Classifier = newClassifier(c.sch, c.layers)
	if err := c.resolve(); err != nil {
		return nil, err
	}
	if n := c.NumTensors(); n > maxTensors {
		return nil, &fieldError{Field: field, Msg: fmt.Sprintf("the checkpoint would have %d tensors, over the %d limit", n, maxTensors)}
	}
	return c, nil
}

// parseSchedule checks that full_attn_layers and kda_layers (when given)
// partition 1..num_hidden_layers.
func (c *Config) parseSchedule(p *fields, lin jobj) {
	full, ok := p.layerList(lin, "full_attn_layers", c.NumLayers, true)
	if !ok {
		return
	}
	c.FullAttnLayers = full
	kda, ok := p.layerList(lin, "kda_layers", c.NumLayers, false)
	if !ok {
		return
	}
	for i, l := range kda {
		if slices.Contains(full, l) {
			p.fail(fmt.Sprintf("%s[%d]", lin.name("kda_layers"), i), "layer %d is also in full_attn_layers", l)
			return
		}
	}
	if len(kda)+len(full) != c.NumLayers {
		p.fail(lin.name("kda_layers"), "kda_layers (%d) and full_attn_layers (%d) must cover all %d layers exactly once",
			len(kda), len(full), c.NumLayers)
	}
}

func (c *Config) buildLayers() {
	c.layers = make([]layer, c.NumLayers)
	for i := range c.layers {
		c.layers[i] = layer{Index: i, MoE: i >= c.FirstKDense} // KDA unless listed
	}
	for _, l := range c.FullAttnLayers {
		c.layers[l-1].Attention = mLA
	}
}
