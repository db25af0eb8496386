package safetensors

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// parser is a JSON scanner for headers and indexes that builds no generic values.
type parser struct {
	b       []byte
	s       string // b's bytes, not copied: names are substrings of it
	i       int
	arena   []int64 // backing store for shapes, carved into capped sub-slices
	dims    int     // shape entries carved so far
	scratch [16]int64
}

func (p *parser) errf(class error, format string, args ...any) error {
	return fmt.Errorf("%w: %s at byte %d", class, fmt.Sprintf(format, args...), p.i)
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// members parses an object or array opening at p.i, calling fn for each member
// with p.i at its value (after an object member's key and ':').
func (p *parser) members(open byte, fn func(key string) error) error {
	closing := byte('}')
	if open == '[' {
		closing = ']'
	}
	if !p.eat(open) {
		return p.errf(errHeaderJSON, "expected '%c'", open)
	}
	p.ws()
	if p.eat(closing) {
		return nil
	}
	for {
		p.ws()
		var key string
		if open == '{' {
			k, err := p.str()
			if err != nil {
				return err
			}
			p.ws()
			if !p.eat(':') {
				return p.errf(errHeaderJSON, "expected ':' after key %s", termtext.Name(k))
			}
			p.ws()
			key = k
		}
		if err := fn(key); err != nil {
			return err
		}
		p.ws()
		if p.eat(',') {
			if p.ws(); p.at(closing) {
				return p.errf(errHeaderJSON, "trailing comma before '%c'", closing)
			}
			continue
		}
		if p.eat(closing) {
			return nil
		}
		return p.errf(errHeaderJSON, "expected ',' or '%c'", closing)
	}
}

// at reports whether the input continues with c.
func (p *parser) at(c byte) bool { return p.i < len(p.b) && p.b[p.i] == c }

func (p *parser) eat(c byte) bool {
	if p.at(c) {
		p.i++
		return true
	}
	return false
}

// lit consumes s if the input continues with it.
func (p *parser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// rawStr scans a string: its bytes between the quotes and whether it has escapes.
func (p *parser) rawStr() ([]byte, bool, error) {
	if !p.eat('"') {
		return nil, false, p.errf(errHeaderJSON, "expected a string")
	}
	start, esc := p.i, false
	// Fast path: a vectorised search for the closing quote, then a check for
	// escapes and control characters in the span.
	if q := bytes.IndexByte(p.b[p.i:], '"'); q >= 0 {
		span := p.b[p.i : p.i+q]
		if clean(span) {
			p.i += q + 1
			return span, false, nil
		}
	}
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, esc, nil
		case c == '\\':
			esc = true
			p.i += 2
		case c < 0x20:
			return nil, false, p.errf(errHeaderJSON, "control character in string")
		default:
			p.i++
		}
	}
	return nil, false, p.errf(errHeaderJSON, "unterminated string")
}

// clean reports whether b holds no '\\' and no control character, eight
// bytes at a time: names are most of a header's bytes.
func clean(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		y := x ^ ('\\' * ones)             // a zero byte where b has '\\'
		lt := (x - 0x20*ones) &^ x & highs // the high bit set where a byte is < 0x20 (and some ≥ 0x80 followed by one)
		bs := (y - ones) &^ y & highs      // the high bit set where y has a zero byte (idem)
		if lt|bs != 0 {
			break // something to look at: the bytewise loop decides exactly
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 || c == '\\' {
			return false
		}
	}
	return true
}

func (p *parser) str() (string, error) {
	raw, esc, err := p.rawStr()
	if err != nil {
		return "", err
	}
	if !esc {
		end := p.i - 1
		return p.s[end-len(raw) : end], nil
	}
	return p.unescape(raw)
}

func (p *parser) unescape(raw []byte) (string, error) {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(raw) {
			return "", p.errf(errHeaderJSON, "bad escape")
		}
		if e := strings.IndexByte(`"\/bfnrt`, raw[i]); e >= 0 {
			out = append(out, "\"\\/\b\f\n\r\t"[e])
			continue
		}
		if raw[i] != 'u' {
			return "", p.errf(errHeaderJSON, "bad escape \\%c", raw[i])
		}
		r, n, ok := hex4(raw[i+1:])
		if !ok {
			return "", p.errf(errHeaderJSON, "bad \\u escape")
		}
		i += n
		if utf16.IsSurrogate(r) {
			r2, n2, ok2 := rune(0), 0, false
			if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				r2, n2, ok2 = hex4(raw[i+3:])
			}
			dec := utf16.DecodeRune(r, r2)
			if !ok2 || dec == utf8.RuneError {
				return "", p.errf(errHeaderJSON, "unpaired surrogate in \\u escape")
			}
			i += 2 + n2
			r = dec
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out), nil
}

func hex4(b []byte) (rune, int, bool) {
	if len(b) < 4 {
		return 0, 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 32)
	if err != nil {
		return 0, 0, false
	}
	return rune(v), 4, true
}

// uint parses a JSON number that must be a non-negative integer fitting int64;
// class names the error for anything else (negative, fractional, overflowing).
func (p *parser) uint(class error, what string) (int64, error) {
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		return 0, p.errf(class, "%s is negative", what)
	}
	var v uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		d := uint64(p.b[p.i] - '0')
		if v > (1<<63-1-d)/10 {
			return 0, p.errf(class, "%s overflows", what)
		}
		v = v*10 + d
		p.i++
	}
	if p.i == start {
		return 0, p.errf(class, "%s is not a number", what)
	}
	if p.i-start > 1 && p.b[start] == '0' {
		return 0, p.errf(errHeaderJSON, "%s has a leading zero", what)
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, p.errf(class, "%s is not an integer", what)
	}
	return int64(v), nil
}

func (p *parser) uintArray(class error, what string, dst []int64) ([]int64, error) {
	if !p.at('[') {
		return nil, p.errf(class, "%s is not an array", what)
	}
	err := p.members('[', func(string) error {
		v, err := p.uint(class, what)
		dst = append(dst, v)
		return err
	})
	return dst, err
}

// skip passes over any JSON value.
func (p *parser) skip(depth int) error {
	if depth > maxJSONDepth {
		return p.errf(errHeaderJSON, "nesting deeper than %d", maxJSONDepth)
	}
	if p.i >= len(p.b) {
		return p.errf(errHeaderJSON, "unexpected end")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, err := p.str() // checks the escapes: the reference decodes every value
		return err
	case c == '{' || c == '[':
		return p.members(c, func(string) error { return p.skip(depth + 1) })
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if p.lit(lit) {
				return nil
			}
		}
		return p.errf(errHeaderJSON, "bad literal")
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.i
		if !p.number() {
			return p.errf(errHeaderJSON, "invalid number %q", p.b[start:min(p.i+1, len(p.b))])
		}
		// Range as the reference: a finite double (underflow to zero is fine).
		if _, err := strconv.ParseFloat(string(p.b[start:p.i]), 64); err != nil {
			return p.errf(errHeaderJSON, "number %s out of range", p.b[start:p.i])
		}
		return nil
	default:
		return p.errf(errHeaderJSON, "unexpected character %q", c)
	}
}

// number consumes a number in JSON's grammar,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and reports whether it was
// well formed; forms other parsers take (01, 1., .5, -.5, 1e, +1) are not.
func (p *parser) number() bool {
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	p.eat('-')
	switch {
	case p.eat('0'):
		if p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			return false // a leading zero
		}
	case digits() == 0:
		return false
	}
	if p.eat('.') && digits() == 0 {
		return false
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// newParser parses b, which is never modified afterwards: it is viewed as a
// string without a copy.
func newParser(b []byte) parser {
	return parser{b: b, s: unsafe.String(unsafe.SliceData(b), len(b))}
}
