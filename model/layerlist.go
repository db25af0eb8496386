package model

import (
	"slices"
	"strconv"
	"strings"
)

// readList reads config key d.key as an array of at least length integers,
// each in [lo, hi] and one of d.values when given, into values as k[0],
// k[1]…; it returns the length.
func readList(p *fields, o jobj, d dimRule, lo, hi, length int64, values map[string]int64) int64 {
	k := d.key
	a, ok := typed[[]any](p, o, k, true, "an array of integers")
	if !ok {
		return 0
	}
	if int64(len(a)) < length {
		p.fail(o.name(k), "has %d entries, want at least %d (one per layer)", len(a), length)
		return 0
	}
	for i, e := range a {
		name := k + "[" + strconv.Itoa(i) + "]"
		n, ok := p.integer(o.name(name), e)
		if !ok {
			return 0
		}
		if n < lo || n > hi {
			p.fail(o.name(name), "must be in %d..%d, got %d", lo, hi, n)
			return 0
		}
		if len(d.values) > 0 && !slices.Contains(d.values, n) {
			p.fail(o.name(name), "must be one of %v, got %d", d.values, n)
			return 0
		}
		values[name] = n
	}
	return int64(len(a))
}

// mainLayers is the number of layers before the extra (MTP) ones.
func mainLayers(layers []layer) int {
	n := 0
	for _, l := range layers {
		if !l.extra {
			n++
		}
	}
	return n
}

// layerPrefixOf is the full name prefix of 0-based layer i: the layer
// prefix with {n} = i, or an extra layer's extra_prefix with {n} from 0.
func (c *Config) layerPrefixOf(i int) string {
	s := c.sch
	lp, n := s.layerPrefix, i
	if s.extraPrefix != "" && c.layers[i].extra {
		lp, n = s.extraPrefix, i-mainLayers(c.layers)
	}
	return strings.ReplaceAll(expand(lp, c.prefixVars()), "{n}", strconv.Itoa(n))
}

// extraLayer reads "<extra>M." at the start of tail (the text after the
// text prefix): the extra layer M as a 0-based layer number and the rest.
func (c *Classifier) extraLayer(tail string) (layer int, rest string, ok bool) {
	s := c.s
	if s.extra == "" {
		return 0, "", false
	}
	tail, ok = strings.CutPrefix(tail, s.extra)
	if !ok {
		return 0, "", false
	}
	m, rest, ok := leadingInt(tail)
	return c.main + m, rest, ok
}
