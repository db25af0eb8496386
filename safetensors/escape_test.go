package safetensors

import (
	"encoding/json"
	"testing"
)

// Every escape form JSON has decodes as encoding/json decodes it, and the
// malformed ones are refused.
func TestUnescapeMatchesEncodingJSON(t *testing.T) {
	for _, lit := range []string{
		`"plain"`, `"a\"b"`, `"\\"`, `"\/"`, `"\b"`, `"\f"`, `"\n"`, `"\r"`, `"\t"`,
		`"x\b\f\n\r\ty\/\\\""`, `"\u0041\u00e9\u4e2d"`, `"\u001f"`, `"\ud83d\ude00"`, `"é中😀"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatalf("%s: encoding/json: %v", lit, err)
		}
		p := newParser([]byte(lit))
		got, err := p.str()
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; encoding/json gives %q", lit, got, err, want)
		}
		for _, ascii := range []bool{false, true} {
			p := newParser(appendJSONString(nil, want, ascii))
			if back, err := p.str(); err != nil || back != want {
				t.Errorf("%q escaped (ensureASCII %v) as %s reads back as %q, %v", want, ascii, p.b, back, err)
			}
		}
	}
	for _, lit := range []string{`"\x"`, `"\u12"`, `"\u12g4"`, `"\ud83d"`, `"\ud83dx"`, `"\ude00"`, `"\"`} {
		p := newParser([]byte(lit))
		if s, err := p.str(); err == nil {
			t.Errorf("%s: accepted as %q", lit, s)
		}
	}
}
