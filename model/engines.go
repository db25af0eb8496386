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

// Prefixes of the language model's modules: the multimodal checkpoint's, the
// bare text checkpoint's, and what remains when the engine strips it.
const (
	multimodalPrefix = "language_model.model."
	languageModel    = "language_model."
	textPrefix       = "model."
)

// ModuleSpellings returns every name an engine may look module up by, sorted:
// the checkpoint name; with block_sparse_moe → mlp (SGLang's and vLLM's
// weight mappers rename the MoE block); and, for each of those, with the
// language_model.model. prefix replaced by model. (SGLang builds the language
// model with an empty prefix) and removed (vLLM strips it and probes
// layers.N…). A bare text checkpoint's model. names also get the stripped
// spelling. module may be a wildcard pattern: the same rewrites apply.
func ModuleSpellings(module string) []string {
	names := []string{module}
	if strings.Contains(module, moeBlock) {
		names = append(names, strings.ReplaceAll(module, moeBlock, engineMoeBlock))
	}
	for _, n := range slices.Clone(names) {
		switch {
		case strings.HasPrefix(n, multimodalPrefix):
			rest := n[len(multimodalPrefix):]
			names = append(names, textPrefix+rest, rest)
		case strings.HasPrefix(n, languageModel):
			names = append(names, n[len(languageModel):])
		case strings.HasPrefix(n, textPrefix):
			names = append(names, n[len(textPrefix):])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Engine names an inference engine whose K3 loader a fact was read from.
type Engine string

// The engines that run K3.
const (
	sGLang      Engine = "SGLang"
	vLLM        Engine = "vLLM"
	tensorRTLLM Engine = "TensorRT-LLM"
	tokenspeed  Engine = "tokenspeed"
)

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
	// Members are the projections' names under Parent.
	Members []string
	// Engines are the engines that build this fused layer.
	Engines []Engine
}

// fusedGroups is the table of fusions the K3 loaders build: SGLang
// kimi_k3.py fuses KDA q/k/v/g into fused_qkvg_proj (b/f_a/f_b stay
// standalone) and MLA q_a + kv_a into fused_qkv_a_proj_with_mqa; vLLM's
// kimi_k3 fuses KDA q/k/v/g/f_a/b into in_proj_qkvgfab (tokenspeed stacks the
// same six in KimiKDAMergedProj, which the manifest names by in_proj_qkvgfab)
// and MLA q_a + kv_a into fused_qkv_a_proj; every engine merges an MLP's gate
// and up projections into gate_up_proj. engines/rules.json says what each
// engine then does with a split group.
var fusedGroups = []fusedGroup{
	{Name: "fused_qkvg_proj", Parent: "self_attn", Members: []string{"q_proj", "k_proj", "v_proj", "g_proj"}, Engines: []Engine{sGLang}},
	{Name: "in_proj_qkvgfab", Parent: "self_attn", Members: []string{"q_proj", "k_proj", "v_proj", "g_proj", "f_a_proj", "b_proj"}, Engines: []Engine{vLLM, tokenspeed}},
	{Name: "fused_qkv_a_proj_with_mqa", Parent: "self_attn", Members: []string{"q_a_proj", "kv_a_proj_with_mqa"}, Engines: []Engine{sGLang}},
	{Name: "fused_qkv_a_proj", Parent: "self_attn", Members: []string{"q_a_proj", "kv_a_proj_with_mqa"}, Engines: []Engine{vLLM}},
	{Name: "gate_up_proj", Parent: "shared_experts", Members: []string{"gate_proj", "up_proj"}, Engines: []Engine{sGLang, vLLM, tensorRTLLM}},
	{Name: "gate_up_proj", Parent: "mlp", Members: []string{"gate_proj", "up_proj"}, Engines: []Engine{sGLang, vLLM, tensorRTLLM}},
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
	for i, g := range fusedGroups {
		if g.Parent == parentLeaf && slices.Contains(g.Members, leaf) {
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
			out = append(out, parent+"."+fusedGroups[gi].Name)
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
// others in kept (module names without ".weight"). Members absent from both
// (not in the checkpoint) are ignored. Splits are sorted by module.
func FindSplits(quantized, kept []string) []Split {
	state := map[string]map[string]bool{} // fused module → member leaf → quantized
	idx := map[string]int{}
	note := func(mods []string, q bool) {
		for _, m := range mods {
			parent, gs := groupsOf(m)
			_, leaf := splitModule(m)
			for _, gi := range gs {
				key := parent + "." + fusedGroups[gi].Name + "\x00" + fusedGroups[gi].Parent
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
		g := fusedGroups[idx[key]]
		for _, leaf := range g.Members {
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

// MatchModule reports whether a ModelOpt exclude_modules wildcard (fnmatch:
// * matches any run of characters, dots included) matches a module name.
func MatchModule(pattern, module string) bool { return ModuleMatcher(pattern)(module) }

// ModuleMatcher is MatchModule with the pattern read once, for a pattern
// tested against many modules (a conversion tests every exclusion against
// every quantized module).
func ModuleMatcher(pattern string) func(module string) bool {
	// The exporter's patterns are literals with * at either end: match those
	// without the general matcher.
	if lit, lead, trail, ok := starEnds(pattern); ok {
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

// starEnds splits a pattern whose only wildcards are a * at its start or
// end (or both) into its literal middle; ok is false for any other pattern.
func starEnds(pattern string) (lit string, lead, trail, ok bool) {
	lit = pattern
	lit, lead = strings.CutPrefix(lit, "*")
	lit, trail = strings.CutSuffix(lit, "*")
	if strings.ContainsAny(lit, `*?[\`) {
		return "", false, false, false
	}
	return lit, lead, trail, true
}

// ModelOptExcludes returns the exclude_modules patterns of NVIDIA's Kimi-K3
// exporter, in its order, before spelling expansion: the router, the latent
// projections and norm, the shared experts, the KDA convolutions, f_b_proj,
// the norms and AttnRes tensors, the dense MLP layers, lm_head and vision;
// then the KDA f_a/b projections, which NVIDIA quantizes and so never lists
// but which another recipe may keep. A caller removes the patterns that
// match a module it quantized.
func (c *Config) ModelOptExcludes() []string {
	out := []string{
		"*block_sparse_moe.gate*",
		"*block_sparse_moe.routed_expert_up_proj*",
		"*block_sparse_moe.routed_expert_down_proj*",
		"*block_sparse_moe.routed_expert_norm*",
		"*block_sparse_moe.shared_experts*",
		"*self_attn.q_conv1d*",
		"*self_attn.k_conv1d*",
		"*self_attn.v_conv1d*",
		"*self_attn.f_b_proj*",
		"*self_attn.o_norm*",
		"*self_attn.q_a_layernorm*",
		"*self_attn.kv_a_layernorm*",
		"*_res_proj*",
		"*_res_norm*",
		"*layernorm*",
	}
	for l := range c.FirstKDense {
		out = append(out, c.TextPrefix()+"layers."+strconv.Itoa(l)+".mlp.*")
	}
	out = append(out, c.prefixVars()["LM"]+"lm_head", "vision_tower*", "mm_projector*",
		"*self_attn.f_a_proj*", "*self_attn.b_proj*")
	return out
}
