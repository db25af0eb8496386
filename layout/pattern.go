package layout

import (
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
	segAnyRun   = "**"
	segInt      = "#"
	segLayer    = "<layer>"
	segExpert   = "<expert>"
	maxPatterns = 1 << 12
)

// segKind is what one compiled pattern segment matches.
type segKind uint8

const (
	// kindGlob matches one segment against glob alternatives.
	kindGlob segKind = iota
	// kindRun matches zero or more segments.
	kindRun
	// kindInt matches one all-digit segment.
	kindInt
	// kindLayer matches one all-digit segment and captures it as the layer.
	kindLayer
	// kindExpert matches one all-digit segment and captures it as the expert.
	kindExpert
)

type segment struct {
	kind  segKind
	alts  []string // kindGlob: expanded alternatives, each a path.Match glob
	exact bool     // kindGlob: no wildcard in any alternative (compare strings)
}

// pattern is a compiled name pattern.
type pattern struct {
	src  string
	segs []segment
	// numeric reports a glob segment that can tell integers apart (contains a
	// digit), which makes match results depend on the numbers in a name.
	numeric bool
}

// captures holds the segment positions of <layer> and <expert> in a name (-1: none).
type captures struct{ layer, expert int }

func compilePattern(src string) (*pattern, error) {
	if src == "" {
		return nil, fmt.Errorf("%w: empty pattern", ErrPattern)
	}
	p := &pattern{src: src}
	for _, s := range strings.Split(src, ".") {
		switch s {
		case segAnyRun:
			p.segs = append(p.segs, segment{kind: kindRun})
		case segInt:
			p.segs = append(p.segs, segment{kind: kindInt})
		case segLayer:
			p.segs = append(p.segs, segment{kind: kindLayer})
		case segExpert:
			p.segs = append(p.segs, segment{kind: kindExpert})
		default:
			if s == "" {
				return nil, fmt.Errorf("%w: %q has an empty segment", ErrPattern, src)
			}
			alts, err := expandBraces(s)
			if err != nil {
				return nil, fmt.Errorf("%w: %q: %v", ErrPattern, src, err)
			}
			exact := true
			for _, a := range alts {
				if _, err := path.Match(a, ""); err != nil {
					return nil, fmt.Errorf("%w: %q: bad glob %q", ErrPattern, src, a)
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
	nl, ne := 0, 0
	for _, sg := range p.segs {
		switch sg.kind {
		case kindLayer:
			nl++
		case kindExpert:
			ne++
		}
	}
	if nl > 1 || ne > 1 {
		return nil, fmt.Errorf("%w: %q captures <layer> or <expert> more than once", ErrPattern, src)
	}
	return p, nil
}

// expandBraces turns "{q,k}_proj" into ["q_proj", "k_proj"]; braces do not nest.
func expandBraces(s string) ([]string, error) {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		if strings.IndexByte(s, '}') >= 0 {
			return nil, fmt.Errorf("unbalanced } in %q", s)
		}
		return []string{s}, nil
	}
	j := strings.IndexByte(s[i:], '}')
	if j < 0 {
		return nil, fmt.Errorf("unbalanced { in %q", s)
	}
	j += i
	inner := s[i+1 : j]
	if strings.IndexByte(inner, '{') >= 0 {
		return nil, fmt.Errorf("nested braces in %q", s)
	}
	rest, err := expandBraces(s[j+1:])
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range strings.Split(inner, ",") {
		for _, r := range rest {
			out = append(out, s[:i]+a+r)
		}
	}
	return out, nil
}

// canMatchSomeInts reports whether a glob could match some all-digit segments
// but not others ("1*", "?"), which is what makes name-shape caching unsound.
// A lone "*" matches every integer alike; a glob with any other literal
// character matches none.
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
func intSeg(s string) bool { return s == "#" || isInt(s) }

func isInt(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// match reports whether the name segments match, and where the captures are.
func (p *pattern) match(name []string) (captures, bool) {
	c := captures{-1, -1}
	ok := p.matchFrom(p.segs, name, 0, &c)
	return c, ok
}

func (p *pattern) matchFrom(segs []segment, name []string, pos int, c *captures) bool {
	for len(segs) > 0 {
		sg := segs[0]
		if sg.kind == kindRun {
			for k := 0; k <= len(name); k++ {
				saved := *c
				if p.matchFrom(segs[1:], name[k:], pos+k, c) {
					return true
				}
				*c = saved
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		n := name[0]
		switch sg.kind {
		case kindInt:
			if !intSeg(n) {
				return false
			}
		case kindLayer:
			if !intSeg(n) {
				return false
			}
			c.layer = pos
		case kindExpert:
			if !intSeg(n) {
				return false
			}
			c.expert = pos
		case kindGlob:
			if !sg.matchGlob(n) {
				return false
			}
		}
		segs, name, pos = segs[1:], name[1:], pos+1
	}
	return len(name) == 0
}

func (sg *segment) matchGlob(n string) bool {
	for _, a := range sg.alts {
		if sg.exact {
			if a == n {
				return true
			}
			continue
		}
		if ok, _ := path.Match(a, n); ok {
			return true
		}
	}
	return false
}

// segmentAt returns the i-th dot-separated segment of name without allocating.
func segmentAt(name string, i int) string {
	for ; i > 0; i-- {
		k := strings.IndexByte(name, '.')
		if k < 0 {
			return ""
		}
		name = name[k+1:]
	}
	if k := strings.IndexByte(name, '.'); k >= 0 {
		return name[:k]
	}
	return name
}

// maxIntSegs bounds how many segment positions nameShape records integers for.
const maxIntSegs = 16

// nameShape is a tensor name's shape key plus the integers of its first
// maxIntSegs segments (-1 where a segment is not an integer).
type nameShape struct {
	key  []byte
	ints [maxIntSegs]int64
}

// scan fills s from name in one pass: the key has every all-digit segment
// replaced by '#'. Names with the same key match the same rules at the same
// positions as long as no pattern distinguishes integers (pattern.numeric),
// which lets planning match each distinct key once instead of each of ~500k
// tensors.
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

// intAt is the integer at segment position i, or -1.
func (s *nameShape) intAt(i int) int64 {
	if i < 0 || i >= maxIntSegs {
		return -1
	}
	return s.ints[i]
}
