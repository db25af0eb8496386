package layout

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// A few hundred bytes of layout JSON are refused, naming the field and the
// bound, before anything is sized by what they claim.
func TestLayoutNumbersBounded(t *testing.T) {
	t.Parallel()
	rule := `"rules":[{"name":"a","match":["**"],"action":"replicate"}]`
	for _, tc := range []struct{ js, want string }{
		{`{"name":"x","layers":4611686018427387904,` + rule + `}`, `"layers" is 4611686018427387904, out of [0, 65536]`},
		{`{"name":"x","layers":2147483648,` + rule + `}`, `"layers" is 2147483648`},
		{`{"name":"x","layers":1000000000,"ranks_per_stage":1,` + rule + `}`, `"layers" is 1000000000`},
		{`{"name":"x","layers":-1,"ranks_per_stage":1,` + rule + `}`, `"layers" is -1`},
		{`{"name":"x","ranks_per_stage":65537,` + rule + `}`, `"ranks_per_stage" is 65537, out of [1, 65536]`},
		{`{"name":"x","layers":2,"partition":[1,1],"ranks_per_stage":65536,` + rule + `}`, `"partition" has 2 stages`},
	} {
		l, err := parseLayout([]byte(tc.js))
		if !errors.Is(err, errLayout) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, %v; want ErrLayout saying %q", tc.js, l, err, tc.want)
		}
	}
}

// Brace alternatives multiply: a segment's expansion is counted before it is
// made, and refused past maxAlternatives.
func TestPatternExpansionBounded(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		strings.Repeat("{a,b}", 40),
		"x." + strings.Repeat("{a,b,c,d}", 6),
		strings.Repeat("{"+strings.Repeat("a,", 40)+"b}", 2),
	} {
		js := fmt.Sprintf(`{"name":"x","ranks_per_stage":1,"rules":[{"name":"a","match":[%q],"action":"replicate"}]}`, src)
		if _, err := parseLayout([]byte(js)); !errors.Is(err, errPattern) || !strings.Contains(err.Error(), "alternatives or more (limit 1024)") {
			t.Errorf("%.60s: got %v, want ErrPattern naming the 1024 alternatives limit", src, err)
		}
	}
	// At the bound it still compiles: 4^5 alternatives.
	if p, err := compilePattern(strings.Repeat("{a,b,c,d}", 5)); err != nil || len(p.segs[0].alts) != 1024 {
		t.Fatalf("1024 alternatives: %v", err)
	}
	for _, src := range []string{strings.Repeat("a.", 63) + "a", strings.Repeat("x", maxPatternLen+1)} {
		if _, err := compilePattern(src); !errors.Is(err, errPattern) || !strings.Contains(err.Error(), "limit") {
			t.Errorf("%.40s…: got %v, want ErrPattern naming the limit", src, err)
		}
	}
	// Many patterns together are bounded too.
	var pats []string
	for i := 0; i < 100; i++ {
		pats = append(pats, fmt.Sprintf("%q", strings.Repeat("{a,b,c,d}", 5)+fmt.Sprint(i)))
	}
	js := `{"name":"x","ranks_per_stage":1,"rules":[{"name":"a","match":[` + strings.Join(pats, ",") + `],"action":"replicate"}]}`
	if _, err := parseLayout([]byte(js)); !errors.Is(err, errPattern) || !strings.Contains(err.Error(), "more than 65536 segments and alternatives") {
		t.Errorf("100 patterns of 1024 alternatives: got %v", err)
	}
}

// Runs of ** match in time linear in the name: 40 of them against a
// 2000-segment name that does not match would take exponential time to
// backtrack through.
func TestPatternMatchLinear(t *testing.T) {
	t.Parallel()
	p, err := compilePattern(strings.Repeat("**.", 40) + "<layer>.x")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Split(strings.Repeat("a.", 2000)+"7.y", ".")
	if _, ok := p.match(name); ok {
		t.Fatal("matched a name that does not end in x")
	}
	name[len(name)-1] = "x"
	c, ok := p.match(name)
	if !ok || c.layer != len(name)-2 {
		t.Fatalf("got %v %v, want a match capturing layer at %d", c, ok, len(name)-2)
	}
}

// refMatch is the backtracking definition of a match: every ** tries the
// fewest segments first. It is exponential, so used on short names only.
func refMatch(segs []segment, name []string, pos int, c *captures) bool {
	if len(segs) == 0 {
		return len(name) == 0
	}
	if segs[0].kind == kindRun {
		for k := 0; k <= len(name); k++ {
			saved := *c
			if refMatch(segs[1:], name[k:], pos+k, c) {
				return true
			}
			*c = saved
		}
		return false
	}
	return len(name) > 0 && segs[0].matchOne(name[0], pos, c) && refMatch(segs[1:], name[1:], pos+1, c)
}

// The linear matcher agrees with the backtracking definition, captures
// included, on random short patterns and names.
func TestPatternMatchAgreesWithBacktracking(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(1))
	pick := func(from []string) string { return from[rng.Intn(len(from))] }
	for n := 0; n < 20000; n++ {
		var ps []string
		for i := rng.Intn(6); i >= 0; i-- {
			ps = append(ps, pick([]string{"**", "**", "#", "a", "b", "*", "{a,1}"}))
		}
		if rng.Intn(2) == 0 {
			ps[rng.Intn(len(ps))] = "<layer>"
		}
		p, err := compilePattern(strings.Join(ps, "."))
		if err != nil {
			continue
		}
		var name []string
		for i := rng.Intn(7); i > 0; i-- {
			name = append(name, pick([]string{"a", "b", "1", "2"}))
		}
		want := captures{-1, -1}
		wok := refMatch(p.segs, name, 0, &want)
		got, ok := p.match(name)
		if ok != wok || (ok && got != want) {
			t.Fatalf("%s on %q: got %v %v, backtracking gives %v %v", strings.Join(ps, "."), name, got, ok, want, wok)
		}
	}
}

// A layout file that states a layer count other than the checkpoint's is
// refused before planning; one that states none places nothing by count.
func TestLayoutLayersMustMatchConfig(t *testing.T) {
	t.Parallel()
	src := must(OpenSource(testckpt.Replica(t, model.ScaleTiny)))(t)
	defer src.Close()
	m := must(src.Model())(t)
	js := fmt.Sprintf(`{"name":"x","layers":%d,"ranks_per_stage":1,"rules":[{"name":"a","match":["**"],"action":"replicate"}]}`, m.Layers+1)
	l := must(parseLayout([]byte(js)))(t)
	_, err := PlanExport(src, l, ExportOptions{})
	want := fmt.Sprintf(`"layers" is %d, but the checkpoint's config.json has num_hidden_layers %d`, m.Layers+1, m.Layers)
	if !errors.Is(err, errLayout) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want ErrLayout saying %q", err, want)
	}
	if err := l.checkLayers(Model{Layers: m.Layers + 1}); err != nil {
		t.Fatal(err)
	}
}

// Replicating everything over many ranks is refused before the ranks are
// planned: the plan would hold every rank's copy of every tensor. A
// selection of ranks within the bound plans.
func TestExportPlanSizeBounded(t *testing.T) {
	t.Parallel()
	src := must(OpenSource(testckpt.Replica(t, model.ScaleTiny)))(t)
	defer src.Close()
	l := must(parseLayout([]byte(`{"name":"wide","ranks_per_stage":4096,"rules":[{"name":"all","match":["**"],"action":"replicate"}]}`)))(t)
	_, err := PlanExport(src, l, ExportOptions{})
	if !errors.Is(err, errLayout) || !strings.Contains(err.Error(), "4096 ranks (ranks_per_stage 4096)") ||
		!strings.Contains(err.Error(), fmt.Sprintf("(%d); export fewer ranks per run with --ranks", maxPlanPieces)) {
		t.Fatalf("got %v, want ErrLayout naming the bound and --ranks", err)
	}
	p, err := PlanExport(src, l, ExportOptions{Ranks: []int{4095}})
	if err != nil || len(p.Dirs) != 1 || p.Dirs[0].Rank != 4095 {
		t.Fatalf("one rank of 4096: %v", err)
	}
}
