package safetensors

// Literals of a tensor entry in the compact form the reference serializer
// writes: {"dtype":"BF16","shape":[7168],"data_offsets":[0,14336]}.
const (
	compactDType   = `{"dtype":"`
	compactShape   = `","shape":[`
	compactOffsets = `,"data_offsets":[`
)

// compactTensor parses a tensor entry written in the reference's compact
// form, the form of every released header, without the general parser's
// per-key work. It accepts a subset of what tensor accepts and gives the same
// result; on anything else (whitespace, another key order, an escape, a
// number tensor would reject or read differently) it leaves p where it was
// and reports false, and tensor decides.
func (p *parser) compactTensor(name string) (TensorInfo, bool) {
	start := p.i
	t, ok := p.compact(name)
	if !ok {
		p.i = start
	}
	return t, ok
}

func (p *parser) compact(name string) (TensorInfo, bool) {
	t := TensorInfo{Name: name}
	if !p.lit(compactDType) {
		return t, false
	}
	// The dtype: a short name of letters and digits, checked against the
	// previous tensor's first (consecutive tensors mostly share one).
	j := p.i
	for j < len(p.b) && j-p.i < 16 && (p.b[j] >= 'A' && p.b[j] <= 'Z' || p.b[j] >= '0' && p.b[j] <= '9' || p.b[j] == '_') {
		j++
	}
	raw := p.b[p.i:j]
	switch {
	case p.lastDType != "" && string(raw) == p.lastDType:
		t.DType = p.lastDTypeVal
	default:
		d, ok := dtypeByName[string(raw)]
		if !ok {
			return t, false
		}
		t.DType, p.lastDType, p.lastDTypeVal = d, dtypeFacts[d].name, d
	}
	p.i = j
	if !p.lit(compactShape) {
		return t, false
	}
	dims := p.scratch[:0]
	if !p.eat(']') {
		for {
			v, ok := p.compactUint()
			if !ok || len(dims) == cap(dims) {
				return t, false
			}
			dims = append(dims, v)
			if p.eat(',') {
				continue
			}
			if p.eat(']') {
				break
			}
			return t, false
		}
	}
	if !p.lit(compactOffsets) {
		return t, false
	}
	var ok bool
	if t.Begin, ok = p.compactUint(); !ok || !p.eat(',') {
		return t, false
	}
	if t.End, ok = p.compactUint(); !ok || !p.eat(']') || !p.eat('}') {
		return t, false
	}
	t.Shape = p.carve(dims)
	return t, true
}

// lit consumes s if the input continues with it.
func (p *parser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// compactUint reads a number as uint does when it is 1 to 18 digits with no
// leading zero (it then fits an int64 without a check per digit); anything
// else, or a number followed by '.', 'e' or 'E', is left to uint.
func (p *parser) compactUint() (int64, bool) {
	start := p.i
	var v int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		v = v*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	n := p.i - start
	if n == 0 || n > 18 || (n > 1 && p.b[start] == '0') {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	return v, true
}
