package model

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestExpr(t *testing.T) {
	t.Parallel()
	vars := map[string]int64{"a": 6, "b": 4, "x.y[1]": 3, "f": 0}
	en := func(n string) (int64, error) {
		v, ok := vars[n]
		if !ok {
			return 0, errUnknownForTest
		}
		return v, nil
	}
	for src, want := range map[string]int64{
		"1": 1, "a": 6, "a+b*2": 14, "(a+b)*2": 20, "a/b": 1, "a%b": 2, "a-b-1": 1,
		"(95+127)/128*128": 128, "x.y[1]*a": 18, "!f": 1, "!a": 0, " a * ( b + 1 ) ": 30,
	} {
		e, err := parseExpr(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if got, err := e.eval(en); err != nil || got != want {
			t.Errorf("%q = %d, %v; want %d", src, got, err, want)
		}
	}
	for _, src := range []string{"", "a+", "(a", "a)", "a b", "1+-2", "a$"} {
		if _, err := parseExpr(src); err == nil {
			t.Errorf("%q parsed", src)
		}
	}
	for src, msg := range map[string]string{"a/f": "division by zero", "nope": "unknown", "4611686018427387904*4": "overflows"} {
		e, err := parseExpr(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.eval(en); err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), src) {
			t.Errorf("%q: %v, want an error with %q", src, err, msg)
		}
	}
}

var errUnknownForTest = &fieldError{Field: "x", Msg: "unknown"}

// A broken schema file is refused with an error that says where.
func TestLoadSchemaErrors(t *testing.T) {
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(k3SchemaJSON, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	unit := func(m map[string]any, u string) map[string]any {
		return m["units"].(map[string]any)[u].([]any)[0].(map[string]any)
	}
	for _, tc := range []struct {
		name, want string
		f          func(m map[string]any)
	}{
		{"unknown field", `unknown field "tensors"`, func(m map[string]any) { m["tensors"] = 1 }},
		{"no family", `no "family"`, func(m map[string]any) { delete(m, "family") }},
		{"unknown group", `units.kda[0] (self_attn.q_proj.weight): unknown group "kda.nope"`, func(m map[string]any) { unit(m, "kda")["group"] = "kda.nope" }},
		{"bad dtype", `F12`, func(m map[string]any) { unit(m, "kda")["dtype"] = "F12" }},
		{"bad shape", `units.mla[0] (self_attn.q_a_proj.weight): expression "QR+"`, func(m map[string]any) { unit(m, "mla")["shape"] = []any{"QR+", "H"} }},
		{"unknown unit", `layer.parts[1]: unknown unit "kdaa"`, func(m map[string]any) {
			m["layer"].(map[string]any)["parts"].([]any)[1].(map[string]any)["unit"] = "kdaa"
		}},
		{"repeat without {n}", `layer.parts[5]: a repeated part needs a prefix with {n}`, func(m map[string]any) {
			m["layer"].(map[string]any)["parts"].([]any)[5].(map[string]any)["prefix"] = "experts."
		}},
		{"bad component", `groups[1]: model: unknown component "attention.nope"`, func(m map[string]any) {
			m["groups"].([]any)[1] = []any{"kda.q_proj", "attention.nope"}
		}},
		{"bad alias", `names.aliases.mlp.x: "nope" is no layer tensor`, func(m map[string]any) {
			m["names"].(map[string]any)["aliases"].(map[string]any)["mlp.x"] = "nope"
		}},
	} {
		_, err := loadSchema(edit(tc.f))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := loadSchema(k3SchemaJSON); err != nil {
		t.Fatal(err)
	}
}

// The group each unit of the schema gives a tensor is the group the
// classifier, built from the same file, reads off its catalog name: the
// derived name tables lose nothing.
func TestSchemaGroupsAreParseName(t *testing.T) {
	t.Parallel()
	for _, sc := range []Scale{ScaleTiny, ScaleFull} {
		c, err := scaledConfig(sc)
		if err != nil {
			t.Fatal(err)
		}
		cls := c.Classifier
		for i := range c.NumShards() {
			for j, p := range c.shardParts(i) {
				n := min(p.count(), 2)
				for e := range n {
					prefix := p.pre
					if p.repeated {
						prefix += string(rune('0'+e)) + p.post
					}
					for k, x := range p.ts {
						if got, want := cls.ParseName(prefix+x.suffix).Group, c.groupOfPart(i, j, k); got != want {
							t.Fatalf("%s: ParseName says %v, the schema %v", prefix+x.suffix, got, want)
						}
					}
				}
			}
		}
	}
}

// groupOfPart is the schema's group of tensor k of part j of shard i.
func (c *Config) groupOfPart(i, j, k int) Group {
	s := c.sch
	var part partRule
	if i < c.NumLayers {
		l := c.layers[i]
		for n, p := range s.layerParts {
			if l.parts&(1<<n) != 0 {
				if j == 0 {
					part = p
					break
				}
				j--
			}
		}
	} else {
		active := 0
		for _, sh := range s.shards {
			if sh.when != nil {
				if v, _ := sh.when.eval(c.env); v == 0 {
					continue
				}
			}
			if active == i-c.NumLayers {
				part = sh.parts[j]
				break
			}
			active++
		}
	}
	rules := s.units[expand(part.unit, map[string]string{"experts": string(c.Experts)})]
	for _, r := range rules {
		if r.when != nil {
			if v, _ := r.when.eval(c.env); v == 0 {
				continue
			}
		}
		if k == 0 {
			return r.group
		}
		k--
	}
	return groupOther
}
