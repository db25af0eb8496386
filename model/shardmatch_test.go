package model

import (
	"slices"
	"strings"
	"testing"
)

// The matcher agrees with the catalog it replaces: every name of every
// shard's ShardTensors is found at its position with its dtype and shape,
// and names of the neighbouring shards, other spellings and out-of-range
// indices are not found.
func TestShardMatcherAgreesWithCatalog(t *testing.T) {
	t.Parallel()
	full := mustK3(t)
	text := at(k3Raw(t), "text_config")
	bare, err := ParseConfig(encode(t, text))
	if err != nil {
		t.Fatal(err)
	}
	tiny, err := scaledConfig(ScaleTiny)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Config{full, bare, tiny} {
		m := c.ShardMatcher()
		cls := c.Classifier
		for i := range c.NumShards() {
			if !checkedShard(i, c.NumShards()) {
				continue
			}
			specs := c.ShardTensors(i)
			if m.Len(i) != len(specs) {
				t.Fatalf("shard %d: Len %d, catalog %d", i, m.Len(i), len(specs))
			}
			for j, s := range specs {
				got, ok := m.Find(i, s.Name)
				g := cls.ParseName(s.Name).Group
				if !ok || got.Pos != j || got.DType != s.DType || !slices.Equal(got.Shape, s.Shape) || got.Group != g {
					t.Fatalf("shard %d: Find(%s) = %+v %v, catalog %d %v %v %v", i, s.Name, got, ok, j, s.DType, s.Shape, g)
				}
			}
			for _, o := range []int{i - 1, i + 1, c.NumLayers, c.NumShards() - 1} {
				if o == i || o < 0 || o >= c.NumShards() {
					continue
				}
				for _, s := range c.ShardTensors(o) {
					if _, ok := m.Find(i, s.Name); ok {
						t.Fatalf("shard %d: Find(%s) of shard %d found", i, s.Name, o)
					}
				}
			}
		}
	}
	m := full.ShardMatcher()
	for _, bad := range []struct {
		shard int
		name  string
	}{
		{4, "language_model.model.layers.04.self_attn.q_proj.weight"},
		{4, "model.layers.4.self_attn.q_proj.weight"},
		{4, "language_model.model.layers.4.block_sparse_moe.experts.896.w1.weight_packed"},
		{4, "language_model.model.layers.4.block_sparse_moe.experts.07.w1.weight_packed"},
		{4, "language_model.model.layers.4.block_sparse_moe.experts.7.w1.weight"},
		{4, "language_model.model.layers.4.mlp.experts.7.w1.weight_packed"},
		{4, "language_model.model.layers.4.self_attn.q_proj.weight_scale_inv"},
		{4, "language_model.model.layers.4."},
		{4, "language_model.model.layers.4"},
		{0, "language_model.model.layers.0.block_sparse_moe.gate.weight"},
		{full.NumShards(), "language_model.model.norm.weight"},
		{-1, "language_model.model.norm.weight"},
	} {
		if got, ok := m.Find(bad.shard, bad.name); ok {
			t.Errorf("shard %d: Find(%s) = %+v, want not found", bad.shard, bad.name, got)
		}
	}
	if !strings.HasPrefix(full.ShardTensors(4)[0].Name, "language_model.model.layers.4.") {
		t.Fatal("catalog order changed: the negative cases above assume layer 4 in shard 4")
	}
}
