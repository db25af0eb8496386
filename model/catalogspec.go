package model

import "github.com/k3ckpt/k3ckpt/safetensors"

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
