package model

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// tinyGoldens holds the sha256 of every file of the tiny replica with seed 0.
// They were produced by this package's own generator (regenerate with
// K3CKPT_UPDATE_GOLDENS=1 after an intended change), so they prove
// determinism across machines and changes, not correctness; correctness of
// the byte layout is proven against Python safetensors in the codec's tests,
// and of the values by the statistical checks below.
const tinyGoldens = "testdata/synth_tiny_seed0.sha256"

var (
	tinyOnce sync.Once
	tinyDir  string
	tinyJSON []byte // the replica's config.json
	tinyErr  error
)

// tinyReplica writes the tiny replica once per test binary. Under -short it
// is the tiny config cut to 8 layers (fewLayersConfig): its 11 shards hold
// byte for byte what shards 1–8 and 94–96 of the tiny replica hold, every
// kind of tensor, at a twelfth of the cost; the full run writes all 96.
func tinyReplica(t *testing.T) string {
	t.Helper()
	tinyOnce.Do(func() {
		if testing.Short() {
			tinyJSON = fewLayersConfig(t, 8)
		} else if tinyJSON, tinyErr = scaledConfigJSON(ScaleTiny); tinyErr != nil {
			return
		}
		d, err := os.MkdirTemp("", "k3tiny-")
		if err != nil {
			tinyErr = err
			return
		}
		tinyDir = filepath.Join(d, "tiny")
		tinyErr = Synth(tinyDir, SynthOptions{Config: tinyJSON})
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDir
}

// tinyGoldenName is the tiny replica's name for a shard of the replica
// tinyReplica wrote, "" for its index and config.json, which name their own
// shard count.
func tinyGoldenName(name string) string {
	if !testing.Short() {
		return name
	}
	var i, n int
	if _, err := fmt.Sscanf(name, "model-%05d-of-%06d.safetensors", &i, &n); err != nil || n != 11 {
		return ""
	}
	if i > 8 {
		i += 96 - 11
	}
	return fmt.Sprintf("model-%05d-of-000096.safetensors", i)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tinyDir != "" {
		os.RemoveAll(filepath.Dir(tinyDir))
	}
	os.Exit(code)
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func dirHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		out[e.Name()] = sha256File(t, filepath.Join(dir, e.Name()))
	}
	return out
}

func TestSynthTinyGoldens(t *testing.T) {
	t.Parallel()
	dir := tinyReplica(t)
	got := dirHashes(t, dir)
	if os.Getenv("K3CKPT_UPDATE_GOLDENS") == "1" {
		if testing.Short() {
			t.Fatal("rewriting the goldens needs the full tiny replica: run without -short")
		}
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range got {
				if !yield(n) {
					return
				}
			}
		})
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, "%s  %s\n", got[n], n)
		}
		if err := os.WriteFile(tinyGoldens, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("goldens rewritten")
		return
	}
	f, err := os.Open(tinyGoldens)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("bad golden line %q", sc.Text())
		}
		want[name] = sum
	}
	if len(want) != 98 || want["model-00096-of-000096.safetensors"] == "" {
		t.Fatalf("%d golden files; want 96 shards + index + config", len(want))
	}
	if testing.Short() {
		if len(got) != 13 {
			t.Fatalf("%d files written; want 11 shards + index + config", len(got))
		}
		for name, sum := range got {
			if g := tinyGoldenName(name); g != "" && want[g] != sum {
				t.Errorf("%s: sha256 %s, golden of %s %s", name, sum, g, want[g])
			}
		}
		return
	}
	if len(got) != 98 {
		t.Fatalf("%d files written; want 96 shards + index + config", len(got))
	}
	for name, sum := range want {
		if got[name] != sum {
			t.Errorf("%s: sha256 %s, golden %s", name, got[name], sum)
		}
	}
}

// The replica reads back through the codec with exactly the catalog.
func TestSynthTinyMatchesCatalog(t *testing.T) {
	t.Parallel()
	dir := tinyReplica(t)
	cfgJSON, err := os.ReadFile(filepath.Join(dir, ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	if string(cfgJSON) != string(tinyJSON) {
		t.Error("config.json differs from the one synthesized from")
	}
	cfg, err := ParseConfig(cfgJSON)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if len(ck.Files) != cfg.NumShards() || ck.NumTensors() != cfg.NumTensors() {
		t.Fatalf("%d files, %d tensors; want %d, %d", len(ck.Files), ck.NumTensors(), cfg.NumShards(), cfg.NumTensors())
	}
	if ck.Index() == nil || ck.Index().TotalSize != cfg.TotalBytes() {
		t.Fatalf("index total_size %v, want %d", ck.Index(), cfg.TotalBytes())
	}
	var size int64
	for i := range cfg.NumShards() {
		f := ck.Files[i]
		if filepath.Base(f.Path) != cfg.ShardName(i) {
			t.Fatalf("file %d is %s", i, f.Path)
		}
		for _, ts := range cfg.ShardTensors(i) {
			ti, ok := f.Lookup(ts.Name)
			if !ok || ti.DType != ts.DType || !slices.Equal(ti.Shape, ts.Shape) {
				t.Fatalf("%s: %v in %s", ts.Name, ti, f.Path)
			}
		}
		if len(f.Metadata) != 0 {
			t.Errorf("%s has __metadata__", f.Path)
		}
		size += f.Size
	}
	if size > 64<<20 {
		t.Errorf("tiny replica is %d bytes", size)
	}
}

func readTensor(t *testing.T, ck *safetensors.Checkpoint, name string) []byte {
	t.Helper()
	f, ti, ok := ck.Lookup(name)
	if !ok {
		t.Fatalf("%s missing", name)
	}
	b := make([]byte, ti.Size())
	if _, err := f.Section(ti).ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

func moments(v []float64) (mean, std float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	for _, x := range v {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(v)))
}

func bf16s(b []byte) []float64 {
	out := make([]float64, len(b)/2)
	for i := range out {
		out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	}
	return out
}

func f32s(b []byte) []float64 {
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

// e2m1 is the E2M1 code table (bit 3 of a code is the sign), written out
// independently of quant.
var e2m1 = [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// The values have the spreads the generator promises: independent checks by
// decoding the bytes as MXFP4 (two E2M1 codes a byte, one E8M0 scale
// 2^(byte−127) per 32 elements) and the BF16/F32 bit layouts.
func TestSynthTinyValues(t *testing.T) {
	t.Parallel()
	dir := tinyReplica(t)
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg, _ := scaledConfig(ScaleTiny)
	P := "language_model.model."
	checkBF16 := func(name string, mean, std, tol float64) {
		t.Helper()
		m, s := moments(bf16s(readTensor(t, ck, name)))
		if math.Abs(m-mean) > tol || math.Abs(s-std)/std > 0.05 {
			t.Errorf("%s: mean %.4f std %.4f, want %.2f, %.3f", name, m, s, mean, std)
		}
	}
	checkBF16(P+"layers.0.self_attn.q_proj.weight", 0, 0.02, 0.001)
	checkBF16(P+"layers.3.self_attn.kv_a_proj_with_mqa.weight", 0, 0.02, 0.001)
	checkBF16(P+"embed_tokens.weight", 0, 0.02, 0.001)
	checkBF16(P+"layers.5.block_sparse_moe.shared_experts.down_proj.weight", 0, 0.02, 0.001)
	v := bf16s(readTensor(t, ck, P+"layers.0.input_layernorm.weight"))
	if m, _ := moments(v); math.Abs(m-1) > 0.02 {
		t.Errorf("input_layernorm mean %.3f, want ≈ 1", m)
	}
	// Different tensors get different values.
	a := readTensor(t, ck, P+"layers.0.self_attn.q_proj.weight")
	b := readTensor(t, ck, P+"layers.0.self_attn.k_proj.weight")
	if string(a) == string(b) {
		t.Error("q_proj and k_proj are identical")
	}

	alog := f32s(readTensor(t, ck, P+"layers.0.self_attn.A_log"))
	if len(alog) != 128 { // A_log is padded to a multiple of 128 (families/k3.json)
		t.Fatalf("A_log has %d entries", len(alog))
	}
	for i, x := range alog {
		if (int64(i) < cfg.KDAHeads) != (x != 0) {
			t.Errorf("A_log[%d] = %v (KDA heads %d: values, then zero padding)", i, x, cfg.KDAHeads)
		}
	}
	if m, _ := moments(f32s(readTensor(t, ck, P+"layers.0.self_attn.dt_bias"))); math.Abs(m+4) > 0.3 {
		t.Errorf("dt_bias mean %.2f", m)
	}

	// MXFP4 expert: decode the codes (element 2i in the low nibble) and the
	// E8M0 scales (2^(byte−127), 0xFF NaN).
	ex := P + "layers.7.block_sparse_moe.experts.31.w2."
	packed := readTensor(t, ck, ex+"weight_packed")
	scales := readTensor(t, ck, ex+"weight_scale")
	if len(packed)*2 != len(scales)*32 || len(packed)*2 != int(cfg.LatentDim*cfg.MoEIntermediate) {
		t.Fatalf("packed %d bytes, scales %d bytes", len(packed), len(scales))
	}
	vals := make([]float64, 0, len(packed)*2)
	for i, byt := range packed {
		for _, code := range []byte{byt & 0xF, byt >> 4} { // element 2i in the low nibble
			x := e2m1[code&7]
			if code&8 != 0 {
				x = -x
			}
			s := scales[(2*i)/32]
			if s == 0xFF {
				t.Fatalf("NaN scale at %d", i)
			}
			vals = append(vals, x*math.Pow(2, float64(s)-127))
		}
	}
	m, s := moments(vals)
	if math.Abs(m) > 0.002 || math.Abs(s-0.02)/0.02 > 0.15 {
		t.Errorf("decoded expert: mean %.4f std %.4f, want 0, ≈0.02", m, s)
	}
	// OCP scale rule: with scale 2^ceil(log2(amax/6)), amax/scale lies in
	// (3, 6], so every block's largest code is 3, 4 or 6.
	for blk := range len(scales) {
		var mx float64
		for _, byt := range packed[blk*16 : blk*16+16] {
			mx = max(mx, e2m1[byt&7], e2m1[byt>>4&7])
		}
		if mx < 3 {
			t.Fatalf("block %d: largest code %.1f: scale too large", blk, mx)
		}
	}
}

// Same seed, same bytes, whatever the parallelism; another seed, other bytes.
// The replica is the tiny config cut to 8 layers (11 shards, every kind of
// tensor: the dense layer, KDA, MLA, experts, the model-level tensors, the
// projector and the vision tower), so that synthesizing it three times costs
// less than synthesizing the 93-layer tiny replica once; the tiny replica's
// own bytes are pinned by TestSynthTinyGoldens.
func TestSynthDeterministic(t *testing.T) {
	t.Parallel()
	cfg := fewLayersConfig(t, 8)
	synth := func(name string, o SynthOptions) map[string]string {
		t.Helper()
		d := filepath.Join(t.TempDir(), name)
		o.Config = cfg
		if err := Synth(d, o); err != nil {
			t.Fatal(err)
		}
		return dirHashes(t, d)
	}
	var ref map[string]string
	if testing.Short() { // tinyReplica is this config under -short
		ref = dirHashes(t, tinyReplica(t))
	} else {
		ref = synth("ref", SynthOptions{})
	}
	if len(ref) != 8+3+2 {
		t.Fatalf("%d files, want 11 shards, the index and config.json", len(ref))
	}
	if got := synth("w1", SynthOptions{Workers: 1}); !maps.Equal(got, ref) {
		t.Error("one worker wrote different bytes than GOMAXPROCS workers")
	}
	got := synth("s1", SynthOptions{Seed: 1})
	for name, sum := range got {
		if strings.HasSuffix(name, ".safetensors") && ref[name] == sum {
			t.Errorf("%s identical under seeds 0 and 1", name)
		}
	}
}

// fewLayersConfig is the tiny config.json cut to its first n layers, MLA at
// every 4th as in K3 and KDA at the others: testckpt.LayersConfigJSON, which
// package model's own tests cannot import (testckpt imports model).
func fewLayersConfig(t *testing.T, n int) []byte {
	t.Helper()
	b, err := scaledConfigJSON(ScaleTiny)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeJSON(t, b)
	var full, kda []any
	for l := 1; l <= n; l++ {
		if l%4 == 0 {
			full = append(full, json.Number(strconv.Itoa(l)))
		} else {
			kda = append(kda, json.Number(strconv.Itoa(l)))
		}
	}
	at(m, "text_config")["num_hidden_layers"] = json.Number(strconv.Itoa(n))
	lin := at(m, "text_config", "linear_attn_config")
	lin["full_attn_layers"], lin["kda_layers"] = full, kda
	out, err := MarshalConfig(m)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := ParseConfig(out); err != nil || c.NumLayers != n || !c.Vision {
		t.Fatalf("%d-layer config: %v", n, err)
	}
	return out
}

func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			t.Fatal(err)
		}
		n += st.Blocks * 512
	}
	return n
}

// The full-size replica costs only its headers and reads back as K3.
func TestSynthFullHeaderOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 96 sparse files of 1.45 TB apparent size")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "k3")
	if err := Synth(dir, SynthOptions{Scale: ScaleFull, HeaderOnly: true}); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var apparent int64
	for _, f := range ck.Files {
		apparent += f.Size
	}
	if ck.NumTensors() != 497220 || len(ck.Files) != 96 || !near(ck.Index().TotalSize, 1453.66, 2) {
		t.Fatalf("%d tensors, %d files, %d bytes", ck.NumTensors(), len(ck.Files), ck.Index().TotalSize)
	}
	if du := diskBytes(t, dir); du > 200<<20 {
		t.Errorf("header-only replica uses %d MiB of disk", du>>20)
	} else {
		t.Logf("apparent %.2f GiB, on disk %.1f MiB", float64(apparent)/gib, float64(du)/(1<<20))
	}
	checkReleasedLayout(t, dir, ck)
}

// checkReleasedLayout compares a full-size replica with facts public audits
// give of the released files: config.json's hash, the shard names, the
// sizes of shards 1 and 2, what shards 94–96 hold, the index's form.
func checkReleasedLayout(t *testing.T, dir string, ck *safetensors.Checkpoint) {
	t.Helper()
	if got := sha256File(t, filepath.Join(dir, ConfigName)); got != releasedSHA256 {
		t.Errorf("config.json sha256 %s, the release's is %s", got, releasedSHA256)
	}
	sizes := map[string]int64{}
	for i, f := range ck.Files {
		if want := fmt.Sprintf("model-%05d-of-000096.safetensors", i+1); f.Path != want {
			t.Errorf("file %d is %s, want %s", i, f.Path, want)
		}
		sizes[f.Path] = f.Size
	}
	if sizes["model-00001-of-000096.safetensors"] != 2341216112 || sizes["model-00002-of-000096.safetensors"] != 16990911504 {
		t.Errorf("shard 1 is %d bytes (release: 2,341,216,112), shard 2 %d (16,990,911,504)",
			sizes["model-00001-of-000096.safetensors"], sizes["model-00002-of-000096.safetensors"])
	}
	names := func(i int) []string {
		var out []string
		for _, ti := range ck.Files[i-1].Tensors {
			out = append(out, ti.Name)
		}
		slices.Sort(out)
		return out
	}
	P := "language_model.model."
	if got, want := names(94), []string{"language_model.lm_head.weight", P + "embed_tokens.weight", P + "norm.weight",
		P + "output_attn_res_norm.weight", P + "output_attn_res_proj.weight"}; !slices.Equal(got, want) {
		t.Errorf("shard 94 holds %v, want %v", got, want)
	}
	if got, want := names(95), []string{"mm_projector.post_norm.weight", "mm_projector.proj.0.weight",
		"mm_projector.proj.2.weight"}; !slices.Equal(got, want) {
		t.Errorf("shard 95 holds %v, want %v", got, want)
	}
	vt := names(96)
	if len(vt) != 165 {
		t.Errorf("shard 96 holds %d tensors, want 165", len(vt))
	}
	for _, n := range vt {
		if !strings.HasPrefix(n, "vision_tower.") {
			t.Errorf("shard 96 holds %s", n)
		}
	}
	idx, err := os.ReadFile(filepath.Join(dir, safetensors.IndexName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(idx, []byte("{\n  \"metadata\": {\n    \"total_size\": 1560860324864\n  },\n  \"weight_map\": {\n    \"")) ||
		!bytes.HasSuffix(idx, []byte("\"\n  }\n}")) {
		t.Errorf("index does not have the release's form: %q … %q", idx[:80], idx[len(idx)-40:])
	}
}

func TestSynthRefusesNonEmptyDir(t *testing.T) {
	t.Parallel()
	cfg := fewLayersConfig(t, 4) // 7 shards: the same rules as 96, fewer files to create
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Synth(dir, SynthOptions{Config: cfg, HeaderOnly: true})
	if !errors.Is(err, errOutputExists) {
		t.Fatalf("got %v, want errOutputExists", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d entries after a refused run", len(ents))
	}
	// With Force: written, the foreign file kept, a stale shard removed.
	stale := filepath.Join(dir, "model-00001-of-00002.safetensors")
	os.WriteFile(stale, []byte("old"), 0o644)
	if err := Synth(dir, SynthOptions{Config: cfg, HeaderOnly: true, Force: true}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
		t.Error("foreign file touched")
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Error("stale shard kept")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1+7+2 {
		t.Errorf("%d entries", len(ents))
	}
}

func TestSynthBadConfigWritesNothing(t *testing.T) {
	t.Parallel()
	m := k3Raw(t)
	at(m, "text_config", "linear_attn_config")["full_attn_layers"].([]any)[5] = "24"
	dir := filepath.Join(t.TempDir(), "out")
	err := Synth(dir, SynthOptions{Config: encode(t, m)})
	var fe *fieldError
	if !errors.As(err, &fe) || fe.Field != "text_config.linear_attn_config.full_attn_layers[5]" {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Error("output directory created for a bad config")
	}
}

// A user config at its own scale: 2 layers, bare text model.
func TestSynthCustomConfig(t *testing.T) {
	t.Parallel()
	m := k3Raw(t)
	tc := at(m, "text_config")
	tc["num_hidden_layers"] = jn(2)
	tc["hidden_size"] = jn(64)
	tc["vocab_size"] = jn(64)
	tc["num_experts"] = jn(16)
	tc["num_experts_per_token"] = jn(4)
	tc["moe_intermediate_size"] = jn(32)
	tc["routed_expert_hidden_size"] = jn(64)
	tc["intermediate_size"] = jn(64)
	tc["q_lora_rank"] = jn(32)
	tc["kv_lora_rank"] = jn(32)
	tc["num_attention_heads"] = jn(2)
	tc["num_key_value_heads"] = jn(2)
	lin := at(m, "text_config", "linear_attn_config")
	lin["num_heads"] = jn(2)
	lin["full_attn_layers"] = []any{jn(2)}
	delete(lin, "kda_layers")
	dir := filepath.Join(t.TempDir(), "c")
	if err := Synth(dir, SynthOptions{Config: encode(t, tc)}); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	// 2 layer shards and one model-level shard (no vision in a bare text model)
	if len(ck.Files) != 3 || ck.NumTensors() != (6+14+3)+(6+8+8+16*6)+5 {
		t.Errorf("%d files, %d tensors", len(ck.Files), ck.NumTensors())
	}
	if _, _, ok := ck.Lookup("model.layers.1.self_attn.kv_b_proj.weight"); !ok {
		t.Error("layer 1 should be MLA")
	}
}

func jn(v int) any { return json.Number(fmt.Sprint(v)) }

func BenchmarkSynthTiny(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		dir := filepath.Join(b.TempDir(), "t")
		if err := Synth(dir, SynthOptions{Scale: ScaleTiny}); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}

func BenchmarkSynthFullHeaderOnly(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		dir := filepath.Join(b.TempDir(), "k3")
		if err := Synth(dir, SynthOptions{Scale: ScaleFull, HeaderOnly: true}); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}

func BenchmarkSynthSmall(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		dir := filepath.Join(b.TempDir(), "s")
		if err := Synth(dir, SynthOptions{Scale: ScaleSmall}); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}
