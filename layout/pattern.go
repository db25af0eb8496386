package layout

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Pattern syntax. A pattern is a dot-separated list of segments matched against
// the dot-separated segments of a tensor name:
//
//	**        zero or more segments
//	#         one segment that is a decimal integer
//	<layer>   a decimal integer, captured as the tensor's layer (stage placement)
//	<expert>  a decimal integer, captured as the tensor's expert index (expert parallel)
//	other     one segment, a glob: * matches any run of characters, {a,b,c} alternatives
//
// Example: language_model.model.layers.<layer>.self_attn.{q,k,v,g}_proj.weight
const (
	segAnyRun = "**"
	segInt    = "#"
	segLayer  = "<layer>"
	segExpert = "<expert>"
)

// Bounds on one pattern, so that what a layout file spells in a few bytes
// cannot cost gigabytes to compile or minutes to match: brace alternatives
// multiply (expansion is capped before it is done), and matching is linear in
// the name for a pattern of at most maxPatternSegs segments (see match).
const (
	maxPatternLen   = 1 << 10 // bytes
	maxPatternSegs  = 63      // dot-separated segments (one bit each in match)
	maxAlternatives = 1 << 10 // globs one segment's braces expand to
)

type segKind uint8

const (
	kindGlob   segKind = iota // one segment, against glob alternatives
	kindRun                   // zero or more segments
	kindInt                   // one all-digit segment
	kindLayer                 // one all-digit segment, captured as the layer
	kindExpert                // one all-digit segment, captured as the expert
)

type segment struct {
	kind  segKind
	alts  []string // kindGlob: expanded alternatives, each a path.Match glob
	exact bool     // kindGlob: no wildcard in any alternative (compare strings)
}

type pattern struct {
	segs []segment
	// numeric reports a glob segment that can tell integers apart, which
	// makes match results depend on the numbers in a name.
	numeric            bool
	run, layer, expert bool // a **, <layer> and <expert> segment
}

// captures holds the segment positions of <layer> and <expert> in a name (-1: none).
type captures struct{ layer, expert int }

func compilePattern(src string) (*pattern, error) {
	if src == "" {
		return nil, fmt.Errorf("%w: empty pattern", errPattern)
	}
	if len(src) > maxPatternLen {
		return nil, fmt.Errorf("%w: %.40q…: %d bytes (limit %d)", errPattern, src, len(src), maxPatternLen)
	}
	parts := strings.Split(src, ".")
	if len(parts) > maxPatternSegs {
		return nil, fmt.Errorf("%w: %.40q…: %d segments (limit %d)", errPattern, src, len(parts), maxPatternSegs)
	}
	p := &pattern{}
	twice := false // <layer> or <expert> seen twice
	for _, s := range parts {
		switch s {
		case segAnyRun:
			p.run = true
			p.segs = append(p.segs, segment{kind: kindRun})
		case segInt:
			p.segs = append(p.segs, segment{kind: kindInt})
		case segLayer:
			twice, p.layer = twice || p.layer, true
			p.segs = append(p.segs, segment{kind: kindLayer})
		case segExpert:
			twice, p.expert = twice || p.expert, true
			p.segs = append(p.segs, segment{kind: kindExpert})
		default:
			if s == "" {
				return nil, fmt.Errorf("%w: %q has an empty segment", errPattern, src)
			}
			alts, err := expandBraces(s)
			if err == errTooMany {
				return nil, fmt.Errorf("%w: %q: segment %.40q expands to %d alternatives or more (limit %d)", errPattern, src, s, maxAlternatives+1, maxAlternatives)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: %q: %v", errPattern, src, err)
			}
			exact := true
			for _, a := range alts {
				if _, err := path.Match(a, ""); err != nil {
					return nil, fmt.Errorf("%w: %q: bad glob %q", errPattern, src, a)
				}
				if strings.ContainsAny(a, `*?[\`) {
					exact = false
				}
				if canMatchSomeInts(a) {
					p.numeric = true
				}
			}
			p.segs = append(p.segs, segment{kind: kindGlob, alts: alts, exact: exact})
		}
	}
	if twice {
		return nil, fmt.Errorf("%w: %q captures <layer> or <expert> more than once", errPattern, src)
	}
	return p, nil
}

var errTooMany = errors.New("too many alternatives")

// expandBraces turns "{q,k}_proj" into ["q_proj", "k_proj"]; braces do not
// nest. Past maxAlternatives it stops (errTooMany) before expanding further.
func expandBraces(s string) ([]string, error) {
	out := []string{""}
	for {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			if strings.IndexByte(s, '}') >= 0 {
				return nil, fmt.Errorf("unbalanced } in %q", s)
			}
			for k := range out {
				out[k] += s
			}
			return out, nil
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("unbalanced { in %q", s)
		}
		inner := s[i+1 : i+j]
		if strings.IndexByte(inner, '{') >= 0 {
			return nil, fmt.Errorf("nested braces in %q", s)
		}
		alts := strings.Split(inner, ",")
		if len(out)*len(alts) > maxAlternatives {
			return nil, errTooMany
		}
		next := make([]string, 0, len(out)*len(alts))
		for _, p := range out {
			for _, a := range alts {
				next = append(next, p+s[:i]+a)
			}
		}
		out, s = next, s[i+j+1:]
	}
}

// canMatchSomeInts reports whether a glob could match some all-digit segments
// but not others ("1*", "?"), which makes name-shape caching unsound.
func canMatchSomeInts(glob string) bool {
	if glob == "*" {
		return false
	}
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; {
		case c == '*' || c == '?':
		case c == '[':
			return true // a character class might hold digits
		case c < '0' || c > '9':
			return false
		}
	}
	return true
}

// intSeg reports whether a name segment is an integer, or the '#' that stands
// for one in a shape key.
func intSeg(s string) bool {
	if s == "#" {
		return true
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// match reports whether the name segments match, and where the captures are.
// Where several ways match, every ** takes the fewest segments, earliest
// first, as backtracking in that order would.
func (p *pattern) match(name []string) (captures, bool) {
	c := captures{-1, -1}
	if !p.run {
		if len(name) != len(p.segs) {
			return c, false
		}
		for i := range p.segs {
			if !p.segs[i].matchOne(name[i], i, &c) {
				return c, false
			}
		}
		return c, true
	}
	// ok[j] bit i: segs[i:] matches name[j:]; one test per (segment, position).
	var buf [32]uint64
	var ok []uint64
	if len(name)+1 <= len(buf) {
		ok = buf[:len(name)+1]
	} else {
		ok = make([]uint64, len(name)+1)
	}
	n, m := len(name), len(p.segs)
	ok[n] = 1 << m
	var scratch captures
	for i := m - 1; i >= 0; i-- {
		sg := &p.segs[i]
		bit, next := uint64(1)<<i, uint64(1)<<(i+1)
		for j := n; j >= 0; j-- {
			if sg.kind == kindRun {
				if ok[j]&next != 0 || (j < n && ok[j+1]&bit != 0) {
					ok[j] |= bit
				}
				continue
			}
			if j < n && ok[j+1]&next != 0 && sg.matchOne(name[j], j, &scratch) {
				ok[j] |= bit
			}
		}
	}
	if ok[0]&1 == 0 {
		return c, false
	}
	j := 0
	for i := range p.segs {
		sg := &p.segs[i]
		if sg.kind == kindRun {
			for ok[j]&(uint64(1)<<(i+1)) == 0 {
				j++
			}
			continue
		}
		sg.matchOne(name[j], j, &c)
		j++
	}
	return c, true
}

// matchOne matches name segment n at position pos against a segment other
// than **, recording a capture in c.
func (sg *segment) matchOne(n string, pos int, c *captures) bool {
	switch sg.kind {
	case kindLayer:
		c.layer = pos
	case kindExpert:
		c.expert = pos
	}
	if sg.kind != kindGlob {
		return intSeg(n)
	}
	for _, a := range sg.alts {
		ok := a == n
		if !sg.exact {
			ok, _ = path.Match(a, n)
		}
		if ok {
			return true
		}
	}
	return false
}

const maxIntSegs = 16

// nameShape is a tensor name's shape key plus the integers of its first
// maxIntSegs segments (-1 where a segment is not an integer).
type nameShape struct {
	key  []byte
	ints [maxIntSegs]int64
}

// scan fills s from name: the key has every all-digit segment replaced by
// '#'. Names with one key match the same rules at the same positions unless
// a pattern is numeric, so planning matches each key once, not every name.
func (s *nameShape) scan(name string) {
	key := s.key[:0]
	seg, kstart, val, digits := 0, 0, int64(0), true
	for i := 0; i <= len(name); i++ {
		if i < len(name) && name[i] != '.' {
			c := name[i]
			key = append(key, c)
			if c >= '0' && c <= '9' {
				val = val*10 + int64(c-'0')
			} else {
				digits = false
			}
			continue
		}
		n := len(key) - kstart
		isNum := digits && n > 0 && n <= 18
		if isNum {
			key = append(key[:kstart], '#')
		}
		if seg < maxIntSegs {
			s.ints[seg] = -1
			if isNum {
				s.ints[seg] = val
			}
		}
		if i < len(name) {
			key = append(key, '.')
		}
		seg, kstart, val, digits = seg+1, len(key), 0, true
	}
	for ; seg < maxIntSegs; seg++ {
		s.ints[seg] = -1
	}
	s.key = key
}
