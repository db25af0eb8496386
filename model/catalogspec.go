package model

import "github.com/k3ckpt/k3ckpt/safetensors"

// CatalogLookup returns a function that finds a tensor's catalog spec (its
// dtype and shape as this config implies them) by name: the spec named so
// in ShardTensors(shardIndexOf(name)), without building a shard's names.
// The function is safe for concurrent use; the specs' shapes are shared and
// must not be modified.
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
