package model

import (
	"fmt"
	"strconv"
	"strings"
)

// expr is a compiled integer expression of a schema file: a shape entry,
// a repeat count, a condition. The grammar is small on purpose:
//
//	expr  = ["!"] cmp
//	cmp   = sum [("==" | "<") sum]
//	sum   = term {("+" | "-") term}
//	term  = atom {("*" | "/" | "%") atom}
//	atom  = integer | name | "(" cmp ")"
//
// A name is a dimension of the schema or a config key as the family's reader
// gives it (linear_attn_config.num_heads, vision_config.merge_kernel_size[0]);
// a boolean key reads 1 or 0. "/" and "%" are Go's integer division and
// remainder; the family's reader has checked the divisibility a shape needs.
// A comparison reads 1 or 0.
type expr struct {
	src  string
	root *node
}

type node struct {
	op          byte // 0: literal, 'n': name, '!', '+', '-', '*', '/', '%'
	val         int64
	name        string
	left, right *node
}

// env resolves the names of an expression.
type env func(name string) (int64, error)

func parseExpr(s string) (expr, error) {
	p := &exprParser{s: s}
	neg := false
	p.space()
	if p.peek() == '!' {
		p.i++
		neg = true
	}
	n, err := p.cmp()
	if err == nil && p.peek() != 0 {
		err = fmt.Errorf("unexpected %q at %d", p.s[p.i:], p.i)
	}
	if err != nil {
		return expr{}, fmt.Errorf("expression %q: %w", s, err)
	}
	if neg {
		n = &node{op: '!', left: n}
	}
	return expr{src: s, root: n}, nil
}

type exprParser struct {
	s string
	i int
}

func (p *exprParser) space() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *exprParser) peek() byte {
	p.space()
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *exprParser) cmp() (*node, error) {
	l, err := p.sum()
	var op byte
	switch {
	case err != nil:
		return l, err
	case strings.HasPrefix(p.s[p.i:], "=="):
		op, p.i = '=', p.i+2
	case p.peek() == '<':
		op, p.i = '<', p.i+1
	default:
		return l, nil
	}
	r, err := p.sum()
	return &node{op: op, left: l, right: r}, err
}

func (p *exprParser) sum() (*node, error) { return p.chain("+-", p.term) }

func (p *exprParser) term() (*node, error) { return p.chain("*/%", p.atom) }

// chain parses operands joined by the operators in ops, left to right.
func (p *exprParser) chain(ops string, operand func() (*node, error)) (*node, error) {
	l, err := operand()
	for err == nil && strings.IndexByte(ops, p.peek()) >= 0 {
		op := p.s[p.i]
		p.i++
		var r *node
		if r, err = operand(); err == nil {
			l = &node{op: op, left: l, right: r}
		}
	}
	return l, err
}

func isNameByte(c byte) bool {
	return c == '_' || c == '.' || c == '[' || c == ']' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func (p *exprParser) atom() (*node, error) {
	switch c := p.peek(); {
	case c == '(':
		p.i++
		n, err := p.cmp()
		if err != nil {
			return nil, err
		}
		if p.peek() != ')' {
			return nil, fmt.Errorf("missing ) at %d", p.i)
		}
		p.i++
		return n, nil
	case c >= '0' && c <= '9':
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		v, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
		if err != nil {
			return nil, err
		}
		p.i = j
		return &node{val: v}, nil
	case isNameByte(c):
		j := p.i
		for j < len(p.s) && isNameByte(p.s[j]) {
			j++
		}
		n := &node{op: 'n', name: p.s[p.i:j]}
		p.i = j
		return n, nil
	case c == 0:
		return nil, fmt.Errorf("unexpected end")
	default:
		return nil, fmt.Errorf("unexpected %q at %d", c, p.i)
	}
}

// eval computes the expression; overflow past ±2^62, a division by zero
// and an unknown name are errors.
func (e expr) eval(en env) (int64, error) {
	v, err := e.root.eval(en)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", e.src, err)
	}
	return v, nil
}

const exprLimit = 1 << 62

func (n *node) eval(en env) (int64, error) {
	switch n.op {
	case 0:
		return n.val, nil
	case 'n':
		return en(n.name)
	}
	a, err := n.left.eval(en)
	if err != nil {
		return 0, err
	}
	if n.op == '!' {
		return b2i(a == 0), nil
	}
	b, err := n.right.eval(en)
	if err != nil {
		return 0, err
	}
	var v int64
	switch n.op {
	case '=':
		v = b2i(a == b)
	case '<':
		v = b2i(a < b)
	case '+':
		v = a + b
	case '-':
		v = a - b
	case '*':
		if a != 0 && (abs(a) > exprLimit/max(abs(b), 1)) {
			return 0, fmt.Errorf("%d × %d overflows", a, b)
		}
		v = a * b
	case '/', '%':
		if b == 0 {
			return 0, fmt.Errorf("division by zero (%d %c 0)", a, n.op)
		}
		if n.op == '%' {
			return a % b, nil
		}
		v = a / b
	}
	if abs(v) > exprLimit {
		return 0, fmt.Errorf("%d overflows", v)
	}
	return v, nil
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// expand replaces each {key} of s by vars[key].
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "{") {
		return s
	}
	for k, v := range vars {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}
