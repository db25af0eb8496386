package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/testckpt"
	"github.com/k3ckpt/k3ckpt/model"
)

// k3 runs one command line through the root, as main does.
func k3(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return o.String(), e.String(), code
}

// The test binary runs as k3ckpt itself when asked to (before TestMain):
// a child process that a test can signal, or that runs itself as the demo
// does.
func init() {
	if os.Getenv("K3CKPT_TEST_AS_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
}

func TestMain(m *testing.M) { testckpt.Main(m) }

// headerOnlyReplica is the tiny header-only replica, synthesized once per
// test binary and shared: tests only read it (testckpt.Copy for one to damage).
func headerOnlyReplica(t *testing.T) string {
	t.Helper()
	return testckpt.Replica(t, model.ScaleTiny)
}

// smallReplica is the tiny replica cut to 16 layers (every tensor kind, 19
// shards; testckpt.LayersConfigJSON), header-only, synthesized once per test
// binary and shared: for tests whose subject is not the layer count. At 16
// layers --even is the default partition.
func smallReplica(t *testing.T) string {
	t.Helper()
	cfg := testckpt.LayersConfigJSON(t, model.ScaleTiny, 16)
	return testckpt.Dir(t, "replica-tiny-16", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: cfg, HeaderOnly: true})
	})
}

// shortReplica is smallReplica under -short and headerOnlyReplica (the
// release's 96 shards) otherwise: for tests whose subject is not the layer
// count, so that -short leaves out only the release's shard count.
func shortReplica(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		return smallReplica(t)
	}
	return headerOnlyReplica(t)
}

// fourLayerReplica is the tiny replica cut to 4 layers with its data (seed
// 1): every kind of tensor a recipe casts, in 7 shards instead of 96.
// Synthesized once per test binary and shared: tests only read it.
func fourLayerReplica(t *testing.T) string {
	t.Helper()
	cfg := testckpt.LayersConfigJSON(t, model.ScaleTiny, 4)
	return testckpt.Dir(t, "replica-tiny-4-data", func(dir string) error {
		return model.Synth(dir, model.SynthOptions{Config: cfg, Seed: 1})
	})
}

// decodeSchema checks that out is exactly one JSON object whose first field
// is "schema": 1.
func decodeSchema(t *testing.T, what, out string) map[string]any {
	t.Helper()
	if !strings.HasPrefix(out, "{\n  \"schema\": 1,") {
		t.Errorf("%s: output does not start with the schema field: %.80q", what, out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v in %.200q", what, err, out)
	}
	if dec.More() {
		t.Errorf("%s: more than one JSON value on stdout", what)
	}
	return m
}

func TestJSONEverywhere(t *testing.T) {
	t.Parallel()
	dir := smallReplica(t) // the JSON's shape does not depend on the layer count
	out := t.TempDir()
	for _, args := range [][]string{
		{"version", "--json"},
		{"synth", filepath.Join(out, "s"), "--dry-run", "--json"},
		{"inspect", dir, "--json"},
		{"convert", dir, filepath.Join(out, "c"), "--dry-run", "--json"},
		{"export", dir, filepath.Join(out, "e"), "--layout", "dp16", "--dry-run", "--json"},
		{"shard", dir, filepath.Join(out, "p"), "--dry-run", "--json"},
	} {
		o, e, code := k3(args...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, e)
			continue
		}
		m := decodeSchema(t, strings.Join(args, " "), o)
		if args[len(args)-2] == "--dry-run" && args[0] != "convert" && m["dry_run"] != true {
			t.Errorf("%v: dry_run not true", args)
		}
	}
	o, _, _ := k3("inspect", dir, "--tensors", "--json")
	if !strings.HasPrefix(o, `{"schema": 1, "tensors": [`) {
		t.Errorf("--tensors --json: %.60q", o)
	}
	// A dry run writes nothing.
	if ents, _ := filepath.Glob(filepath.Join(out, "*")); len(ents) != 0 {
		t.Errorf("dry runs wrote %v", ents)
	}
}

// TestExportDryRunPlan: export --dry-run --ranks plans those ranks only and
// refuses a rank outside the layout. Under -short on the 16-layer replica.
func TestExportDryRunPlan(t *testing.T) {
	t.Parallel()
	dir := shortReplica(t)
	o, e, code := k3("export", dir, "/nonexistent/out", "--layout", "dp16", "--ranks", "0,9", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	for _, want := range []string{"rank-00", "rank-09", "total: 2 files"} {
		if !strings.Contains(o, want) {
			t.Errorf("dry run lacks %q:\n%s", want, o)
		}
	}
	if _, e, code := k3("export", dir, "/nonexistent/out", "--layout", "dp16", "--ranks", "16", "--dry-run"); code == 0 || !strings.Contains(e, "rank 16 not in [0, 16)") {
		t.Errorf("rank 16 of dp16: exit %d, %s", code, e)
	}
}

// TestIgnoredFlagsAreErrors: each flag that used to be dropped silently is
// refused with a message in the user's terms. Under -short on the 16-layer
// replica: each refusal comes before the partition is summed.
func TestIgnoredFlagsAreErrors(t *testing.T) {
	t.Parallel()
	dir := shortReplica(t)
	out := filepath.Join(t.TempDir(), "o")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", dir, "--format", "modelopt"}, "add --recipe"},
		{[]string{"inspect", dir, "--tensors", "--by", "dtype"}, "does not combine with --by"},
		{[]string{"inspect", dir, "--tensors", "--layout", "dp16"}, "does not combine with --layout"},
		{[]string{"inspect", dir, "--by", "rank"}, "--by rank needs a layout"},
		{[]string{"inspect", dir, "--layout", "dp16", "--pp-partition", strings.Repeat("6,", 15) + "3"}, "has no pipeline stages"},
		{[]string{"inspect", dir, "--pp-partition", "7,5"}, "add --layout"},
		{[]string{"inspect", dir, "--gpu-mem", "141GiB"}, "add --chart"},
		{[]string{"inspect", dir, "--chart", filepath.Join(out, "x.gif")}, "must end in .svg"},
		{[]string{"inspect", dir, "--chart", "/nonexistent/dir/x.svg"}, "does not exist"},
		{[]string{"inspect", dir, "--chart", filepath.Join(t.TempDir(), "x.svg"), "--gpu-mem", "lots"}, "needs a unit"},
		{[]string{"export", dir, out, "--layout", "dp2-dcp8", "--weight-shard"}, "--weight-shard has no effect on layout dp2-dcp8"},
		{[]string{"export", dir, out, "--layout", "dp16", "--pp-partition", "93"}, "has no pipeline stages"},
		{[]string{"shard", dir, out, "--even", "--pp-partition", strings.Repeat("6,", 15) + "3"}, "give one"},
		{[]string{"synth", out, "--jobs", "-1"}, "--jobs -1"},
		{[]string{"synth", out, "--scale", "tiny", "--config", "x.json"}, "none of the others"},
		{[]string{"convert", dir, out, "-q", "-v"}, "none of the others"},
		{[]string{"convert", dir, out, "--nonfinite", "nan"}, `--nonfinite: unknown non-finite policy "nan" (known: error, zero)`},
		{[]string{"convert", dir, out, "--format", "gguf"}, `--format: unknown convention "gguf"`},
	} {
		_, e, code := k3(c.args...)
		if code == 0 || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error containing %q", c.args, code, e, c.want)
		}
	}
}

func TestVersion(t *testing.T) {
	o, _, code := k3("version")
	o2, _, code2 := k3("--version")
	if code != 0 || code2 != 0 || !strings.HasPrefix(o, "k3ckpt ") || o != o2 {
		t.Errorf("version %q (exit %d), --version %q (exit %d): want the same line", o, code, o2, code2)
	}
	v := readVersion()
	if v.Go == "" || v.Platform == "" || !strings.Contains(o, v.Platform) {
		t.Errorf("version %+v, line %q", v, o)
	}
}

// Errors quoting names from files are printed with control characters escaped.
func TestErrorsEscaped(t *testing.T) {
	_, e, code := k3("inspect", "/nonexistent/\x1b[31mred")
	if code == 0 || strings.Contains(e, "\x1b") || !strings.Contains(e, `\x1b[31mred`) {
		t.Errorf("exit %d, stderr %q", code, e)
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"141GiB": 141 << 30, "80GB": 80e9, "1.5TiB": 3 << 39, "512 MiB": 512 << 20, "4096b": 4096} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "141", "GiB", "-1GiB", "NaNGiB", "1e30TiB", "infGB"} {
		if _, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q): no error", s)
		}
	}
}

// A converted checkpoint given as SRC is named as such, not reported as a
// dtype disagreement. Under -short on the 16-layer replica.
func TestConvertRefusesConverted(t *testing.T) {
	t.Parallel()
	dir := testckpt.Copy(t, shortReplica(t))
	if err := os.WriteFile(filepath.Join(dir, convert.ManifestName), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, e, code := k3("convert", dir, filepath.Join(t.TempDir(), "o"))
	if code == 0 || !strings.Contains(e, "is already a k3ckpt conversion") {
		t.Errorf("exit %d, %s", code, e)
	}
}
