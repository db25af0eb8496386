package model

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

//go:embed families/k3.json
var k3SchemaJSON []byte

// schemaFile is a schema file as written.
type schemaFile struct {
	Family   string                       `json:"family"`
	Doc      string                       `json:"doc"`
	Config   configFile                   `json:"config"`
	Prefixes map[string]map[string]string `json:"prefixes"`
	Dims     map[string]string            `json:"dims"`
	Groups   [][2]string                  `json:"groups"`
	Units    map[string][]struct {
		Name  string            `json:"name"`
		Group string            `json:"group"`
		DType safetensors.DType `json:"dtype"`
		Shape []string          `json:"shape"`
		When  string            `json:"when"`
		Live  string            `json:"live"`
		// FP8 marks a weight stored as block FP8 (fp8Rules) when the config
		// declares fp8, else BF16.
		FP8 bool `json:"fp8"`
	} `json:"units"`
	Layer struct {
		Prefix string `json:"prefix"`
		// ExtraPrefix, when set, names the extra (MTP) layers instead of
		// Prefix, {n} counted from 0 among them ({P}mtp.{n}.).
		ExtraPrefix string     `json:"extra_prefix"`
		Parts       []partFile `json:"parts"`
	} `json:"layer"`
	Shards []struct {
		Parts  []partFile `json:"parts"`
		Groups []string   `json:"groups"`
		When   string     `json:"when"`
	} `json:"shards"`
	Files *filesFile `json:"files"`
	Names struct {
		Aliases           map[string]string `json:"aliases"`
		RootModules       map[string]string `json:"root_modules"`
		RootPrefixes      map[string]string `json:"root_prefixes"`
		Experts           []string          `json:"experts"`
		ExpertProjections map[string]string `json:"expert_projections"`
	} `json:"names"`
	Engines enginesFile `json:"engines"`
}

// enginesFile is the engines' spellings of the family's modules.
type enginesFile struct {
	Doc             string       `json:"doc"`
	Renames         [][2]string  `json:"renames"` // checkpoint → runtime module name parts
	Fused           []fusedGroup `json:"fused"`
	ModelOptExclude []string     `json:"modelopt_exclude"`
	SharedScale     [][2]string  `json:"shared_scale"`
}

// filesFile is the release's split of the tensors into files, where it
// differs from one file per layer (releasefiles.go reads it).
type filesFile struct {
	Doc         string `json:"doc"`
	MaxElements int64  `json:"max_elements"`
	Stages      []struct {
		Take []struct {
			Group  string   `json:"group"`
			Layers *[2]int  `json:"layers"`
			Only   []string `json:"only"`
		} `json:"take"`
		Files int `json:"files"`
	} `json:"stages"`
}

type partFile struct {
	Unit   string `json:"unit"`
	When   string `json:"when"`
	Repeat string `json:"repeat"`
	Prefix string `json:"prefix"`
}

// schema is a checked schema file, ready to interpret.
type schema struct {
	family string
	// reader is "kimi_linear" for K3's Go reader, "" for readDims.
	reader     string
	modelTypes []string
	readDims   []dimRule
	fp8Block   bool
	// prefixes are the name variables ({P}, {LM}) by Multimodal.
	prefixes [2]map[string]string
	dims     map[string]expr
	units    map[string][]tensorRule
	// layerPrefix is the name prefix of layer {n}; layerParts its parts.
	layerPrefix string
	layerParts  []partRule
	// extraPrefix names the extra layers ("" for layerPrefix); extra is its
	// part between the text prefix and the number.
	extraPrefix, extra string
	shards             []shardRule
	files              *filesRule

	// The classifier's tables.
	layerKeys    map[string]layerGroup // after "layers.N.": module, or a parameter's whole tail
	textTop      map[string]Group      // after the text prefix, outside the layers
	rootModules  map[string]Group
	rootPrefixes map[string]Group
	expertPaths  []string // after "layers.N.", before the expert's number
	expertProj   map[string]expertProjection
	// expertsPart is the catalog's spelling of expertPaths.
	expertsPart string
	// outer + text is the multimodal text prefix, text the bare one; layers
	// is what follows it before a layer's number.
	outer, text, layers string
	engines             enginesFile
}

type groupDef struct {
	name string
	comp Component
}

// tensorRule is a tensor of a unit: its name after the unit's prefix, its
// group, dtype and shape, and when it exists.
type tensorRule struct {
	name  string
	group Group
	dtype safetensors.DType
	shape []expr
	when  *expr
	live  *expr // the values before the zero padding, when padded
}

// partRule is a unit placed in a layer or a shard, once or repeat times
// under prefix ({n} the repetition).
type partRule struct {
	unit   string
	when   *expr
	repeat *expr
	prefix string
}

type shardRule struct {
	parts  []partRule
	groups []Group
	when   *expr
}

func optExpr(s string) (*expr, error) {
	if s == "" {
		return nil, nil
	}
	e, err := parseExpr(s)
	return &e, err
}

// loadSchema reads and checks a schema file: unknown fields, unknown groups
// and dtypes, and expressions that do not parse are errors that name where.
func loadSchema(data []byte) (*schema, error) {
	var f schemaFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	if f.Family == "" {
		return nil, fmt.Errorf("schema: no \"family\"")
	}
	s := &schema{family: f.Family, dims: map[string]expr{}, units: map[string][]tensorRule{},
		layerKeys: map[string]layerGroup{}, textTop: map[string]Group{}, rootModules: map[string]Group{},
		rootPrefixes: map[string]Group{}, expertProj: map[string]expertProjection{}}
	if err := s.loadConfig(f.Config); err != nil {
		return nil, err
	}
	if s.prefixes[0] = f.Prefixes["text"]; s.prefixes[0] == nil {
		return nil, s.fail("prefixes", fmt.Errorf("no \"text\" prefixes"))
	}
	if s.prefixes[1] = f.Prefixes["multimodal"]; s.prefixes[1] == nil {
		s.prefixes[1] = s.prefixes[0]
	}
	for k, v := range f.Dims {
		e, err := parseExpr(v)
		if err != nil {
			return nil, s.fail("dims."+k, err)
		}
		s.dims[k] = e
	}
	// A family's groups join the package's: a name another family has is
	// the same group (with the same component), a new one is added.
	byName := map[string]Group{}
	for i, g := range f.Groups {
		comp, err := ParseComponent(g[1])
		if _, dup := byName[g[0]]; err == nil && (dup || g[0] == "") {
			err = fmt.Errorf("group %q named twice or empty", g[0])
		}
		if err == nil {
			byName[g[0]], err = internGroup(g[0], comp)
		}
		if err != nil {
			return nil, s.fail(fmt.Sprintf("groups[%d]", i), err)
		}
	}
	group := func(where, name string) (Group, error) {
		g, ok := byName[name]
		if !ok {
			return 0, s.fail(where, fmt.Errorf("unknown group %q", name))
		}
		return g, nil
	}
	for u, ts := range f.Units {
		for i, t := range ts {
			where := fmt.Sprintf("units.%s[%d] (%s)", u, i, t.Name)
			r := tensorRule{name: t.Name, dtype: t.DType, shape: make([]expr, len(t.Shape))}
			var err error
			if r.group, err = group(where, t.Group); err != nil {
				return nil, err
			}
			for j := 0; err == nil && j < len(t.Shape); j++ {
				r.shape[j], err = parseExpr(t.Shape[j])
			}
			if err == nil {
				r.when, err = optExpr(t.When)
			}
			if err == nil {
				r.live, err = optExpr(t.Live)
			}
			rules := []tensorRule{r}
			if err == nil && t.FP8 {
				rules, err = fp8Rules(r, t.When)
			}
			if err != nil {
				return nil, s.fail(where, err)
			}
			s.units[u] = append(s.units[u], rules...)
		}
	}
	parts := func(where string, ps []partFile) ([]partRule, error) {
		var out []partRule
		for i, p := range ps {
			w := fmt.Sprintf("%s[%d]", where, i)
			r := partRule{unit: p.Unit, prefix: p.Prefix}
			if !slices.ContainsFunc([]ExpertFormat{ExpertsMXFP4, ExpertsBF16, ExpertsNVFP4}, func(f ExpertFormat) bool {
				_, ok := s.units[expand(p.Unit, map[string]string{"experts": string(f)})]
				return ok // under one of the experts' formats, at least
			}) {
				return nil, s.fail(w, fmt.Errorf("unknown unit %q", p.Unit))
			}
			var err error
			if r.when, err = optExpr(p.When); err == nil {
				r.repeat, err = optExpr(p.Repeat)
			}
			if err == nil && (r.repeat != nil) != strings.Contains(p.Prefix, "{n}") {
				err = fmt.Errorf("a repeated part needs a prefix with {n}, and only it")
			}
			if err != nil {
				return nil, s.fail(w, err)
			}
			out = append(out, r)
		}
		return out, nil
	}
	var err error
	s.layerPrefix = f.Layer.Prefix
	if s.layerParts, err = parts("layer.parts", f.Layer.Parts); err != nil {
		return nil, err
	}
	for i, sh := range f.Shards {
		r := shardRule{}
		if r.parts, err = parts(fmt.Sprintf("shards[%d].parts", i), sh.Parts); err != nil {
			return nil, err
		}
		r.groups = make([]Group, len(sh.Groups))
		for j, g := range sh.Groups {
			if r.groups[j], err = group(fmt.Sprintf("shards[%d].groups", i), g); err != nil {
				return nil, err
			}
		}
		if r.when, err = optExpr(sh.When); err != nil {
			return nil, s.fail(fmt.Sprintf("shards[%d]", i), err)
		}
		s.shards = append(s.shards, r)
	}
	if f.Files != nil {
		if s.files, err = loadFiles(f.Files, group); err != nil {
			return nil, s.fail("files", err)
		}
	}
	s.text = s.prefixes[0]["P"]
	s.outer, _ = strings.CutSuffix(s.prefixes[1]["P"], s.text)
	lp, ok := strings.CutPrefix(f.Layer.Prefix, "{P}")
	if s.layers, _, _ = strings.Cut(lp, "{n}"); !ok || s.layers == "" || !strings.HasSuffix(f.Layer.Prefix, "{n}.") {
		return nil, s.fail("layer.prefix", fmt.Errorf("must be {P}<name>{n}. with a name"))
	}
	if s.extraPrefix = f.Layer.ExtraPrefix; s.extraPrefix != "" {
		ep, ok := strings.CutPrefix(s.extraPrefix, "{P}")
		if s.extra, _, _ = strings.Cut(ep, "{n}"); !ok || s.extra == "" || s.extra == s.layers || !strings.HasSuffix(ep, "{n}.") {
			return nil, s.fail("layer.extra_prefix", fmt.Errorf("must be {P}<name>{n}. with a name other than the layers'"))
		}
	}
	if err := s.nameTables(&f, group); err != nil {
		return nil, err
	}
	s.engines = f.Engines
	return s, nil
}

// fail says in which schema, and where in it, err is.
func (s *schema) fail(where string, err error) error {
	return fmt.Errorf("schema %s: %s: %w", s.family, where, err)
}

// nameTables derives the classifier's tables from the units: a layer
// part's tensors by their name after the layer prefix (those of a part
// that exists in MLA layers only on the MLA side, so the schedule decides
// names both attention kinds have), the text model's other tensors by the
// name after the text prefix, then the spellings the file adds.
func (s *schema) nameTables(f *schemaFile, group func(where, name string) (Group, error)) error {
	key := func(name string) string {
		if module, role := SplitRole(name); role != roleParam {
			return module
		}
		return name
	}
	for _, p := range s.layerParts {
		if p.repeat != nil {
			if s.expertsPart != "" {
				return s.fail("layer.parts", fmt.Errorf("one repeated part per layer (the routed experts)"))
			}
			s.expertsPart, _, _ = strings.Cut(p.prefix, "{n}")
			continue
		}
		mla := p.when != nil && p.when.src == "mla"
		for _, t := range s.units[p.unit] {
			k := key(t.name)
			lg := s.layerKeys[k]
			if mla {
				lg.mla = t.group
			} else {
				lg.kda = t.group
			}
			s.layerKeys[k] = lg
		}
	}
	for _, sh := range s.shards {
		for _, p := range sh.parts {
			for _, t := range s.units[p.unit] {
				if rest, ok := strings.CutPrefix(t.name, "{P}"); ok {
					s.textTop[key(rest)] = t.group
				}
			}
		}
	}
	for alias, of := range f.Names.Aliases {
		lg, ok := s.layerKeys[of]
		if !ok {
			return s.fail("names.aliases."+alias, fmt.Errorf("%q is no layer tensor", of))
		}
		s.layerKeys[alias] = lg
	}
	var err error
	for m, g := range f.Names.RootModules {
		if s.rootModules[m], err = group("names.root_modules", g); err != nil {
			return err
		}
	}
	for p, g := range f.Names.RootPrefixes {
		if s.rootPrefixes[p], err = group("names.root_prefixes", g); err != nil {
			return err
		}
	}
	s.expertPaths = f.Names.Experts
	if s.expertsPart != "" && !slices.Contains(s.expertPaths, s.expertsPart) {
		s.expertPaths = append([]string{s.expertsPart}, s.expertPaths...)
	}
	for n, p := range f.Names.ExpertProjections {
		i := slices.Index(projNames[:], p)
		if i <= 0 {
			return s.fail("names.expert_projections."+n, fmt.Errorf("%q is not w1, w2 or w3", p))
		}
		s.expertProj[n] = expertProjection(i)
	}
	return nil
}

// fp8Rules expands a block-FP8 weight X.weight [N, K] into its two forms:
// BF16 without fp8, else F8_E4M3 and X.weight_scale_inv F32
// [⌈N/128⌉, ⌈K/128⌉] (DeepSeek's convention, model.DeepSeek).
func fp8Rules(r tensorRule, when string) ([]tensorRule, error) {
	if len(r.shape) != 2 || !strings.HasSuffix(r.name, ".weight") {
		return nil, fmt.Errorf("an fp8 tensor is a 2-D X.weight")
	}
	pre := "" // the tensor's own condition, as a factor
	if c, neg := strings.CutPrefix(when, "!"); neg {
		pre = "(1-(" + c + "))*"
	} else if when != "" {
		pre = "(" + when + ")*"
	}
	bf, fp, sc := r, r, r
	bf.dtype, fp.dtype = safetensors.BF16, safetensors.F8_E4M3
	sc.name, sc.dtype, sc.shape = DeepSeek.ScaleName(r.name), safetensors.F32, make([]expr, 2)
	var err error
	if bf.when, err = optExpr(pre + "(1-fp8)"); err == nil {
		fp.when, err = optExpr(pre + "fp8")
	}
	for i := 0; err == nil && i < 2; i++ {
		sc.shape[i], err = parseExpr("((" + r.shape[i].src + ")+127)/128")
	}
	sc.when = fp.when
	return []tensorRule{bf, fp, sc}, err
}

// k3Schema is the built-in Kimi-K3 family; its groups are the package's
// Group constants.
var k3Schema = func() *schema {
	s := mustSchema(k3SchemaJSON)
	if len(groupInfo) != numK3Groups || GroupExperts.String() != "experts" {
		panic(fmt.Sprintf("model: families/k3.json lists %d groups (the package %d), group %d is %s, not experts", len(groupInfo), numK3Groups, GroupExperts, GroupExperts))
	}
	return s
}()

//go:embed families/deepseek-v3.json
var deepseekV3JSON []byte

//go:embed families/deepseek-v4.json
var deepseekV4JSON []byte

// families are the schema files UseSchema loaded, the latest first, then
// the built-in families besides Kimi-K3 (which reads any other config).
var families = func() []*schema {
	_ = k3Schema // its groups are the first
	return []*schema{mustSchema(deepseekV3JSON), mustSchema(deepseekV4JSON)}
}()

// UseSchema reads a schema file (see model/families/k3.json) for every later
// ParseConfig: a config whose model_type it lists is read with it, before
// the built-in families, and a family of the same name is replaced. Call it
// at start-up, before anything else of the package runs.
func UseSchema(data []byte) error {
	s, err := loadSchema(data)
	if err != nil {
		return err
	}
	families = slices.DeleteFunc(families, func(o *schema) bool { return o.family == s.family })
	families = append([]*schema{s}, families...)
	return nil
}

// familyOf is the loaded family that lists model_type mt, nil for none.
func familyOf(mt string) *schema {
	for _, s := range families {
		if slices.Contains(s.modelTypes, mt) {
			return s
		}
	}
	return nil
}

func mustSchema(b []byte) *schema {
	s, err := loadSchema(b)
	if err != nil {
		panic(err)
	}
	return s
}
