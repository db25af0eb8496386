package model

import (
	"fmt"
	"strconv"
	"strings"
)

// templates is a config's reading of its family's schema (resolved once,
// read-only): the layer parts and the model-level shards it has.
type templates struct {
	layer  []resolvedPart // every layer part; a layer has those of its mask
	shards []resolvedShard
}

// resolvedPart is a unit placed under a prefix: once (repeat 0), or repeat
// times under pre + n + post.
type resolvedPart struct {
	ts        []tmpl
	repeat    int64
	pre, post string
	repeated  bool
}

func (p resolvedPart) count() int64 {
	if p.repeated {
		return p.repeat
	}
	return 1
}

type resolvedShard struct {
	parts  []resolvedPart
	groups []Group
}

// prefixVars are the name variables of this config's kind ({P}, {LM}).
func (c *Config) prefixVars() map[string]string {
	return c.sch.prefixes[b2i(c.Multimodal)]
}

// value resolves a name of a schema expression: a dimension of the schema,
// else a config key as the reader read it (c.values).
func (c *Config) value(name string, depth int) (int64, error) {
	if e, ok := c.sch.dims[name]; ok {
		if depth > 16 {
			return 0, fmt.Errorf("dimension %s: defined in terms of itself", name)
		}
		return e.root.eval(func(n string) (int64, error) { return c.value(n, depth+1) })
	}
	if v, ok := c.values[name]; ok {
		return v, nil
	}
	return 0, fmt.Errorf("%s: no such dimension or config key", name)
}

func (c *Config) env(name string) (int64, error) { return c.value(name, 0) }

// layerEnv adds a layer's kinds (kda, mla, dense, moe, mtp), its number n
// and key[n], entry n of a list the reader read (0 past its end), to the
// config's names.
func (c *Config) layerEnv(l layer) env {
	return func(name string) (int64, error) {
		switch name {
		case "kda":
			return b2i(l.Attention == kDA), nil
		case "mla":
			return b2i(l.Attention == mLA), nil
		case "dense":
			return b2i(!l.MoE), nil
		case "moe":
			return b2i(l.MoE), nil
		case "mtp":
			return b2i(l.extra), nil
		case "n":
			return int64(l.Index), nil
		}
		key, isList := strings.CutSuffix(name, "[n]")
		if !isList {
			return c.env(name)
		}
		if _, read := c.values[key]; !read {
			return 0, &fieldError{Field: key, Msg: "not read as a list"}
		}
		return c.values[key+"["+strconv.Itoa(l.Index)+"]"], nil // absent past the end
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// unitTemplates resolves one unit: its tensors that exist for this config,
// their names with the prefix variables filled in, their shapes.
func (c *Config) unitTemplates(unit string) ([]tmpl, error) {
	rules, ok := c.sch.units[unit]
	if !ok {
		return nil, fmt.Errorf("model %s: no unit %q", c.sch.family, unit)
	}
	vars := c.prefixVars()
	out := make([]tmpl, 0, len(rules))
	for _, r := range rules {
		t := tmpl{suffix: expand(r.name, vars), dtype: r.dtype, shape: make([]int64, len(r.shape)), live: -1}
		ok, err := r.when.holds(c.env)
		for i := 0; ok && err == nil && i < len(r.shape); i++ {
			t.shape[i], err = r.shape[i].size(c.env)
		}
		if ok && err == nil && r.live != nil {
			t.live, err = r.live.eval(c.env)
		}
		if err != nil {
			return nil, fmt.Errorf("model %s: %s: %w", c.sch.family, r.name, err)
		}
		if ok {
			out = append(out, t)
		}
	}
	return out, nil
}

// resolvePart resolves a part; a layer part's prefix is completed per layer.
func (c *Config) resolvePart(p partRule, cache map[string][]tmpl) (resolvedPart, error) {
	// FP8 experts are described as the BF16 weights they were cast from.
	form := c.Experts
	if form == ExpertsFP8 {
		form = ExpertsBF16
	}
	unit := expand(p.unit, map[string]string{"experts": string(form)})
	ts, ok := cache[unit]
	if !ok {
		var err error
		if ts, err = c.unitTemplates(unit); err != nil {
			return resolvedPart{}, err
		}
		cache[unit] = ts
	}
	r := resolvedPart{ts: ts}
	r.pre, r.post, r.repeated = strings.Cut(expand(p.prefix, c.prefixVars()), "{n}")
	if p.repeat != nil {
		var err error
		if r.repeat, err = p.repeat.size(c.env); err != nil {
			return resolvedPart{}, fmt.Errorf("model %s: %s: %w", c.sch.family, p.unit, err)
		}
	}
	return r, nil
}

// resolve reads the schema for this config: the layers' parts (and which
// each layer has) and the model-level shards whose condition holds.
func (c *Config) resolve() error {
	s := c.sch
	t := &templates{}
	cache := map[string][]tmpl{}
	used := uint64(0) // the parts some layer has
	for i := range c.layers {
		l := &c.layers[i]
		for j, p := range s.layerParts {
			ok, err := p.when.holds(c.layerEnv(*l))
			if err != nil {
				return fmt.Errorf("model %s: layer part %s: %w", s.family, p.unit, err)
			}
			if ok {
				l.parts |= 1 << j
			}
		}
		used |= l.parts
	}
	t.layer = make([]resolvedPart, len(s.layerParts))
	for j, p := range s.layerParts {
		if used&(1<<j) == 0 {
			continue
		}
		r, err := c.resolvePart(p, cache)
		if err != nil {
			return err
		}
		t.layer[j] = r
	}
	for _, sh := range s.shards {
		if ok, err := sh.when.holds(c.env); err != nil {
			return fmt.Errorf("model %s: shard: %w", s.family, err)
		} else if !ok {
			continue
		}
		rs := resolvedShard{groups: sh.groups}
		for _, p := range sh.parts {
			r, err := c.resolvePart(p, cache)
			if err != nil {
				return err
			}
			rs.parts = append(rs.parts, r)
		}
		t.shards = append(t.shards, rs)
	}
	c.tmpl = t
	return nil
}

// shardParts lists the parts of 0-based shard i with their full prefixes.
func (c *Config) shardParts(i int) []resolvedPart {
	t := c.tmpl
	if i >= c.NumLayers {
		return t.shards[i-c.NumLayers].parts
	}
	l := c.layers[i]
	lp := c.layerPrefixOf(i)
	out := make([]resolvedPart, 0, len(t.layer))
	for j, p := range t.layer {
		if l.parts&(1<<j) != 0 {
			p.pre = lp + p.pre
			out = append(out, p)
		}
	}
	return out
}

// shardUnits lists, for 0-based shard i, the template groups it holds and
// the name prefix of each (one entry per layer part, expert or vision block).
func (c *Config) shardUnits(i int, fn func(prefix string, ts []tmpl)) {
	for _, p := range c.shardParts(i) {
		if !p.repeated {
			fn(p.pre, p.ts)
			continue
		}
		for n := range p.repeat {
			fn(p.pre+strconv.FormatInt(n, 10)+p.post, p.ts)
		}
	}
}
