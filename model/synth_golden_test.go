package model

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

// synthGoldenTensors are tensors larger than a generation chunk, in each
// kind synth writes: BF16 normals, padded F32 (A_log), an MXFP4 pair.
var synthGoldenTensors = []safetensors.TensorSpec{
	{Name: "language_model.model.layers.0.self_attn.q_proj.weight", DType: safetensors.BF16, Shape: []int64{1000, 700}},
	{Name: "language_model.model.layers.0.input_layernorm.weight", DType: safetensors.BF16, Shape: []int64{70001}},
	{Name: "language_model.model.layers.0.self_attn.A_log", DType: safetensors.F32, Shape: []int64{100000}},
	{Name: "language_model.model.layers.0.self_attn.dt_bias", DType: safetensors.F32, Shape: []int64{3, 33333}},
	{Name: "language_model.model.layers.1.mlp.experts.0.w1.weight_packed", DType: safetensors.U8, Shape: []int64{600, 1440}},
	{Name: "language_model.model.layers.1.mlp.experts.0.w1.weight_scale", DType: safetensors.U8, Shape: []int64{600, 90}},
}

// synthGoldenSHA256 are the sha256 of each tensor's bytes under seed 42,
// recorded from the generator before it was made faster: the same seed
// must keep giving the same bytes.
var synthGoldenSHA256 = map[string]string{
	"language_model.model.layers.0.self_attn.q_proj.weight":        "1c62a9eff3dd3ae200f4aae66949f1143377fe0823511c3580a27134ef54e94b",
	"language_model.model.layers.0.input_layernorm.weight":         "1ea870d67a9603849caa5fde5c528f28fa18704b222624c61d86e6dd4fc78a62",
	"language_model.model.layers.0.self_attn.A_log":                "f0c1205d4b3f8f929c9bd29d04f965aa6f4dcc442063be8a83d46c9e182642c4",
	"language_model.model.layers.0.self_attn.dt_bias":              "9607de4e560a6d348b4625705e9b77d806949f841f365436eadc12e6a6d82b35",
	"language_model.model.layers.1.mlp.experts.0.w1.weight_packed": "570f809266ddf905c9b39934f5d96aed6fed438cc8ce1ac13aa3c5597f408a0e",
	"language_model.model.layers.1.mlp.experts.0.w1.weight_scale":  "4b8394722b804891240d441cb510d26d008e8a1228869d5c5da1642bb486ca8f",
}

// TestSynthTensorGoldens writes the golden tensors through the generator
// and compares each tensor's bytes with the recorded sha256.
func TestSynthTensorGoldens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "g.safetensors")
	layout, err := safetensors.NewFilePlan(synthGoldenTensors, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := safetensors.Create(path, layout)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	padded := map[string]int64{"language_model.model.layers.0.self_attn.A_log": 64} // 64 KDA heads
	s := &synth{cfg: &Config{GroupSize: 32}, opts: SynthOptions{Seed: 42}, live: padded}
	buf := &synthBuf{}
	for _, ts := range synthGoldenTensors[:4] {
		if err := s.fillFloat(w, ts, buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.fillMXFP4(w, "language_model.model.layers.1.mlp.experts.0.w1.weight", synthGoldenTensors[4], synthGoldenTensors[5], buf); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data := b[layout.DataStart:]
	update := os.Getenv("K3CKPT_UPDATE_GOLDENS") == "1"
	for _, ts := range synthGoldenTensors {
		i, ok := layout.Index(ts.Name)
		if !ok {
			t.Fatalf("%s: not in the plan", ts.Name)
		}
		e := layout.Tensors[i]
		sum := sha256.Sum256(data[e.Begin:e.End])
		got := hex.EncodeToString(sum[:])
		if update {
			t.Logf("%q: %q,", ts.Name, got)
			continue
		}
		if want := synthGoldenSHA256[ts.Name]; got != want {
			t.Errorf("%s: sha256 %s, golden %s", ts.Name, got, want)
		}
	}
}
