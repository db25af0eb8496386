package model

import (
	"path"
	"slices"
	"strconv"
	"strings"
)

// What the engines that run K3 call the checkpoint's modules at run time: a
// ModelOpt quantization manifest is looked up by those names, so a converted
// checkpoint lists every quantized module under each spelling and under the
// names of the fused layers the engines build from it.

// ModuleSpellings returns every name an engine may look module (or a
// wildcard pattern) up by, sorted: the checkpoint name and its engine
// renames (K3: block_sparse_moe → mlp, as SGLang's and vLLM's weight mappers
// do), each also with the multimodal text prefix replaced by the bare one
// (SGLang builds the language model with an empty prefix) and removed (vLLM
// strips it and probes layers.N…).
func (c *Classifier) ModuleSpellings(module string) []string {
	s := c.s
	names := []string{module}
	for _, r := range s.engines.Renames {
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
// linear layer of one quantization method: a group split by a recipe is
// loaded wrongly (or refused) by the engines named here.
type fusedGroup struct {
	// Name is the fused layer's name, a sibling of its members
	// (….self_attn.fused_qkvg_proj).
	Name string `json:"name"`
	// Parent is the members' parent module ("self_attn", "shared_experts", "mlp").
	Parent string `json:"parent"`
	// Members are the projections' names under Parent.
	Members []string `json:"members"`
	// Engines are the inference engines whose loaders build this fused layer.
	Engines []string `json:"engines"`
}

// groupsOf returns the parent of module (a checkpoint module name, e.g.
// ….layers.3.self_attn.q_a_proj) and the fused groups it is a member of.
func groupsOf(module string) (parent, leaf string, groups []fusedGroup) {
	i := strings.LastIndexByte(module, '.')
	parent, leaf = module[:max(i, 0)], module[i+1:]
	parentLeaf := parent[strings.LastIndexByte(parent, '.')+1:]
	for _, g := range k3Schema.engines.Fused {
		if g.Parent == parentLeaf && slices.Contains(g.Members, leaf) {
			groups = append(groups, g)
		}
	}
	return parent, leaf, groups
}

// FusedNames returns the fused layers (checkpoint-spelled, e.g.
// ….self_attn.in_proj_qkvgfab) that contain at least one of the given
// quantized modules, sorted: engines resolve a fused layer's method by its
// own name, so NVIDIA's Kimi-K3 exporter lists them in quantized_layers
// beside the members.
func FusedNames(quantized []string) []string {
	var out []string
	for _, m := range quantized {
		parent, _, gs := groupsOf(m)
		for _, g := range gs {
			out = append(out, parent+"."+g.Name)
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
// others in kept (module names without ".weight"), sorted by module.
func FindSplits(quantized, kept []string) []Split {
	type fused struct {
		module, parent string // the fused layer's module and its members' parent
	}
	state := map[fused]map[string]bool{} // member leaf → quantized
	groups := map[fused]fusedGroup{}
	for i, mods := range [][]string{quantized, kept} {
		for _, m := range mods {
			parent, leaf, gs := groupsOf(m)
			for _, g := range gs {
				key := fused{parent + "." + g.Name, g.Parent}
				if state[key] == nil {
					state[key], groups[key] = map[string]bool{}, g
				}
				state[key][leaf] = i == 0 // a module in both is kept
			}
		}
	}
	var out []Split
	for key, members := range state {
		s := Split{Module: key.module, Group: groups[key]}
		for _, leaf := range s.Group.Members {
			if q, ok := members[leaf]; ok && q {
				s.Quantized = append(s.Quantized, leaf)
			} else if ok {
				s.Kept = append(s.Kept, leaf)
			}
		}
		if len(s.Quantized) > 0 && len(s.Kept) > 0 {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Split) int { return strings.Compare(a.Module+a.Group.Name, b.Module+b.Group.Name) })
	return out
}

// ModuleMatcher reports whether a ModelOpt exclude_modules wildcard (fnmatch:
// * matches any run of characters, dots included) matches a module name.
func ModuleMatcher(pattern string) func(module string) bool {
	// The exporter's patterns are literals with * at either end: no matcher.
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
// exporter for this family (engines.modelopt_exclude), in its order, one per
// dense layer where the file says {dense}. A caller removes the patterns that
// match a module it quantized.
func (c *Config) ModelOptExcludes() []string {
	var out []string
	vars := c.prefixVars()
	for _, p := range c.sch.engines.ModelOptExclude {
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
