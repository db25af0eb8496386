package model

import (
	"strings"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// ShardMatcher finds a tensor name in the catalog of its shard
// (ShardTensors) with a few small tables instead of the catalog's names (K3
// has 497,220). It is read-only once built and safe for concurrent use.
type ShardMatcher struct {
	c        *Config
	prefixes []string              // by 0-based layer (layerPrefixOf)
	kinds    map[uint64]*layerKind // by a layer's set of parts
	level    []map[string]match    // the model-level shards' tensors by name
}

// layerKind is the catalog of one kind of layer: the tail after the layer
// prefix of every tensor but the routed experts', then those.
type layerKind struct {
	tail    map[string]int
	ts      []tmpl  // by position, for the tensors of tail
	groups  []Group // by position, likewise
	expert  []tmpl  // nil for a layer without experts
	nExpert int64
}

// match is a tensor's entry in its shard's catalog.
type match struct {
	// Pos is the tensor's position in ShardTensors.
	Pos int
	// DType and Shape are the catalog's (Shape is shared: not to be modified).
	DType safetensors.DType
	Shape []int64
	// Group is the tensor's group, as the config's Classifier parses its name.
	Group Group
}

// CatalogLookup returns a function, safe for concurrent use, that finds a
// tensor's spec in ShardTensors(shardIndexOf(name)) without building a
// shard's names. The specs' shapes are shared and must not be modified.
func (c *Config) CatalogLookup() func(name string) (safetensors.TensorSpec, bool) {
	m := c.ShardMatcher()
	return func(name string) (safetensors.TensorSpec, bool) {
		e, ok := m.Find(c.shardIndexOf(name), name)
		if !ok {
			return safetensors.TensorSpec{}, false
		}
		return safetensors.TensorSpec{Name: name, DType: e.DType, Shape: e.Shape}, true
	}
}

// ShardMatcher builds the matcher of this config's catalog.
func (c *Config) ShardMatcher() *ShardMatcher {
	m := &ShardMatcher{c: c, kinds: map[uint64]*layerKind{}}
	cls := c.Classifier
	for _, l := range c.layers {
		m.prefixes = append(m.prefixes, c.layerPrefixOf(l.Index))
		if m.kinds[l.parts] != nil {
			continue
		}
		k := &layerKind{tail: map[string]int{}}
		for j, p := range c.tmpl.layer {
			switch {
			case l.parts&(1<<j) == 0:
			case p.repeated:
				k.expert, k.nExpert = p.ts, p.repeat
			default:
				for _, x := range p.ts {
					k.tail[x.suffix] = len(k.ts)
					k.ts = append(k.ts, x)
					// As the classifier reads this layer's name (o_proj and g_proj
					// depend on the layer).
					k.groups = append(k.groups, cls.ParseName(m.prefixes[l.Index]+x.suffix).Group)
				}
			}
		}
		m.kinds[l.parts] = k
	}
	// Model-level shards are small (K3: 5, 3 and 168 tensors): full names.
	for i := c.NumLayers; i < c.NumShards(); i++ {
		names := map[string]match{}
		for j, s := range c.ShardTensors(i) {
			names[s.Name] = match{j, s.DType, s.Shape, cls.ParseName(s.Name).Group}
		}
		m.level = append(m.level, names)
	}
	return m
}

// Len is the number of tensors of 0-based shard i (len(ShardTensors(i))).
func (m *ShardMatcher) Len(i int) int {
	switch {
	case i < 0 || i >= m.c.NumShards():
		return 0
	case i >= m.c.NumLayers:
		return len(m.level[i-m.c.NumLayers])
	}
	k := m.kinds[m.c.layers[i].parts]
	return len(k.ts) + int(k.nExpert)*len(k.expert)
}

// Find reports the named tensor's entry in the catalog of 0-based shard
// i; ok is false when the shard's catalog has no tensor of that name.
func (m *ShardMatcher) Find(i int, name string) (match, bool) {
	c := m.c
	switch {
	case i < 0 || i >= c.NumShards():
		return match{}, false
	case i >= c.NumLayers:
		e, ok := m.level[i-c.NumLayers][name]
		return e, ok
	}
	rest, ok := strings.CutPrefix(name, m.prefixes[i])
	if !ok {
		return match{}, false
	}
	k := m.kinds[c.layers[i].parts]
	if k.expert != nil {
		if er, ok := strings.CutPrefix(rest, c.sch.expertsPart); ok {
			if e, er, ok := canonicalInt(er); ok && int64(e) < k.nExpert && er != "" && er[0] == '.' {
				er = er[1:]
				for j, x := range k.expert {
					if x.suffix == er {
						return match{len(k.ts) + e*len(k.expert) + j, x.dtype, x.shape, GroupExperts}, true
					}
				}
			}
			return match{}, false // no other tensor of a layer is under experts.
		}
	}
	j, ok := k.tail[rest]
	if !ok {
		return match{}, false
	}
	x := k.ts[j]
	return match{j, x.dtype, x.shape, k.groups[j]}, true
}

// canonicalInt reads a decimal number at the start of s as strconv.Itoa
// writes it (no sign, no leading zero), at most 9 digits.
func canonicalInt(s string) (n int, rest string, ok bool) {
	n, rest, ok = leadingInt(s)
	if ok && s[0] == '0' && len(s)-len(rest) > 1 {
		return 0, s, false
	}
	return n, rest, ok
}
