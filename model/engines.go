package model

import (
	"path"
	"slices"
	"strconv"
	"strings"
)

// What the engines that run K3 (SGLang, vLLM, TensorRT-LLM, tokenspeed) call
// the checkpoint's modules at run time. A ModelOpt quantization manifest is
// looked up by those runtime names, so a converted checkpoint lists every
// quantized module under each spelling and under the names of the fused
// layers the engines build from it.

// ModuleSpellings returns every name an engine may look module up by, sorted:
// the checkpoint name; with the family's engine renames (K3:
// block_sparse_moe → mlp, as SGLang's and vLLM's weight mappers rename the
// MoE block); and, for each of those, with the multimodal text prefix
// (K3: language_model.model.) replaced by the bare one (model.; SGLang
// builds the language model with an empty prefix) and removed (vLLM strips
// it and probes layers.N…). A bare text checkpoint's model. names also get
// the stripped spelling. module may be a wildcard pattern: the same
// rewrites apply.
func (c *Classifier) ModuleSpellings(module string) []string {
	s := c.s
	names := []string{module}
	for _, r := range s.renames {
		if strings.Contains(module, r[0]) {
			names = append(names, strings.ReplaceAll(module, r[0], r[1]))
		}
	}
	mm := s.outer + s.text
	for _, n := range slices.Clone(names) {
		switch {
		case strings.HasPrefix(n, mm):
			rest := n[len(mm):]
			names = append(names, s.text+rest, rest)
		case strings.HasPrefix(n, s.outer):
			names = append(names, n[len(s.outer):])
		case strings.HasPrefix(n, s.text):
			names = append(names, n[len(s.text):])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// fusedGroup is a set of sibling projections an engine loads into one fused
// linear layer. The fused layer has one quantization method, so its members
// must be all quantized or all BF16: a group split by a recipe is loaded
// wrongly (or refused) by the engines named here.
type fusedGroup struct {
	// Name is the fused layer's name, a sibling of its members
	// (….self_attn.fused_qkvg_proj).
	Name string
	// Parent is the members' parent module ("self_attn", "shared_experts", "mlp").
	Parent string
	// members are the projections' names under Parent.
	members []string
	// Engines are the inference engines whose loaders build this fused layer.
	Engines []string
}

// splitModule cuts a module name (no ".weight") into its parent path and leaf.
func splitModule(module string) (parent, leaf string) {
	i := strings.LastIndexByte(module, '.')
	if i < 0 {
		return "", module
	}
	return module[:i], module[i+1:]
}

// groupsOf returns the fused groups module (a checkpoint module name, e.g.
// language_model.model.layers.3.self_attn.q_a_proj) belongs to.
func groupsOf(module string) (parent string, groups []int) {
	parent, leaf := splitModule(module)
	_, parentLeaf := splitModule(parent)
	for i, g := range k3Schema.fused {
		if g.Parent == parentLeaf && slices.Contains(g.members, leaf) {
			groups = append(groups, i)
		}
	}
	return parent, groups
}

// FusedNames returns the fused layers (checkpoint-spelled, e.g.
// ….self_attn.in_proj_qkvgfab) that contain at least one of the given
// quantized modules, sorted. For attention this is the set NVIDIA's Kimi-K3
// exporter lists in quantized_layers beside the members; its recipe keeps
// the MLPs BF16, so their gate_up_proj only appears for recipes that
// quantize them, and then for the same reason: engines resolve the fused
// layer's method by its own name.
func FusedNames(quantized []string) []string {
	var out []string
	for _, m := range quantized {
		parent, gs := groupsOf(m)
		for _, gi := range gs {
			out = append(out, parent+"."+k3Schema.fused[gi].Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Split is a fused group whose members a recipe treats differently.
type Split struct {
	// Module is the fused layer's checkpoint-spelled name.
	Module string
	Group  fusedGroup
	// Quantized and Kept are the members (leaf names) on each side.
	Quantized, Kept []string
}

// FindSplits reports every fused group with some members in quantized and
// others in kept (module names without ".weight"). members absent from both
// (not in the checkpoint) are ignored. Splits are sorted by module.
func FindSplits(quantized, kept []string) []Split {
	state := map[string]map[string]bool{} // fused module → member leaf → quantized
	idx := map[string]int{}
	note := func(mods []string, q bool) {
		for _, m := range mods {
			parent, gs := groupsOf(m)
			_, leaf := splitModule(m)
			for _, gi := range gs {
				key := parent + "." + k3Schema.fused[gi].Name + "\x00" + k3Schema.fused[gi].Parent
				if state[key] == nil {
					state[key] = map[string]bool{}
					idx[key] = gi
				}
				state[key][leaf] = q
			}
		}
	}
	note(quantized, true)
	note(kept, false)
	var out []Split
	for key, members := range state {
		var s Split
		g := k3Schema.fused[idx[key]]
		for _, leaf := range g.members {
			q, ok := members[leaf]
			switch {
			case !ok:
			case q:
				s.Quantized = append(s.Quantized, leaf)
			default:
				s.Kept = append(s.Kept, leaf)
			}
		}
		if len(s.Quantized) > 0 && len(s.Kept) > 0 {
			s.Module, _, _ = strings.Cut(key, "\x00")
			s.Group = g
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Split) int { return strings.Compare(a.Module+a.Group.Name, b.Module+b.Group.Name) })
	return out
}

// ModuleMatcher reports whether a ModelOpt exclude_modules wildcard (fnmatch:
// * matches any run of characters, dots included) matches a module name.
func ModuleMatcher(pattern string) func(module string) bool {
	// The exporter's patterns are literals with * at either end: match those
	// without the general matcher.
	lit, lead := strings.CutPrefix(pattern, "*")
	lit, trail := strings.CutSuffix(lit, "*")
	if !strings.ContainsAny(lit, `*?[\`) {
		switch {
		case lead && trail:
			return func(module string) bool { return strings.Contains(module, lit) }
		case lead:
			return func(module string) bool { return strings.HasSuffix(module, lit) }
		case trail:
			return func(module string) bool { return strings.HasPrefix(module, lit) }
		default:
			return func(module string) bool { return module == lit }
		}
	}
	// path.Match's * stops at '/', which module names never contain.
	return func(module string) bool {
		ok, err := path.Match(pattern, module)
		return err == nil && ok
	}
}

// ModelOptExcludes returns the exclude_modules patterns of NVIDIA's
// exporter for this family (families/*.json, engines.modelopt_exclude), in
// its order, before spelling expansion, one per dense layer where the file
// says {dense}; for K3 they end with the KDA f_a/b projections, which NVIDIA
// quantizes and so never lists but which another recipe may keep. A caller
// removes the patterns that match a module it quantized.
func (c *Config) ModelOptExcludes() []string {
	var out []string
	vars := c.prefixVars()
	for _, p := range c.sch.modelOptExclude {
		p = expand(p, vars)
		if !strings.Contains(p, "{dense}") {
			out = append(out, p)
			continue
		}
		for _, l := range c.layers {
			if !l.MoE {
				out = append(out, strings.ReplaceAll(p, "{dense}", strconv.Itoa(l.Index)))
			}
		}
	}
	return out
}
