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
		l, err := builtinLayout(name, k3Model(), o)
		if err != nil {
			f.Fatal(err)
		}
		b, err := l.jsonText()
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
	// Inputs of a few hundred bytes that once cost gigabytes or minutes.
	rule := func(pat string) string {
		return `"rules":[{"name":"a","match":["` + pat + `"],"action":"replicate"}]`
	}
	f.Add([]byte(`{"name":"x",` + rule(strings.Repeat("{a,b}", 40)) + `}`))
	f.Add([]byte(`{"name":"x",` + rule(strings.Repeat("**.", 40)+"x") + `}`))
	f.Add([]byte(`{"name":"x","layers":4611686018427387904,` + rule("**") + `}`))
	f.Add([]byte(`{"name":"x","layers":2147483648,"ranks_per_stage":1,` + rule("**") + `}`))
	f.Add([]byte(`{"name":"x","ranks_per_stage":4096,` + rule("**") + `}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := parseLayout(data)
		if err != nil {
			if !errors.Is(err, errLayout) && !errors.Is(err, errPattern) {
				t.Fatalf("rejection is neither ErrLayout nor ErrPattern: %v", err)
			}
			return
		}
		if l.Layers > maxLayers || l.RanksPerStage > maxRanks || l.ranks() > maxRanks {
			t.Fatalf("accepted %d layers, %d ranks: past the bounds", l.Layers, l.ranks())
		}
		b, err := l.jsonText()
		if err != nil {
			t.Fatalf("accepted layout does not encode: %v", err)
		}
		l2, err := parseLayout(b)
		if err != nil {
			t.Fatalf("re-encoded layout rejected: %v\n%s", err, b)
		}
		b2, err := l2.jsonText()
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("JSON round trip is not a fixed point (err %v):\n%s\n---\n%s", err, b, b2)
		}
	})
}

// FuzzCompilePattern checks the pattern compiler never panics, rejects only
// with errPattern, and that an accepted pattern without wildcards, braces or
// captures matches its own dotted segments.
func FuzzCompilePattern(f *testing.F) {
	for _, s := range []string{
		"language_model.model.layers.<layer>.self_attn.{q,k,v}_proj.weight",
		"model.layers.#.mlp.experts.<expert>.*.*",
		"vision_tower.**", "a.{b,c", "a..b", "<layer>.<layer>", "[", "x.y.z",
		strings.Repeat("{a,b}", 40), strings.Repeat("**.", 40) + "x", strings.Repeat("**.*.", 30) + "#",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := compilePattern(src)
		if err != nil {
			if !errors.Is(err, errPattern) {
				t.Fatalf("rejection is not ErrPattern: %v", err)
			}
			return
		}
		for _, sg := range p.segs {
			if len(sg.alts) > maxAlternatives {
				t.Fatalf("%q: a segment of %d alternatives", src, len(sg.alts))
			}
		}
		// Matching a long name costs one test per (segment, name segment):
		// any backtracking shows as a fuzz run that does not end.
		long := strings.Split(strings.Repeat("a.1.", 500)+"z", ".")
		p.match(long)
		if strings.ContainsAny(src, `*?[\{},<>#`) {
			return
		}
		if _, ok := p.match(strings.Split(src, ".")); !ok {
			t.Fatalf("literal pattern %q does not match itself", src)
		}
	})
}
