package layout

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzParseLayout feeds layout JSON to the parser the CLI uses for
// --layout FILE.json. Seeds are the built-in layouts' own JSON. Whatever it
// accepts must survive a JSON round trip unchanged (what `inspect --layout`
// prints is what it reads back), and every rejection must be a layout error.
func FuzzParseLayout(f *testing.F) {
	for _, name := range Names() {
		o, err := DefaultOptions(name)
		if err != nil {
			f.Fatal(err)
		}
		l, err := Builtin(name, K3(), o)
		if err != nil {
			f.Fatal(err)
		}
		b, err := l.JSON()
		if err != nil {
			f.Fatal(err)
		}
		if _, err := parseLayout(b); err != nil {
			f.Fatalf("built-in %s does not read back from its own JSON: %v", name, err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"name":"x","rules":[{"match":["a.{b,c}.#"],"action":"replicate"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := parseLayout(data)
		if err != nil {
			if !errors.Is(err, ErrLayout) && !errors.Is(err, ErrPattern) {
				t.Fatalf("rejection is neither ErrLayout nor ErrPattern: %v", err)
			}
			return
		}
		b, err := l.JSON()
		if err != nil {
			t.Fatalf("accepted layout does not encode: %v", err)
		}
		l2, err := parseLayout(b)
		if err != nil {
			t.Fatalf("re-encoded layout rejected: %v\n%s", err, b)
		}
		b2, err := l2.JSON()
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("JSON round trip is not a fixed point (err %v):\n%s\n---\n%s", err, b, b2)
		}
	})
}

// FuzzCompilePattern checks the pattern compiler never panics, rejects only
// with ErrPattern, and that an accepted pattern without wildcards, braces or
// captures matches its own dotted segments.
func FuzzCompilePattern(f *testing.F) {
	for _, s := range []string{
		"language_model.model.layers.<layer>.self_attn.{q,k,v}_proj.weight",
		"model.layers.#.mlp.experts.<expert>.*.*",
		"vision_tower.**", "a.{b,c", "a..b", "<layer>.<layer>", "[", "x.y.z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := compilePattern(src)
		if err != nil {
			if !errors.Is(err, ErrPattern) {
				t.Fatalf("rejection is not ErrPattern: %v", err)
			}
			return
		}
		if strings.ContainsAny(src, `*?[\{},<>#`) {
			return
		}
		if _, ok := p.match(strings.Split(src, ".")); !ok {
			t.Fatalf("literal pattern %q does not match itself", src)
		}
	})
}
