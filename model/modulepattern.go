package model

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// moduleKind splits a module name into its decoder layer and its kind, the
// name after layers.N. (….layers.3.self_attn.q_proj → 3, "self_attn.q_proj");
// a module outside the layers has layer -1 and its last component as kind.
func moduleKind(module string) (layer int, kind string) {
	l := k3Classifier.ParseName(module).Layer
	if l < 0 {
		return -1, module[strings.LastIndexByte(module, '.')+1:]
	}
	// Neither text prefix contains "layers.", so the first one is the layer's.
	lp := k3Schema.layers
	rest := module[strings.Index(module, lp)+len(lp):]
	return l, rest[strings.IndexByte(rest, '.')+1:]
}

// moduleRegexp is a regular expression (RE2 and Python re alike) that
// matches module under any text prefix and engine spelling, anchored at the
// end: a layer module by its kind in its layer (any layer when anyLayer),
// any other by its last component.
func moduleRegexp(module string, anyLayer bool) string {
	layer, kind := moduleKind(module)
	q := regexp.QuoteMeta(kind)
	for _, r := range k3Schema.engines.Renames { // the engines' runtime spellings too
		q = strings.ReplaceAll(q, r[0], "(?:"+r[0]+"|"+r[1]+")")
	}
	switch {
	case layer < 0:
		return `(?:.*\.)?` + q + `$`
	case anyLayer:
		return `(?:.*\.)?layers\.\d+\.` + q + `$`
	}
	return `(?:.*\.)?layers\.` + strconv.Itoa(layer) + `\.` + q + `$`
}

// ModulePatterns turns module names into compressed-tensors "re:" patterns
// that hold under either text prefix and the engines' spellings, sorted and
// without repeats: one per module kind in any layer when no module of that
// kind is in others, else one per layer.
func ModulePatterns(mods, others []string) []string {
	mixed := map[string]bool{}
	for _, o := range others {
		_, kind := moduleKind(o)
		mixed[kind] = true
	}
	var out []string
	for _, m := range mods {
		_, kind := moduleKind(m)
		out = append(out, "re:"+moduleRegexp(m, !mixed[kind]))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ExpertBank returns the module that holds a routed expert's tensor, its
// layer's bank of experts as the name spells it (….block_sparse_moe.experts),
// or "" for any other tensor.
func (c *Classifier) ExpertBank(name string) string {
	// ParseName's reading of an expert's name, and no more: most names are.
	s := c.s
	rest := strings.TrimPrefix(name, s.outer)
	rest, ok := strings.CutPrefix(rest, s.text+s.layers)
	if !ok {
		return ""
	}
	if _, rest, ok = leadingInt(rest); !ok || len(rest) < 2 || rest[0] != '.' {
		return ""
	}
	if _, _, ok := s.expertTail(rest[1:]); !ok {
		return ""
	}
	const bank = ".experts"
	return name[:strings.Index(name, bank+".")+len(bank)]
}
