package model

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
)

// configFile is a schema's "config" section: Kimi-K3's config is read in Go
// (reader "kimi_linear"), any other by readGeneric from its dims.
type configFile struct {
	Reader     string    `json:"reader"`
	ModelTypes []string  `json:"model_types"`
	Dims       []dimFile `json:"dims"`
	// FP8Block accepts DeepSeek's block-FP8 quantization_config, where the
	// name fp8 reads 1 (else 0).
	FP8Block bool `json:"fp8_block"`
}

// dimFile is one config key the reader reads.
type dimFile struct {
	Key  string `json:"key"`
	Role string `json:"role"`
	// Type is "size" (the default: an integer in [min, max]), "bool", or
	// "list": an array of integers each in [min, max], at least Length of
	// them (an expression), whose entry i the name key[i] reads (key[n] in a
	// layer's condition: the layer's own; past the list's end, 0) and whose
	// length the key itself reads.
	Type   string   `json:"type"`
	Length exprText `json:"length"`
	// Values, if set, are the only values a list's entries may take.
	Values []int64 `json:"values"`
	// Multiple, if set, is what a size must be a multiple of (the shapes
	// that divide it: FP4's two codes a byte, a scale per 32).
	Multiple exprText `json:"multiple"`
	// Min, Max and Default are expressions over the keys read before; Min
	// defaults to 1, Max to 2^24; without Default the key is required.
	Min     exprText `json:"min"`
	Max     exprText `json:"max"`
	Default exprText `json:"default"`
	// When, if set, is the condition under which the key is read (else it is 0).
	When exprText `json:"when"`
}

// exprText is an expression written as a JSON string or integer (decoded
// as float64).
type exprText = any

func exprString(v exprText) (string, error) {
	switch t := v.(type) {
	case nil:
		return "", nil
	case string:
		return t, nil
	case float64:
		if t == float64(int64(t)) {
			return fmt.Sprint(int64(t)), nil
		}
	}
	return "", fmt.Errorf("want an expression (a string or an integer), got %v", v)
}

// dimRule is a checked dimFile.
type dimRule struct {
	key, role, typ              string // typ: "size", "bool" or "list"
	min, max, def, when, length *expr
	multiple                    *expr
	values                      []int64
}

// roles are the dimensions the product reads by meaning, with the Config
// field each fills (nil: the schema names it, nothing reads it by its role).
var roles = map[string]func(c *Config, v int64){
	"layers":           func(c *Config, v int64) { c.NumLayers = int(v) },
	"hidden":           func(c *Config, v int64) { c.Hidden = v },
	"heads":            func(c *Config, v int64) { c.NumHeads = v },
	"experts":          func(c *Config, v int64) { c.NumExperts = v },
	"moe_intermediate": func(c *Config, v int64) { c.MoEIntermediate = v },
	"first_dense":      func(c *Config, v int64) { c.FirstKDense = int(v) },
	"vocab":            nil,
	"intermediate":     nil,
	"kv_heads":         nil,
	"top_k":            nil,
	"shared_experts":   nil,
	"tie_embeddings":   nil,
	// extra_layers are layers after the main ones (DeepSeek's MTP layers):
	// the name mtp reads 1 in them.
	"extra_layers": nil,
}

func (s *schema) loadConfig(f configFile) error {
	s.reader, s.modelTypes, s.fp8Block = f.Reader, f.ModelTypes, f.FP8Block
	switch {
	case len(s.modelTypes) == 0:
		return s.fail("config.model_types", fmt.Errorf("none"))
	case s.reader == "kimi_linear":
		return nil
	case s.reader != "":
		return s.fail("config.reader", fmt.Errorf("unknown reader %q (kimi_linear, or none for the dims)", s.reader))
	}
	seen := map[string]bool{}
	for i, d := range f.Dims {
		where := fmt.Sprintf("config.dims[%d] (%s)", i, d.Key)
		r := dimRule{key: d.Key, role: d.Role, typ: cmp.Or(d.Type, "size"), values: d.Values}
		if d.Key == "" || seen[d.Key] {
			return s.fail(where, fmt.Errorf("a key must be given, and once"))
		}
		seen[d.Key] = true
		if _, ok := roles[d.Role]; d.Role != "" && !ok {
			return s.fail(where, fmt.Errorf("unknown role %q", d.Role))
		}
		if !slices.Contains([]string{"size", "bool", "list"}, r.typ) {
			return s.fail(where, fmt.Errorf("type %q is not size, bool or list", d.Type))
		}
		for _, x := range []struct {
			src exprText
			dst **expr
		}{{d.Min, &r.min}, {d.Max, &r.max}, {d.Default, &r.def}, {d.When, &r.when}, {d.Length, &r.length}, {d.Multiple, &r.multiple}} {
			src, err := exprString(x.src)
			if err == nil {
				*x.dst, err = optExpr(src)
			}
			if err != nil {
				return s.fail(where, err)
			}
		}
		s.readDims = append(s.readDims, r)
	}
	if !seen[roleKey(s, "layers")] {
		return s.fail("config.dims", fmt.Errorf("no dimension has the role \"layers\""))
	}
	return nil
}

func roleKey(s *schema, role string) string {
	for _, d := range s.readDims {
		if d.role == role {
			return d.key
		}
	}
	return ""
}

// readGeneric reads a config by its family's dims: every layer a full
// attention layer, dense below first_dense, MoE from there, experts BF16.
func (s *schema) readGeneric(raw map[string]any) (*Config, error) {
	p := &fields{read: map[string]int64{}}
	top := jobj{m: raw}
	c := &Config{raw: raw, sch: s, values: map[string]int64{}, Experts: ExpertsBF16}
	read := func(name string) (int64, error) {
		if v, ok := c.values[name]; ok {
			return v, nil
		}
		return 0, fmt.Errorf("%s: not read yet", name)
	}
	evalOr := func(e *expr, def int64) int64 {
		if e == nil || p.err != nil {
			return def
		}
		v, err := e.eval(read)
		if err != nil {
			p.fail("(schema "+s.family+")", "%v", err)
		}
		return v
	}
	for _, d := range s.readDims {
		if d.when != nil && evalOr(d.when, 0) == 0 {
			c.values[d.key] = 0
			continue
		}
		var v int64
		switch {
		case d.typ == "list":
			v = readList(p, top, d, evalOr(d.min, 0), evalOr(d.max, maxDim), evalOr(d.length, 0), c.values)
		case d.typ == "bool":
			v = b2i(p.boolean(top, d.key, evalOr(d.def, 0) != 0))
		default: // required without a default
			v = p.dim(top, d.key, d.def == nil, evalOr(d.min, 1), evalOr(d.max, maxDim), evalOr(d.def, 0))
		}
		if m := evalOr(d.multiple, 1); p.err == nil && m > 0 && v%m != 0 {
			p.fail(d.key, "must be a multiple of %d, got %d", m, v)
		}
		if p.err != nil {
			return nil, p.err
		}
		c.values[d.key] = v
		if set := roles[d.role]; set != nil {
			set(c, v)
		}
	}
	c.values["fp8"] = 0
	if q, ok := p.object(top, "quantization_config", false); ok && !s.fp8Block {
		return nil, &fieldError{Field: "quantization_config", Msg: "family " + s.family + " reads BF16 checkpoints only: its schema describes no quantization"}
	} else if ok {
		if m := p.str(q, "quant_method", true); p.err == nil && m != quantFP8 {
			p.fail(q.name("quant_method"), "family %s reads block FP8 (%q) only, got %q", s.family, quantFP8, m)
		}
		if b, _ := q.m["weight_block_size"].([]any); p.err == nil && (len(b) != 2 || b[0] != json.Number("128") || b[1] != json.Number("128")) {
			p.fail(q.name("weight_block_size"), "must be [128, 128], got %s", describe(q.m["weight_block_size"]))
		}
		c.values["fp8"] = 1
	}
	if p.err != nil {
		return nil, p.err
	}
	main := c.NumLayers
	c.NumLayers += int(c.values[roleKey(s, "extra_layers")])
	c.AttnResBlockSize = max(c.NumLayers, 1)
	c.layers = make([]layer, c.NumLayers)
	for i := range c.layers {
		c.layers[i] = layer{Index: i, Attention: mLA, MoE: i >= c.FirstKDense, extra: i >= main}
	}
	return c.finish(roleKey(s, "layers"))
}

// modelType is the config's top-level model_type, "" when there is none.
func modelType(raw map[string]any) string {
	t, _ := raw["model_type"].(string)
	return t
}
