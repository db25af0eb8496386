package engines

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// convention is how a checkpoint's configs describe its quantization.
type convention string

// The conventions rules distinguish.
const (
	release           convention = "release"            // compressed-tensors with only the MXFP4 experts group (moonshotai/Kimi-K3)
	modelOpt          convention = "modelopt"           // quant_method modelopt_mixed / hf_quant_config.json MIXED_PRECISION
	deepSeek          convention = "deepseek"           // quant_method fp8 with weight_block_size
	compressedTensors convention = "compressed-tensors" // compressed-tensors with an FP8 block group beside MXFP4
	noQuant           convention = "none"               // no quantization config at all (a BF16 checkpoint)
	other             convention = "other"              // a quantization config no rule knows
)

// form is how one module's weight is stored.
type form string

// The forms.
const (
	BF16       form = "bf16"        // BF16, F16 or F32 weight
	fP8        form = "fp8"         // F8_E4M3 weight with a block scale
	fP8NoScale form = "fp8-noscale" // F8_E4M3 weight without any scale tensor
	mXFP4      form = "mxfp4"       // U8 weight_packed + U8 (E8M0) weight_scale
	nVFP4      form = "nvfp4"       // U8 weight + F8_E4M3 weight_scale + weight_scale_2
	fP4        form = "fp4"         // DeepSeek-V4: I8 weight (E2M1 pairs) + F8_E8M0 scale per 32
	odd        form = "other"       // anything else
)

// scale is the layout of an FP8 weight's block scale.
type scale string

// The scale layouts.
const (
	scale4D  scale = "weight_scale-4d"  // ModelOpt: F32 [⌈N/128⌉, 1, ⌈K/128⌉, 1]
	scale2D  scale = "weight_scale-2d"  // compressed-tensors: F32 [⌈N/128⌉, ⌈K/128⌉]
	scaleInv scale = "weight_scale_inv" // DeepSeek: F32 [⌈N/128⌉, ⌈K/128⌉]
	scaleE8  scale = "scale-e8m0"       // DeepSeek-V4: X.scale F8_E8M0 [⌈N/128⌉, ⌈K/128⌉]
)

// part is the modules of one group that share a form, scale and declaration.
type part struct {
	Group    model.Group `json:"group"`
	Form     form        `json:"form"`
	Scale    scale       `json:"scale,omitempty"`
	Declared string      `json:"declared,omitempty"`
	Modules  int         `json:"modules"`
	Bytes    int64       `json:"bytes"`
	Example  string      `json:"example"` // one module's name
}

// Facts are what the rules are evaluated over: a checkpoint's convention
// and its parts, and the inconsistencies found on the way (Problems).
type Facts struct {
	Convention convention `json:"convention"`
	Method     string     `json:"quant_method,omitempty"` // the quant_method read (or "")
	Parts      []part     `json:"parts"`
	Problems   []string   `json:"problems,omitempty"`

	family string // the config's model family ("" when none), which rules must match
}

// has reports whether some part of a group in gs has one of the forms.
func (f *Facts) has(gs model.GroupSet, fs []form) bool {
	return slices.ContainsFunc(f.Parts, func(p part) bool { return gs.Has(p.Group) && slices.Contains(fs, p.Form) })
}

// configFacts is what readConfigs finds in config.json and hf_quant_config.json.
type configFacts struct {
	conv     convention
	method   string
	declared map[string]string // ModelOpt quantized_layers: module → quant_algo
}

func readConfigs(config, hfq []byte) (configFacts, error) {
	var cf configFacts
	var cfg map[string]any
	if err := json.Unmarshal(config, &cfg); err != nil {
		return cf, fmt.Errorf("config.json: %w", err)
	}
	q, _ := cfg["quantization_config"].(map[string]any)
	if tc, _ := cfg["text_config"].(map[string]any); q == nil {
		q, _ = tc["quantization_config"].(map[string]any) // a nil map reads as empty
	}
	var hq map[string]any
	if hfq != nil {
		var top map[string]any
		if err := json.Unmarshal(hfq, &top); err != nil {
			return cf, fmt.Errorf("hf_quant_config.json: %w", err)
		}
		hq, _ = top["quantization"].(map[string]any)
	}
	cf.method, _ = q["quant_method"].(string)
	switch {
	case cf.method == "modelopt_mixed" || hq["quant_algo"] == "MIXED_PRECISION":
		cf.conv = modelOpt
		src := hq
		if src == nil {
			src = q
		}
		cf.declared = map[string]string{}
		layers, _ := src["quantized_layers"].(map[string]any)
		for k, v := range layers {
			if e, ok := v.(map[string]any); ok {
				cf.declared[k], _ = e["quant_algo"].(string)
			}
		}
		if cf.method == "" {
			cf.method = "modelopt_mixed"
		}
	case q == nil:
		cf.conv = noQuant
	case cf.method == "fp8":
		cf.conv = deepSeek
	case cf.method == "compressed-tensors":
		cf.conv = release
		groups, _ := q["config_groups"].(map[string]any)
		for _, g := range groups {
			gm, _ := g.(map[string]any)
			w, _ := gm["weights"].(map[string]any)
			if w["strategy"] == "block" {
				cf.conv = compressedTensors
			}
		}
	default:
		cf.conv = other
	}
	return cf, nil
}

// tensor is what the scanner keeps of a header entry (names and shapes of a
// transient walk do not outlive the file).
type tensor struct {
	ok   bool
	dt   safetensors.DType
	rank int
}

// module is one module's weight and companions, as the headers give them.
type module struct {
	weight, packed, scale, scaleInv, scale2 tensor
	v4scale                                 tensor // DeepSeek-V4's X.scale
	bytes                                   int64
}

func (m *module) form() (form, scale) {
	switch {
	case m.packed.ok && m.packed.dt == safetensors.U8 && m.scale.ok && m.scale.dt == safetensors.U8:
		return mXFP4, ""
	case !m.weight.ok:
		return odd, ""
	case m.weight.dt == safetensors.U8 && m.scale.ok && m.scale.dt == safetensors.F8_E4M3 && m.scale2.ok:
		return nVFP4, ""
	case m.weight.dt.String() == "I8" && m.v4scale.ok:
		return fP4, ""
	case m.weight.dt == safetensors.F8_E4M3:
		switch {
		case m.v4scale.ok:
			return fP8, scaleE8
		case m.scaleInv.ok:
			return fP8, scaleInv
		case m.scale.ok && m.scale.rank == 4:
			return fP8, scale4D
		case m.scale.ok:
			return fP8, scale2D
		}
		return fP8NoScale, ""
	case m.weight.dt == safetensors.BF16 || m.weight.dt == safetensors.F16 || m.weight.dt == safetensors.F32:
		if !m.scale.ok && !m.scaleInv.ok && !m.v4scale.ok {
			return BF16, ""
		}
	}
	return odd, ""
}

// scanner accumulates parts from tensor headers, one file at a time: a
// module's tensors are paired within their file, and only modules left
// incomplete at a file's end are carried over, so it holds the parts (a few
// dozen) plus those strays.
type scanner struct {
	cf      configFacts
	cls     *model.Classifier
	family  string
	mu      sync.Mutex
	pending map[string]*module
	parts   map[part]*part // by group, form, scale and declaration
}

// linear reports whether the group is a linear weight a conversion may
// quantize (what the rules speak about).
func linear(g model.Group) bool {
	switch g.String() {
	case "kda.conv1d", "kda.dt_bias", "kda.A_log", "kda.o_norm", "mla.q_a_layernorm", "mla.kv_a_layernorm", "latent.norm":
		return false
	}
	switch g.Component().String() {
	case "attention.kda", "attention.mla", "dense_mlp", "shared_experts", "routed_experts", "latent":
		return true
	}
	return false
}

// file adds one file's tensors; it may be called from several goroutines.
func (s *scanner) file(ts []safetensors.TensorInfo) {
	local := map[string]*module{}
	for i := range ts {
		t := &ts[i]
		// DeepSeek-V4's X.scale is X.weight's companion.
		base, v4 := strings.CutSuffix(t.Name, ".scale")
		tn := s.cls.ParseName(t.Name)
		if v4 {
			tn = s.cls.ParseName(base + ".weight")
		}
		if !linear(tn.Group) {
			continue
		}
		m := local[tn.Module]
		if m == nil {
			m = &module{}
		}
		var dst *tensor
		switch tn.Role.String() { // the name's last segment
		case "weight":
			dst = &m.weight
		case "weight_packed":
			dst = &m.packed
		case "weight_scale":
			dst = &m.scale
		case "weight_scale_inv":
			dst = &m.scaleInv
		case "weight_scale_2":
			dst = &m.scale2
		default:
			continue // a parameter beside the linear weights (DeepSeek-V4's attn_sink)
		}
		if v4 {
			dst = &m.v4scale
		}
		local[tn.Module] = m
		m.bytes += t.Size()
		*dst = tensor{ok: true, dt: t.DType, rank: len(t.Shape)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, m := range local {
		if p := s.pending[name]; p != nil {
			delete(s.pending, name)
			m.merge(p)
		}
		f, sc := m.form()
		if (!m.weight.ok && !m.packed.ok) || f == fP8NoScale {
			s.pending[strings.Clone(name)] = m // the rest may be in a later file
			continue
		}
		s.add(name, m, f, sc)
	}
}

// merge takes in what another file held of the same module.
func (m *module) merge(o *module) {
	for _, p := range [...][2]*tensor{{&m.weight, &o.weight}, {&m.packed, &o.packed}, {&m.scale, &o.scale}, {&m.scaleInv, &o.scaleInv}, {&m.scale2, &o.scale2}, {&m.v4scale, &o.v4scale}} {
		if !p[0].ok {
			*p[0] = *p[1]
		}
	}
	m.bytes += o.bytes
}

// add records a finished module.
func (s *scanner) add(name string, m *module, f form, sc scale) {
	tn := s.cls.ParseName(name + ".weight")
	k := part{Group: tn.Group, Form: f, Scale: sc, Declared: s.declaredFor(tn)}
	p := s.parts[k]
	if p == nil {
		p = &part{Group: k.Group, Form: f, Scale: sc, Declared: k.Declared, Example: strings.Clone(name)}
		s.parts[k] = p
	}
	p.Modules++
	p.Bytes += m.bytes
	if name < p.Example {
		p.Example = strings.Clone(name)
	}
}

// declaredFor is the ModelOpt algorithm declared for a module: its own
// entry, or for a routed expert the bank's (….experts).
func (s *scanner) declaredFor(tn model.TensorName) string {
	if s.cf.declared == nil {
		return ""
	}
	if a, ok := s.cf.declared[tn.Module]; ok {
		return a
	}
	if tn.Group == model.GroupExperts {
		if i := strings.Index(tn.Module, ".experts."); i >= 0 {
			return s.cf.declared[tn.Module[:i+len(".experts")]]
		}
	}
	return ""
}

// finish settles what is still pending and returns the facts.
func (s *scanner) finish() *Facts {
	f := &Facts{Convention: s.cf.conv, Method: s.cf.method, family: s.family}
	for _, n := range slices.Sorted(maps.Keys(s.pending)) {
		m := s.pending[n]
		fm, sc := m.form()
		switch {
		case !m.weight.ok && !m.packed.ok:
			f.Problems = append(f.Problems, fmt.Sprintf("%s: scale or companion tensors without their weight", n))
			continue
		case fm == fP8NoScale:
			f.Problems = append(f.Problems, fmt.Sprintf("%s.weight is F8_E4M3 but the checkpoint has no %s.weight_scale or %s.weight_scale_inv: no engine can dequantize it; reconvert from the source", n, n, n))
		}
		s.add(n, m, fm, sc)
	}
	for _, p := range s.parts {
		f.Parts = append(f.Parts, *p)
	}
	slices.SortFunc(f.Parts, func(a, b part) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), strings.Compare(string(a.Form)+string(a.Scale)+a.Declared, string(b.Form)+string(b.Scale)+b.Declared))
	})
	if f.Convention == modelOpt {
		for _, p := range f.Parts {
			want := map[form]string{fP8: "FP8_PB_WO", nVFP4: "NVFP4"}[p.Form]
			if want != "" && p.Declared != want && p.Group != model.GroupExperts {
				f.Problems = append(f.Problems, fmt.Sprintf("%s: %d %s modules (e.g. %s) are not declared %s in quantized_layers", p.Group, p.Modules, p.Form, p.Example, want))
			}
		}
	}
	return f
}

// Scan reads a checkpoint's facts from config.json, hf_quant_config.json
// (when present), the index and the shard headers, one header at a time:
// no tensor data is read. path is anything safetensors.OpenShards opens (a
// directory, an index, a hub snapshot, an https:// or hf:// URL).
func Scan(ctx context.Context, path string) (*Facts, error) {
	s, err := safetensors.OpenShards(ctx, path)
	if err != nil {
		return nil, err
	}
	config, err := s.ReadAux(model.ConfigName)
	if err != nil {
		if errors.Is(err, safetensors.ErrNotFound) {
			return nil, fmt.Errorf("%s: no %s: the engines decide how to load a checkpoint from it; check needs it", path, model.ConfigName)
		}
		return nil, err
	}
	hfq, err := s.ReadAux(convert.HFQuantConfigName)
	if err != nil && !errors.Is(err, safetensors.ErrNotFound) {
		return nil, err
	}
	sc, err := scannerFor(config, hfq)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := s.Walk(ctx, true, func(_ int, f *safetensors.File) error {
		sc.file(f.Tensors)
		return nil
	}); err != nil {
		return nil, err
	}
	return sc.finish(), nil
}

// FactsOf reads the facts of a checkpoint given as its configs and each
// file's tensors (a conversion plan's outputs, before they are written).
func FactsOf(config, hfq []byte, files [][]safetensors.TensorInfo) (*Facts, error) {
	sc, err := scannerFor(config, hfq)
	if err != nil {
		return nil, err
	}
	for _, ts := range files {
		sc.file(ts)
	}
	return sc.finish(), nil
}

// scannerFor reads the configs; names are classified with the config's
// layer schedule, or K3's public one when the schema rejects the config (a
// hand-edited config still gets its verdicts).
func scannerFor(config, hfq []byte) (*scanner, error) {
	cf, err := readConfigs(config, hfq)
	if err != nil {
		return nil, err
	}
	cls := model.K3Classifier()
	if cfg, err := model.ParseConfig(config); err == nil {
		cls = cfg.Classifier
	}
	return &scanner{cf: cf, cls: cls, family: model.FamilyOfConfig(config), pending: map[string]*module{}, parts: map[part]*part{}}, nil
}
