package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// MarshalConfig renders a JSON value the way the released config.json is
// written (Python's json.dumps(indent=2, sort_keys=True)): two-space indent,
// keys sorted, ", " never used at line ends, non-ASCII as \uXXXX, "<|…|>"
// left alone, no trailing newline. json.Number values are written exactly
// as read (1e-05 stays 1e-05, 4.0 stays 4.0), so a parsed config re-renders
// to its own bytes. Values may be maps with string keys, slices of any,
// strings, json.Number, bool, nil, Go integers and finite float64s.
func MarshalConfig(v any) ([]byte, error) {
	r := configRenderer{rendered: map[renderedMap][2]int{}}
	// One buffer of about the right size: a converted config lists thousands
	// of modules, and growing to it costs more than walking it once.
	return r.append(make([]byte, 0, renderedSize(v, 0)+512), v, 0)
}

// renderedSize is about the length of v rendered at depth (exact but for
// escapes and numbers, which it counts as a few bytes).
func renderedSize(v any, depth int) int {
	switch t := v.(type) {
	case string:
		return len(t) + 2
	case json.Number:
		return len(t)
	case []any:
		n := 2*depth + 3
		for _, x := range t {
			n += 2*depth + 4 + renderedSize(x, depth+1)
		}
		return n
	case map[string]any:
		n := 2*depth + 3
		for k, x := range t {
			n += 2*depth + 8 + len(k) + renderedSize(x, depth+1)
		}
		return n
	}
	return 8
}

// configRenderer renders one document, copying a map that recurs at the same
// depth (quantized_layers gives thousands of modules one entry) from where
// it was first rendered.
type configRenderer struct {
	rendered map[renderedMap][2]int
}

type renderedMap struct {
	m     uintptr // the map's identity (maps do not move)
	depth int
}

// newline ends a line and indents the next one.
func newline(b []byte, depth int) []byte {
	b = append(b, '\n')
	for range depth {
		b = append(b, ' ', ' ')
	}
	return b
}

func (r *configRenderer) append(b []byte, v any, depth int) ([]byte, error) {
	var err error
	switch t := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, t), nil
	case string:
		return safetensors.AppendPythonJSONString(b, t), nil
	case json.Number:
		if !validNumber(string(t)) {
			return nil, fmt.Errorf("config: %q is not a JSON number", string(t))
		}
		return append(b, t...), nil
	case int:
		return strconv.AppendInt(b, int64(t), 10), nil
	case int64:
		return strconv.AppendInt(b, t, 10), nil
	case float64:
		return appendPythonFloat(b, t)
	case []any:
		if len(t) == 0 {
			return append(b, "[]"...), nil
		}
		b = append(b, '[')
		for i, x := range t {
			if i > 0 {
				b = append(b, ',')
			}
			b = newline(b, depth+1)
			if b, err = r.append(b, x, depth+1); err != nil {
				return nil, err
			}
		}
		return append(newline(b, depth), ']'), nil
	case map[string]any:
		if len(t) == 0 {
			return append(b, "{}"...), nil
		}
		id := renderedMap{reflect.ValueOf(t).Pointer(), depth}
		if at, ok := r.rendered[id]; ok {
			return append(b, b[at[0]:at[1]]...), nil
		}
		start := len(b)
		b = append(b, '{')
		// Byte order of UTF-8 is code point order, Python's.
		for i, k := range slices.Sorted(maps.Keys(t)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = newline(b, depth+1)
			b = append(safetensors.AppendPythonJSONString(b, k), ':', ' ')
			if b, err = r.append(b, t[k], depth+1); err != nil {
				return nil, err
			}
		}
		b = append(newline(b, depth), '}')
		r.rendered[id] = [2]int{start, len(b)}
		return b, nil
	}
	return nil, fmt.Errorf("config: cannot write a %T as JSON", v)
}

// validNumber checks the JSON number grammar.
func validNumber(s string) bool {
	return s != "" && json.Valid([]byte(s)) && (s[0] == '-' || s[0] >= '0' && s[0] <= '9')
}

// appendPythonFloat writes f as Python's repr: the shortest round-trip
// digits, fixed notation for exponents -4..15 (with ".0" when integral),
// else d.ddde±XX.
func appendPythonFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("config: %v is not a JSON number", f)
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // e.g. "-1.5e-05"
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	if exp < -4 || exp >= 16 {
		b = append(b, mant...)
		b = append(b, 'e')
		if exp < 0 {
			b, exp = append(b, '-'), -exp
		} else {
			b = append(b, '+')
		}
		if exp < 10 {
			b = append(b, '0')
		}
		return strconv.AppendInt(b, int64(exp), 10), nil
	}
	b = strconv.AppendFloat(b, f, 'f', -1, 64)
	if f == math.Trunc(f) {
		b = append(b, '.', '0')
	}
	return b, nil
}
