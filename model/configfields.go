package model

import (
	"encoding/json"
	"fmt"
)

// jobj is a JSON object together with its dotted path, so errors can name fields.
type jobj struct {
	m    map[string]any
	path string
}

func (o jobj) name(k string) string {
	if o.path == "" {
		return k
	}
	return o.path + "." + k
}

// fields reads typed values out of JSON objects; the first problem sticks and
// later reads become no-ops, which keeps the validation code linear. read
// records each dimension and flag read (defaults applied, flags as 0 or 1)
// by its dotted path.
type fields struct {
	err  error
	read map[string]int64
}

func (p *fields) fail(field, format string, args ...any) {
	if p.err == nil {
		p.err = &fieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
}

func describe(v any) string {
	b, err := json.Marshal(v)
	if err != nil || len(b) > 40 {
		return fmt.Sprintf("a %T", v)
	}
	return string(b)
}

func (p *fields) get(o jobj, k string, required bool) (any, bool) {
	v, ok := o.m[k]
	if !ok || v == nil {
		if required {
			p.fail(o.name(k), "missing")
		}
		return nil, false
	}
	return v, true
}

func (p *fields) integer(name string, v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		p.fail(name, "must be an integer, got %s", describe(v))
		return 0, false
	}
	i, err := n.Int64()
	if err != nil {
		p.fail(name, "must be an integer, got %s", n)
		return 0, false
	}
	return i, true
}

// size reads a required dimension in [1, max].
func (p *fields) size(o jobj, k string, max int64) int64 { return p.dim(o, k, true, 1, max, 0) }

// sizeOr reads an optional dimension in [lo, max], def when absent.
func (p *fields) sizeOr(o jobj, k string, lo, max, def int64) int64 {
	return p.dim(o, k, false, lo, max, def)
}

// dim reads a dimension in [lo, max]; def is what a failed or absent read gives.
func (p *fields) dim(o jobj, k string, required bool, lo, max, def int64) int64 {
	i := def
	if v, ok := p.get(o, k, required); ok {
		if n, ok := p.integer(o.name(k), v); ok && (n < lo || n > max) {
			p.fail(o.name(k), "must be in %d..%d, got %d", lo, max, n)
		} else if ok {
			i = n
		}
	}
	p.read[o.name(k)] = i
	return i
}

// typed reads o[k] as a T, which want describes; ok is false when it is
// absent or not a T.
func typed[T any](p *fields, o jobj, k string, required bool, want string) (T, bool) {
	var t T
	v, ok := p.get(o, k, required)
	if !ok {
		return t, false
	}
	if t, ok = v.(T); !ok {
		p.fail(o.name(k), "must be %s, got %s", want, describe(v))
	}
	return t, ok
}

func (p *fields) boolean(o jobj, k string, def bool) bool {
	b, ok := typed[bool](p, o, k, false, "true or false")
	if !ok {
		b = def
	}
	p.read[o.name(k)] = b2i(b)
	return b
}

func (p *fields) str(o jobj, k string, required bool) string {
	s, _ := typed[string](p, o, k, required, "a string")
	return s
}

// positive checks that o[k], when present, is a positive number.
func (p *fields) positive(o jobj, k string) {
	n, ok := typed[json.Number](p, o, k, false, "a number")
	if f, err := n.Float64(); ok && (err != nil || f <= 0) {
		p.fail(o.name(k), "must be a positive number, got %s", n)
	}
}

func (p *fields) object(o jobj, k string, required bool) (jobj, bool) {
	m, ok := typed[map[string]any](p, o, k, required, "an object")
	if !ok {
		return jobj{}, false
	}
	return jobj{m: m, path: o.name(k)}, true
}

// layerList reads a list of 1-based layer numbers, each in 1..n and unique.
func (p *fields) layerList(o jobj, k string, n int, required bool) ([]int, bool) {
	arr, ok := typed[[]any](p, o, k, required, "a list of 1-based layer numbers")
	if !ok {
		return nil, false
	}
	out := make([]int, 0, len(arr))
	seen := make(map[int]bool, len(arr))
	for i, x := range arr {
		field := fmt.Sprintf("%s[%d]", o.name(k), i)
		l, ok := p.integer(field, x)
		if !ok {
			return nil, false
		}
		if l < 1 || l > int64(n) {
			p.fail(field, "layer %d out of range 1..%d (the list is 1-based)", l, n)
			return nil, false
		}
		if seen[int(l)] {
			p.fail(field, "layer %d listed twice", l)
			return nil, false
		}
		seen[int(l)] = true
		out = append(out, int(l))
	}
	return out, true
}
