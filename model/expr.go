package model

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
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

// parseExpr parses s with Go's expression parser, whose precedence the
// grammar shares, and keeps what the grammar has: a leading "!" applies to
// the whole expression, and a comparison's operand is no comparison unless
// parenthesized.
func parseExpr(s string) (expr, error) {
	body, neg := strings.CutPrefix(strings.TrimLeft(s, " "), "!")
	x, err := parser.ParseExpr(body)
	var n *node
	if err == nil {
		n, err = toNode(body, x, false)
	}
	if err != nil {
		return expr{}, fmt.Errorf("expression %q: %w", s, err)
	}
	if neg {
		n = &node{op: '!', left: n}
	}
	return expr{src: s, root: n}, nil
}

var binaryOps = map[token.Token]byte{token.EQL: '=', token.LSS: '<', token.ADD: '+', token.SUB: '-',
	token.MUL: '*', token.QUO: '/', token.REM: '%'}

// toNode converts x, parsed from src, refusing what the grammar lacks;
// inCmp is whether x is a comparison's operand.
func toNode(src string, x ast.Expr, inCmp bool) (*node, error) {
	text := src[x.Pos()-1 : x.End()-1]
	switch t := x.(type) {
	case *ast.ParenExpr:
		return toNode(src, t.X, false)
	case *ast.BasicLit:
		if v, err := strconv.ParseInt(t.Value, 10, 64); err == nil && t.Kind == token.INT {
			return &node{val: v}, nil
		}
	case *ast.Ident, *ast.SelectorExpr, *ast.IndexExpr:
		if isWord(text, ".[]") {
			return &node{op: 'n', name: text}, nil
		}
	case *ast.BinaryExpr:
		op, ok := binaryOps[t.Op]
		cmp := op == '=' || op == '<'
		if !ok || cmp && inCmp {
			break
		}
		l, err := toNode(src, t.X, cmp)
		if err != nil {
			return nil, err
		}
		r, err := toNode(src, t.Y, cmp)
		return &node{op: op, left: l, right: r}, err
	}
	return nil, fmt.Errorf("unexpected %q at %d", text, x.Pos()-1)
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

// holds evaluates an optional condition, true when there is none.
func (e *expr) holds(en env) (bool, error) {
	if e == nil {
		return true, nil
	}
	v, err := e.eval(en)
	return v != 0, err
}

// size evaluates a shape entry or repeat count, refusing a negative one.
func (e expr) size(en env) (int64, error) {
	v, err := e.eval(en)
	if err == nil && v < 0 {
		err = fmt.Errorf("%s is %d", e.src, v)
	}
	return v, err
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
		if a != 0 && max(a, -a) > exprLimit/max(b, -b, 1) {
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
	if max(v, -v) > exprLimit {
		return 0, fmt.Errorf("%d overflows", v)
	}
	return v, nil
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
