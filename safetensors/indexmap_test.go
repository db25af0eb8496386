package safetensors

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// bigIndex renders an index of n tensors over three files, each member
// written by member (name, file); tail goes after the weight_map.
func bigIndex(n int, member func(name, file string) string, tail string) []byte {
	var b strings.Builder
	b.WriteString("{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		name := fmt.Sprintf("language_model.model.layers.%d.block_sparse_moe.experts.%d.w1.weight_packed", i/5000, i%5000)
		b.WriteString(member(name, fmt.Sprintf("model-%05d-of-000003.safetensors", i/5000%3+1)))
	}
	b.WriteString("\n  }" + tail + "\n}")
	return []byte(b.String())
}

// parseSequential parses b on one CPU: the weight_map in one piece.
func parseSequential(t *testing.T, b []byte) (*indexData, error) {
	t.Helper()
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	return parseIndexData(b, "x", false)
}

// A large weight_map parsed in pieces gives what the sequential parse
// gives (entries in order, files, errors), and the entries encoding/json
// reads: for the released form (a member per line), for members broken
// over lines (pieces may start inside a member), for one long line (no
// piece boundary), and with errors in the last piece.
func TestWeightMapParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one CPU: the weight_map is never split")
	}
	const n = 80_000 // 9.2 to 10.1 MB: above minParallelWeightMap (8 MiB), from which the map is split
	cases := map[string][]byte{
		"released": bigIndex(n, func(k, f string) string { return fmt.Sprintf("\n    %q: %q", k, f) }, ""),
		"broken":   bigIndex(n, func(k, f string) string { return fmt.Sprintf("\n%q\n:\n%q\n", k, f) }, `, "x": [1, {"y": null}]`),
		"one line": bigIndex(n, func(k, f string) string { return fmt.Sprintf("%q:%q", k, f) }, ""),
		"escaped":  bigIndex(n, func(k, f string) string { return fmt.Sprintf("\n    %q: \"\\u006d%s\"", k, f[1:]) }, ""),
	}
	bad := cases["released"] // damaged below into new slices only
	i := len(bad) - 200
	cases["bad escape late"] = slices.Concat(bad[:i], []byte(`\x`), bad[i+2:])
	j := len(bad) - 300
	cases["bad file late"] = []byte(strings.Replace(string(bad[:j]), "model-00002", "../odel-00002", 1) + string(bad[j:]))
	k := strings.LastIndex(string(bad), `"model-00002`)
	cases["absolute file late"] = slices.Concat(bad[:k+1], []byte("/"), bad[k+2:])
	split := map[string]bool{"released": true, "escaped": true, "one line": false} // "broken" may go either way
	for name, b := range cases {
		if want, ok := split[name]; ok {
			p := parser{b: b, i: strings.Index(string(b), `"weight_map": {`) + len(`"weight_map": {`)}
			p.ws()
			w := weightMap{fileIDs: map[string]uint32{}}
			if got := w.parallel(&p, func(f string, a ...any) error { return fmt.Errorf(f, a...) }); got != want {
				t.Errorf("%s: parsed in pieces: %v, want %v", name, got, want)
			}
		}
		if len(b) < minParallelWeightMap {
			t.Fatalf("%s: %d bytes, too small to be split", name, len(b))
		}
		got, gerr := parseIndexData(b, "x", false)
		want, werr := parseSequential(t, b)
		if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("%s: in pieces: %v, in order: %v", name, gerr, werr)
		}
		if werr != nil {
			continue
		}
		if !slices.Equal(got.files, want.files) || !slices.Equal(got.entries, want.entries) {
			t.Fatalf("%s: in pieces %d entries %v, in order %d %v", name, len(got.entries), got.files, len(want.entries), want.files)
		}
		var ref struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatalf("%s: encoding/json: %v", name, err)
		}
		if len(ref.WeightMap) != len(got.entries) {
			t.Fatalf("%s: %d entries, encoding/json %d", name, len(got.entries), len(ref.WeightMap))
		}
		for _, e := range got.entries {
			if ref.WeightMap[e.name] != got.files[e.file] {
				t.Fatalf("%s: %s in %s, encoding/json %s", name, e.name, got.files[e.file], ref.WeightMap[e.name])
			}
		}
	}
}
