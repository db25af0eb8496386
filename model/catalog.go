package model

import (
	"fmt"
	"slices"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// ShardNameFormat names shard i (1-based) of n the way the release does
// (model-00001-of-000096.safetensors); readers take names from the index.
const ShardNameFormat = "model-%05d-of-%06d.safetensors"

// ConfigName is the config file next to the shards.
const ConfigName = "config.json"

// tmpl is a tensor of a unit as a config resolves it (its shape is shared
// by every spec built from it).
type tmpl struct {
	suffix string // the name after the unit's prefix
	dtype  safetensors.DType
	shape  []int64
	live   int64 // the values before the zero padding (A_log), -1 if none
}

func (t tmpl) bytes() int64 {
	n, _ := safetensors.ByteSize(t.dtype, t.shape) // shapes are validated sizes
	return n
}

// textPrefix is the language model's name prefix (K3: "language_model.model." or "model.").
func (c *Config) textPrefix() string { return c.prefixVars()["P"] }

// NumShards is the number of safetensors files: one per layer, then the
// family's model-level shards (K3: embedding, lm_head and norms; vision).
func (c *Config) NumShards() int { return c.NumLayers + len(c.tmpl.shards) }

// ShardName is the file name of 0-based shard i.
func (c *Config) ShardName(i int) string {
	return fmt.Sprintf(ShardNameFormat, i+1, c.NumShards())
}

// shardIndexOf is the 0-based shard that holds the named tensor, -1 for
// none, by the schema (a converted weight's scale lands next to its weight).
func (c *Config) shardIndexOf(name string) int {
	n := c.Classifier.ParseName(name)
	if n.Layer >= 0 {
		if n.Layer < c.NumLayers {
			return n.Layer
		}
		return -1
	}
	for i, sh := range c.tmpl.shards {
		if slices.Contains(sh.groups, n.Group) {
			return c.NumLayers + i
		}
	}
	return -1
}

// ShardTensors lists the tensors of 0-based shard i in catalog order (not
// the file's data order). Shapes are shared and must not be modified.
func (c *Config) ShardTensors(i int) []safetensors.TensorSpec {
	if i < 0 || i >= c.NumShards() {
		return nil
	}
	var out []safetensors.TensorSpec
	c.shardUnits(i, func(prefix string, ts []tmpl) {
		for _, x := range ts {
			out = append(out, safetensors.TensorSpec{Name: prefix + x.suffix, DType: x.dtype, Shape: x.shape})
		}
	})
	return out
}

// stats returns the checkpoint's tensor count and data bytes without
// building names.
func (c *Config) stats() (tensors int, bytes int64) {
	for i := range c.NumShards() {
		n, b := c.shardStats(i)
		tensors, bytes = tensors+n, bytes+b
	}
	return tensors, bytes
}

// shardStats is stats of 0-based shard i.
func (c *Config) shardStats(i int) (tensors int, bytes int64) {
	for _, p := range c.shardParts(i) {
		n := p.count()
		tensors += int(n) * len(p.ts)
		for _, t := range p.ts {
			bytes += n * t.bytes()
		}
	}
	return tensors, bytes
}

// NumTensors is the number of tensors in the checkpoint.
func (c *Config) NumTensors() int {
	n, _ := c.stats()
	return n
}

// TotalBytes is the data size of the checkpoint (the index's total_size).
func (c *Config) TotalBytes() int64 {
	_, b := c.stats()
	return b
}
