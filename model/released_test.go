package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// releasedSHA256 is the hash public audits pin for the released config.json.
const releasedSHA256 = "9710e121a58d03ac92c8d6da287a19541994319afbbe6d6202af001ffd379213"

// readReleased reads the released config.json from testdata and checks it
// is the released file.
func readReleased(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/k3/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != releasedSHA256 || len(b) != 7006 {
		t.Fatalf("testdata/k3/config.json is not the released file (%d bytes, sha256 %x)", len(b), sum)
	}
	return b
}

func decodeJSON(t testing.TB, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The full scale is the released file, and the writer reproduces it: from
// the parsed file, and from the derivation with the full dimensions (so the
// derivation changes nothing but dimensions).
func TestReleasedConfigBytes(t *testing.T) {
	t.Parallel()
	want := readReleased(t)
	full, err := scaledConfigJSON(ScaleFull)
	if err != nil || !bytes.Equal(full, want) {
		t.Fatalf("scaledConfigJSON(full) differs from the released file (%v)", err)
	}
	again, err := MarshalConfig(decodeJSON(t, want))
	if err != nil || !bytes.Equal(again, want) {
		t.Fatalf("re-rendering the released file: %v\n%s", err, firstDiff(again, want))
	}
	derived, err := MarshalConfig(scaledRaw(releasedDims))
	if err != nil || !bytes.Equal(derived, want) {
		t.Fatalf("deriving the full scale: %v\n%s", err, firstDiff(derived, want))
	}
}

func firstDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-40)
	return fmt.Sprintf("at byte %d: %q vs %q", i, a[lo:min(len(a), i+40)], b[lo:min(len(b), i+40)])
}

// What the schema reads from the released file, checked against its
// published facts.
func TestReleasedConfigFacts(t *testing.T) {
	t.Parallel()
	raw := decodeJSON(t, readReleased(t))
	if _, ok := raw["quantization_config"]; ok {
		t.Fatal("the released file has no top-level quantization_config")
	}
	if at(raw, "text_config")["hidden_act"] != "situ" {
		t.Fatal("hidden_act is situ in the release")
	}
	c, err := ParseConfig(readReleased(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.Experts != ExpertsMXFP4 || c.GroupSize != 32 || c.Converted != "" || !c.Multimodal {
		t.Errorf("experts %v group %d converted %q multimodal %v", c.Experts, c.GroupSize, c.Converted, c.Multimodal)
	}
	vis := func(k string) int64 { return c.values["vision_config."+k] }
	if in, err := c.env("VIN"); !c.Vision || vis("vt_hidden_size") != 1024 || vis("qkv_hidden_size") != 1536 ||
		vis("vt_num_attention_heads") != 12 || in != 4096 || err != nil || vis("num_channels") != 3 ||
		vis("vt_num_hidden_layers") != 27 || vis("merge_kernel_size[0]") != 2 || vis("merge_kernel_size[1]") != 2 {
		t.Errorf("vision %v, projector input %d (%v)", c.Vision, in, err)
	}
	if c.QuantizationPath != "text_config.quantization_config" || c.quantizationConfig()["format"] != "mxfp4-pack-quantized" {
		t.Errorf("quantization_config read at %q", c.QuantizationPath)
	}
	// The schedule constants behind the package-level classifier are the release's.
	full, kda := k3FullAttnLayers()
	lin := at(raw, "text_config", "linear_attn_config")
	ints := func(key string) []int {
		var out []int
		for _, x := range lin[key].([]any) {
			n, _ := x.(json.Number).Int64()
			out = append(out, int(n))
		}
		return out
	}
	if !slices.Equal(full, ints("full_attn_layers")) || !slices.Equal(kda, ints("kda_layers")) {
		t.Error("k3FullAttnLayers differs from the released schedule")
	}
	if !slices.Equal(c.FullAttnLayers, full) {
		t.Error("parsed schedule differs")
	}
}

// dimensionKeys are the only keys a derived scale may change.
var dimensionKeys = map[string]bool{
	"text_config.hidden_size": true, "text_config.vocab_size": true, "text_config.intermediate_size": true,
	"text_config.num_attention_heads": true, "text_config.num_key_value_heads": true,
	"text_config.q_lora_rank": true, "text_config.kv_lora_rank": true, "text_config.qk_nope_head_dim": true,
	"text_config.qk_rope_head_dim": true, "text_config.v_head_dim": true, "text_config.num_experts": true,
	"text_config.num_experts_per_token": true, "text_config.num_shared_experts": true,
	"text_config.moe_intermediate_size": true, "text_config.routed_expert_hidden_size": true,
	"text_config.linear_attn_config.head_dim": true, "text_config.linear_attn_config.num_heads": true,
	"vision_config.vt_hidden_size": true, "vision_config.vt_num_hidden_layers": true,
	"vision_config.vt_intermediate_size": true, "vision_config.vt_num_attention_heads": true,
	"vision_config.qkv_hidden_size": true, "vision_config.mm_hidden_size": true,
	"vision_config.init_pos_emb_height": true, "vision_config.init_pos_emb_width": true,
	"vision_config.text_hidden_size": true,
}

// diffPaths lists the dotted paths where a and b differ (a key present in
// one only counts as a difference).
func diffPaths(prefix string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		for k := range am {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			if _, ok := bm[k]; !ok {
				*out = append(*out, p+" (missing)")
				continue
			}
			diffPaths(p, am[k], bm[k], out)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				*out = append(*out, strings.TrimPrefix(prefix+"."+k, ".")+" (added)")
			}
		}
		return
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		*out = append(*out, prefix)
	}
}

// Small and tiny are the released file with dimensions changed: same keys,
// same other values, same serialization.
func TestScaledConfigsDerived(t *testing.T) {
	t.Parallel()
	released := decodeJSON(t, readReleased(t))
	for _, sc := range []Scale{ScaleSmall, ScaleTiny} {
		b, err := scaledConfigJSON(sc)
		if err != nil {
			t.Fatal(err)
		}
		var diffs []string
		diffPaths("", released, decodeJSON(t, b), &diffs)
		for _, d := range diffs {
			if !dimensionKeys[d] {
				t.Errorf("%s: %s differs from the release and is no dimension", sc, d)
			}
		}
		if len(diffs) < 20 {
			t.Errorf("%s: only %d dimensions changed: %v", sc, len(diffs), diffs)
		}
		for _, lit := range []string{`"rms_norm_eps": 1e-05`, `"activation_situ_beta": 4.0`, `"<|kimi_image_placeholder|>"`,
			`"re:.*mlp\\.(gate|up|gate_up|down)_proj.*"`, `"observer_kwargs": {},`} {
			if !bytes.Contains(b, []byte(lit)) {
				t.Errorf("%s: %s not written as in the release", sc, lit)
			}
		}
		if b[len(b)-1] != '}' || bytes.Count(b, []byte("\n")) != bytes.Count(readReleased(t), []byte("\n")) {
			t.Errorf("%s: not laid out line for line as the release", sc)
		}
		c, err := ParseConfig(b)
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		if again, _ := MarshalConfig(c.Raw()); !bytes.Equal(again, b) {
			t.Errorf("%s: does not re-render to its own bytes", sc)
		}
	}
}

// Expected strings are what Python 3 prints for
// json.dumps(v, indent=2, sort_keys=True).
func TestMarshalConfigLikePython(t *testing.T) {
	t.Parallel()
	v := map[string]any{
		"k": true, "b": map[string]any{}, "a": []any{}, "c": "é<|x|>\u2028\x7f\"\\\n😀",
		"d": 1.0, "e": 1e-05, "f": 1e16, "g": 1e15, "h": 0.0001, "l": 1.5e-07, "m": 123456789.123, "n": -0.5,
		"i": []any{1, map[string]any{"j": nil}}, "o": json.Number("4.0"), "p": int64(-3),
	}
	want := `{
  "a": [],
  "b": {},
  "c": "\u00e9<|x|>\u2028\u007f\"\\\n\ud83d\ude00",
  "d": 1.0,
  "e": 1e-05,
  "f": 1e+16,
  "g": 1000000000000000.0,
  "h": 0.0001,
  "i": [
    1,
    {
      "j": null
    }
  ],
  "k": true,
  "l": 1.5e-07,
  "m": 123456789.123,
  "n": -0.5,
  "o": 4.0,
  "p": -3
}`
	got, err := MarshalConfig(v)
	if err != nil || string(got) != want {
		t.Fatalf("got %v\n%s\nwant\n%s", err, got, want)
	}
	for _, bad := range []any{map[string]any{"x": json.Number("0x10")}, []any{struct{}{}}, map[string]any{"x": json.Number("")}} {
		if _, err := MarshalConfig(bad); err == nil {
			t.Errorf("MarshalConfig(%v) accepted", bad)
		}
	}
}

// FuzzParseConfig: no input panics or hangs the parser, and an accepted
// config re-renders to a config that parses to the same model.
func FuzzParseConfig(f *testing.F) {
	f.Add(readReleased(f))
	for _, sc := range []Scale{ScaleSmall, ScaleTiny} {
		b, err := scaledConfigJSON(sc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	text, err := json.Marshal(decodeJSON(f, readReleased(f))["text_config"])
	if err != nil {
		f.Fatal(err)
	}
	f.Add(text)
	f.Add([]byte(`{"model_type": "kimi_linear"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		b, err := MarshalConfig(c.Raw())
		if err != nil {
			t.Fatalf("accepted config does not render: %v", err)
		}
		c2, err := ParseConfig(b)
		if err != nil {
			t.Fatalf("re-rendered config rejected: %v", err)
		}
		if c2.NumTensors() != c.NumTensors() || c2.NumShards() != c.NumShards() || c2.Experts != c.Experts {
			t.Fatal("re-rendered config describes another model")
		}
	})
}
