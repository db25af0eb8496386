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
		b.WriteString(member(name, fmt.Sprintf("model-%05d-of-000003.safetensors", i/500%3+1)))
	}
	b.WriteString("\n  }" + tail + "\n}")
	return []byte(b.String())
}

// A large weight_map parses to the entries encoding/json reads: in the
// released form (a member per line), with members broken over lines, on
// one long line and with escapes; damage late in it is an error.
func TestBigWeightMap(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	checkWeightMaps(t, 80_000) // about 10 MB
}

// The same with the pieces' threshold lowered, so that -short (and the race
// detector in CI) parses a map in pieces.
func TestWeightMapPieces(t *testing.T) {
	defer func(n int) { minParallelWeightMap = n }(minParallelWeightMap)
	minParallelWeightMap = 64 << 10
	checkWeightMaps(t, 2_000)
}

// checkWeightMaps parses indexes of n tensors in several forms, in pieces
// and in order, against each other and encoding/json.
func checkWeightMaps(t *testing.T, n int) {
	t.Helper()
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
		if len(b) < minParallelWeightMap {
			t.Fatalf("%s: %d bytes, too small to be split", name, len(b))
		}
		// The map parsed in pieces and in order: the same entries, and p
		// past the same '}'.
		at := strings.Index(string(b), `"weight_map": {`) + len(`"weight_map": `)
		seq, par := newParser(b), newParser(b)
		seq.i, par.i = at, at
		ws, wp := weightMap{ids: map[string]uint32{}}, weightMap{ids: map[string]uint32{}}
		serr := seq.members('{', func(k string) error { return ws.entry(&seq, k) })
		took := wp.parallel(&par)
		if want, ok := split[name]; ok && runtime.GOMAXPROCS(0) > 1 && took != want {
			t.Errorf("%s: parsed in pieces: %v, want %v", name, took, want)
		}
		if took && (serr != nil || par.i != seq.i || len(wp.entries) != len(ws.entries)) {
			t.Fatalf("%s: in pieces %d entries to byte %d, in order %d to byte %d (%v)", name, len(wp.entries), par.i, len(ws.entries), seq.i, serr)
		}
		for i, e := range wp.entries {
			if f, g := wp.provisional[e.file], ws.provisional[ws.entries[i].file]; e.name != ws.entries[i].name || f != g {
				t.Fatalf("%s: entry %d in pieces %s in %s, in order %s in %s", name, i, e.name, f, ws.entries[i].name, g)
			}
		}
		got, err := parseIndexData(b, "x")
		if strings.Contains(name, "late") {
			if err == nil || serr == nil || !strings.Contains(err.Error(), serr.Error()) {
				t.Errorf("%s: %v, want the error in order: %v", name, err, serr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
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
