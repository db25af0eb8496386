package model

import (
	"strconv"
	"strings"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// CatalogLookup returns a function that finds a tensor's catalog spec (its
// dtype and shape as this config implies them) by name: the spec named so
// in ShardTensors(ShardIndexOf(name)), without building a shard's names.
// The function is safe for concurrent use; the specs' shapes are shared and
// must not be modified.
func (c *Config) CatalogLookup() func(name string) (safetensors.TensorSpec, bool) {
	t := c.templates()
	// A layer's tensors besides its experts, by the name after the layer's
	// prefix, for each kind of layer (attention, MoE or dense), in
	// shardUnits' order: a later template of the same name wins, as in a map
	// of the shard's specs.
	layerKinds := map[uint64]map[string]tmpl{}
	for _, l := range c.layers {
		k := l.parts
		if layerKinds[k] != nil {
			continue
		}
		m := map[string]tmpl{}
		own := c.TextPrefix() + c.schema().layers + strconv.Itoa(l.Index) + "."
		c.shardUnits(t, l.Index, func(prefix string, ts []tmpl) {
			if prefix == own { // not an expert's
				for _, x := range ts {
					m[x.suffix] = x
				}
			}
		})
		layerKinds[k] = m
	}
	rep := c.repeatedPart()
	var experts resolvedPart
	if rep >= 0 {
		experts = t.layer[rep]
	}
	expert := make(map[string]tmpl, len(experts.ts))
	for _, x := range experts.ts {
		expert[x.suffix] = x
	}
	expertsPart := c.schema().expertsPart
	slots := make([]map[string]safetensors.TensorSpec, c.NumShards()-c.NumLayers)
	for s := range slots {
		specs := c.shardTensors(t, c.NumLayers+s)
		slots[s] = make(map[string]safetensors.TensorSpec, len(specs))
		for _, x := range specs {
			slots[s][x.Name] = x
		}
	}
	prefix := c.TextPrefix() + c.schema().layers
	return func(name string) (safetensors.TensorSpec, bool) {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			// Not a layer's: a model-level shard's, or none.
			i := c.ShardIndexOf(name)
			if i < c.NumLayers {
				return safetensors.TensorSpec{}, false
			}
			s, ok := slots[i-c.NumLayers][name]
			return s, ok
		}
		// A layer's tensor: its number as the catalog spells it, then the
		// layer's own tensors or an expert's.
		i, rest, ok := catalogNumber(rest, int64(c.NumLayers))
		if !ok {
			return safetensors.TensorSpec{}, false
		}
		l := c.layers[i]
		if x, ok := layerKinds[l.parts][rest]; ok {
			return safetensors.TensorSpec{Name: name, DType: x.dtype, Shape: x.shape}, true
		}
		if rep < 0 || l.parts&(1<<rep) == 0 {
			return safetensors.TensorSpec{}, false
		}
		if rest, ok = strings.CutPrefix(rest, expertsPart); !ok {
			return safetensors.TensorSpec{}, false
		}
		if _, rest, ok = catalogNumber(rest, experts.repeat); !ok {
			return safetensors.TensorSpec{}, false
		}
		if x, ok := expert[rest]; ok {
			return safetensors.TensorSpec{Name: name, DType: x.dtype, Shape: x.shape}, true
		}
		return safetensors.TensorSpec{}, false
	}
}

// catalogNumber reads "N.rest" where N is below n and written as the
// catalog writes numbers (decimal, no sign, no leading zero).
func catalogNumber(s string, n int64) (int, string, bool) {
	dot := strings.IndexByte(s, '.')
	if dot < 0 {
		return 0, "", false
	}
	v, err := strconv.ParseInt(s[:dot], 10, 64)
	if err != nil || v < 0 || v >= n || strconv.FormatInt(v, 10) != s[:dot] {
		return 0, "", false
	}
	return int(v), s[dot+1:], true
}
