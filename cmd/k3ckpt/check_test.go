package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/k3ckpt/k3ckpt/internal/testckpt"
)

// converted is the small replica (smallReplica: every tensor kind, 16
// layers) converted with args, made once per test binary: check reads the
// tensor kinds, not how many layers hold them. The command's stderr is
// beside it (convertedStderr).
func converted(t *testing.T, name string, args ...string) string {
	t.Helper()
	src := smallReplica(t)
	return testckpt.Dir(t, "check-"+name, func(dir string) error {
		out := filepath.Join(dir, "out")
		_, e, code := k3(append([]string{"convert", src, out, "-q"}, args...)...)
		if code != 0 {
			return fmt.Errorf("convert %v: %s", args, e)
		}
		return os.WriteFile(filepath.Join(dir, "stderr"), []byte(e), 0o644)
	}) + "/out"
}

// convertedStderr is what the convert that made converted(t, name) printed
// on stderr.
func convertedStderr(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(converted(t, name)), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheckVerdicts runs check over the release and every convert output:
// the exit status follows the --engine asked for.
func TestCheckVerdicts(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (end to end): runs without -short")
	}
	t.Parallel()
	rel := headerOnlyReplica(t)
	def := converted(t, "default")
	nv := converted(t, "nvfp4", "--recipe", "modelopt-k3", "--experts", "nvfp4", "--numerics", "modelopt")
	ds := converted(t, "deepseek", "--format", "deepseek")
	ct := converted(t, "ct", "--format", "compressed-tensors")
	for _, c := range []struct {
		dir  string
		args []string
		code int
		want string
	}{
		{rel, nil, 0, "convention release"},
		{rel, []string{"--engine", "tokenspeed", "--gpu", "sm100"}, 0, "resident"},
		{rel, []string{"--engine", "vllm", "--gpu", "sm90"}, 2, "not read"},
		{def, []string{"--engine", "sglang"}, 1, "refused"},
		{def, []string{"--engine", "tokenspeed", "--gpu", "sm100"}, 1, "FP8-resident merged KDA projection cannot load"},
		{def, []string{"--engine", "trtllm", "--gpu", "sm100"}, 0, "dequantized"},
		{nv, []string{"--engine", "SGLang", "--gpu", "sm100"}, 0, "resident"},
		{nv, []string{"--engine", "SGLang", "--gpu", "sm90"}, 1, "Blackwell-only"},
		{nv, []string{"--engine", "tokenspeed", "--gpu", "sm90"}, 1, "Minimum capability: 100"},
		{ds, []string{"--engine", "TensorRT-LLM", "--gpu", "sm100"}, 1, "has no X.weight_scale"},
		{ct, []string{"--engine", "sglang", "--gpu", "sm100"}, 2, "not read"},
	} {
		o, e, code := k3(append([]string{"check", c.dir}, c.args...)...)
		if code != c.code || !strings.Contains(o+e, c.want) {
			t.Errorf("check %s %v: exit %d (want %d), %q not in:\n%s%s", filepath.Base(filepath.Dir(c.dir)), c.args, code, c.code, c.want, o, e)
		}
	}
	o, _, code := k3("check", def, "--json", "--gpu", "sm100")
	m := decodeSchema(t, "check --json", o)
	vs, _ := m["verdicts"].([]any)
	if code != 0 || len(vs) != 4 {
		t.Errorf("check --json --gpu sm100: exit %d, %d verdicts", code, len(vs))
	}
	for _, bad := range [][]string{{"--engine", "nosuch"}, {"--gpu", "sm80"}} {
		if _, e, code := k3(append([]string{"check", rel}, bad...)...); code != 1 || !strings.Contains(e, bad[1]) {
			t.Errorf("check %v: exit %d, %s", bad, code, e)
		}
	}
}

// TestCheckHandEdited: a config whose quantization no rule knows gets
// "unknown", not a guess; the verdicts still come from the headers.
func TestCheckHandEdited(t *testing.T) {
	t.Parallel()
	dir := testckpt.Copy(t, converted(t, "default"))
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["quantization_config"].(map[string]any)["quant_method"] = "awq"
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "hf_quant_config.json"))
	o, e, code := k3("check", dir, "--engine", "tokenspeed", "--gpu", "sm100")
	if code != 2 || !strings.Contains(o, "convention other") || !strings.Contains(o, "not read") {
		t.Errorf("hand-edited config: exit %d\n%s%s", code, o, e)
	}
}

// writeFile writes a safetensors file of tensors whose data are zeros.
func writeFile(t *testing.T, path string, header string, data int) {
	t.Helper()
	for len(header)%8 != 0 {
		header += " "
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(append(b, header...), make([]byte, data)...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckMissingScale: an FP8 weight without its scale makes check fail
// for every engine, naming the tensor, and TensorRT-LLM's rule refuses it.
func TestCheckMissingScale(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "model.safetensors"),
		`{"model.layers.0.self_attn.q_proj.weight":{"dtype":"F8_E4M3","shape":[128,128],"data_offsets":[0,16384]}}`, 16384)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o, e, code := k3("check", dir)
	if code != 1 || !strings.Contains(e, "model.layers.0.self_attn.q_proj.weight is F8_E4M3 but the checkpoint has no") ||
		!strings.Contains(o, "refusing to load it as if it were unquantized") {
		t.Errorf("missing scale: exit %d\n%s%s", code, o, e)
	}
}

// TestConvertEngineWarnings: a plain convert (not only --dry-run) warns
// once per engine that fails on its output, and --json carries the same.
// The plain convert is converted(t, "default"), shared with the check tests.
func TestConvertEngineWarnings(t *testing.T) {
	t.Parallel()
	src := smallReplica(t) // the verdicts follow the tensor kinds, not the layer count
	e := convertedStderr(t, "default")
	for _, eng := range []string{"SGLang", "vLLM", "tokenspeed"} {
		if strings.Count(e, "warning: "+eng+" (") != 1 {
			t.Errorf("convert: want one warning for %s in:\n%s", eng, e)
		}
	}
	if strings.Contains(e, "warning: TensorRT-LLM") {
		t.Errorf("convert warns for TensorRT-LLM, which loads it:\n%s", e)
	}
	o, _, code := k3("convert", src, filepath.Join(t.TempDir(), "j"), "--json")
	m := decodeSchema(t, "convert --json", o)
	lines, _ := m["engines"].([]any)
	if code != 0 || len(lines) != 8 {
		t.Errorf("convert --json: exit %d, %d engine lines", code, len(lines))
	}
}

// TestConvertTarget: --target picks per engine and GPU, an explicit flag
// that contradicts it is an error, --force writes it anyway. Under -short
// on the 16-layer replica.
func TestConvertTarget(t *testing.T) {
	t.Parallel()
	src := shortReplica(t)
	dst := func() string { return filepath.Join(t.TempDir(), "o") }
	o, e, code := k3("convert", src, dst(), "--target", "sglang/sm100", "--dry-run", "--json")
	m := decodeSchema(t, "--target sglang/sm100", o)
	if code != 0 || m["recipe"] != "modelopt-k3" || m["experts"] != "nvfp4" || m["numerics"] != "modelopt" || m["format"] != "modelopt" {
		t.Errorf("--target sglang/sm100: exit %d %v %v %v %v: %s", code, m["recipe"], m["experts"], m["numerics"], m["format"], e)
	}
	_, e, code = k3("convert", src, dst(), "--target", "TensorRT-LLM/sm100", "--dry-run")
	if code != 0 || !strings.Contains(e, "--recipe attn-moe-dense-fp8 --experts keep") || !strings.Contains(e, "saves disk, not GPU memory") {
		t.Errorf("--target TensorRT-LLM/sm100: exit %d\n%s", code, e)
	}
	_, e, code = k3("convert", src, dst(), "--target", "sglang/sm90", "--dry-run")
	if code != 1 || !strings.Contains(e, "nothing to convert") {
		t.Errorf("--target sglang/sm90: exit %d\n%s", code, e)
	}
	_, e, code = k3("convert", src, dst(), "--target", "tokenspeed/sm100", "--recipe", "attn-moe-dense-fp8", "--dry-run")
	if code != 1 || !strings.Contains(e, "contradicts") || !strings.Contains(e, "FP8-resident merged KDA projection") {
		t.Errorf("--target tokenspeed/sm100 --recipe attn-moe-dense-fp8: exit %d\n%s", code, e)
	}
	_, e, code = k3("convert", src, dst(), "--target", "tokenspeed/sm100", "--recipe", "attn-moe-dense-fp8", "--force", "--dry-run")
	if code != 0 || !strings.Contains(e, "--force") {
		t.Errorf("--force: exit %d\n%s", code, e)
	}
	_, e, code = k3("convert", src, dst(), "--target", "nosuch", "--dry-run")
	if code != 1 || !strings.Contains(e, "nosuch") {
		t.Errorf("--target nosuch: exit %d\n%s", code, e)
	}
}

// countingHandler serves a directory and counts the body bytes it sends.
type countingHandler struct {
	h    http.Handler
	sent atomic.Int64
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(b []byte) (int, error) {
	w.n.Add(int64(len(b)))
	return w.ResponseWriter.Write(b)
}

func (c *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.h.ServeHTTP(countingWriter{w, &c.sent}, r)
}

// TestCheckRemote: check over https:// gives the local verdicts and
// fetches headers and configs only.
func TestCheckRemote(t *testing.T) {
	t.Parallel()
	dir := converted(t, "default")
	h := &countingHandler{h: http.FileServer(http.Dir(dir))}
	srv := httptest.NewServer(h)
	defer srv.Close()
	remote, _, code := k3("check", srv.URL+"/", "--json")
	local, _, code2 := k3("check", dir, "--json")
	if code != 0 || code2 != 0 {
		t.Fatalf("exit %d / %d", code, code2)
	}
	rv, lv := decodeSchema(t, "remote", remote)["verdicts"], decodeSchema(t, "local", local)["verdicts"]
	if fmt.Sprint(rv) != fmt.Sprint(lv) {
		t.Errorf("remote verdicts differ from local")
	}
	var headers, total int64
	shards, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, s := range shards {
		f, err := os.Open(s)
		if err != nil {
			t.Fatal(err)
		}
		var n [8]byte
		if _, err := f.Read(n[:]); err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		f.Close()
		headers += 8 + int64(binary.LittleEndian.Uint64(n[:]))
		total += st.Size()
	}
	for _, aux := range []string{"config.json", "hf_quant_config.json", "model.safetensors.index.json"} {
		st, err := os.Stat(filepath.Join(dir, aux))
		if err != nil {
			t.Fatal(err)
		}
		headers += st.Size()
	}
	if sent := h.sent.Load(); sent > headers+headers/20 || sent > total/4 {
		t.Errorf("check fetched %d bytes; the headers, index and configs are %d of %d", sent, headers, total)
	}
}
