package model

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// TestCatalogLookupIsShardTensors: CatalogLookup answers, for every catalog
// name and for names a little off (other prefix, layer or expert numbers
// spelled otherwise or out of range, suffixes cut or extended), exactly
// what a map of ShardTensors(shardIndexOf(name)) answers, for multimodal
// and bare configs with MXFP4 and BF16 experts.
func TestCatalogLookupIsShardTensors(t *testing.T) {
	t.Parallel()
	configs := map[string][]byte{}
	for _, sc := range []Scale{ScaleTiny, ScaleSmall} {
		b, err := scaledConfigJSON(sc)
		if err != nil {
			t.Fatal(err)
		}
		configs[sc.String()] = b
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		text := m["text_config"].(map[string]any)
		configs[sc.String()+"/bare"] = encode(t, text)
		delete(text, "quantization_config")
		configs[sc.String()+"/bf16"] = encode(t, m)
	}
	num := regexp.MustCompile(`\.(\d+)\.`)
	for name, raw := range configs {
		c, err := ParseConfig(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		shards := map[int]map[string]safetensors.TensorSpec{}
		want := func(n string) (safetensors.TensorSpec, bool) {
			i := c.shardIndexOf(n)
			if i < 0 {
				return safetensors.TensorSpec{}, false
			}
			if shards[i] == nil {
				shards[i] = map[string]safetensors.TensorSpec{}
				for _, s := range c.ShardTensors(i) {
					shards[i][s.Name] = s
				}
			}
			s, ok := shards[i][n]
			return s, ok
		}
		lookup := c.CatalogLookup()
		found, probes := 0, 0
		probe := func(n string) bool {
			probes++
			w, wok := want(n)
			g, gok := lookup(n)
			if wok != gok || g.Name != w.Name || g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) {
				t.Fatalf("%s: %q: lookup %+v %v, shard tensors %+v %v", name, n, g, gok, w, wok)
			}
			return gok
		}
		wantFound := 0
		for i := range c.NumShards() {
			if !checkedShard(i, c.NumShards()) {
				continue
			}
			wantFound += len(c.ShardTensors(i))
			for _, s := range c.ShardTensors(i) {
				n := s.Name
				if probe(n) {
					found++
				}
				probe(n + "x")
				probe(n[:len(n)-1])
				probe("language_model." + n)
				probe(strings.TrimPrefix(n, "language_model."))
				probe(strings.Replace(n, "layers.", "layers.x", 1))
				for _, m := range num.FindAllStringSubmatchIndex(n, -1) {
					v, _ := strconv.Atoi(n[m[2]:m[3]])
					for _, alt := range []string{"0" + n[m[2]:m[3]], "+" + n[m[2]:m[3]], strconv.Itoa(v + 1), strconv.Itoa(int(c.NumExperts)), strconv.Itoa(c.NumLayers), "1" + strings.Repeat("0", 9) + n[m[2]:m[3]], "", "-1"} {
						probe(n[:m[2]] + alt + n[m[3]:])
					}
				}
			}
		}
		if found != wantFound || !testing.Short() && found != c.NumTensors() {
			t.Errorf("%s: %d names found of %d catalog tensors (%d probes)", name, found, c.NumTensors(), probes)
		}
	}
}

// checkedShard reports whether a property test checks shard i of n: every
// shard, or under -short every seventh and the last three (where the
// tensors outside the layers lie), so that -short keeps each kind of shard
// at a seventh of the cost.
func checkedShard(i, n int) bool { return !testing.Short() || i%7 == 0 || i >= n-3 }
