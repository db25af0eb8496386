package safetensors

import (
	"fmt"
	"testing"
)

// k3LayerSpecs lists a header shaped like one Kimi-K3 MoE layer shard (896
// MXFP4 experts plus the layer's BF16/F32 tensors): 5,398 tensors, about 823 KB
// of header, the size the reader must parse 96 times for the whole checkpoint.
func k3LayerSpecs(layer int) []TensorSpec {
	p := fmt.Sprintf("language_model.model.layers.%d.", layer)
	const h = 7168
	s := []TensorSpec{
		{p + "input_layernorm.weight", BF16, []int64{h}},
		{p + "post_attention_layernorm.weight", BF16, []int64{h}},
		{p + "self_attention_res_norm.weight", BF16, []int64{h}},
		{p + "mlp_res_norm.weight", BF16, []int64{h}},
		{p + "self_attention_res_proj.weight", BF16, []int64{1, h}},
		{p + "mlp_res_proj.weight", BF16, []int64{1, h}},
	}
	for _, n := range []string{"q_proj", "k_proj", "v_proj", "g_proj"} {
		s = append(s, TensorSpec{p + "self_attn." + n + ".weight", BF16, []int64{12288, h}})
	}
	for _, n := range []string{"q_conv1d", "k_conv1d", "v_conv1d"} {
		s = append(s, TensorSpec{p + "self_attn." + n + ".weight", F32, []int64{12288, 1, 4}})
	}
	s = append(s,
		TensorSpec{p + "self_attn.o_proj.weight", BF16, []int64{h, 12288}},
		TensorSpec{p + "self_attn.f_a_proj.weight", BF16, []int64{128, h}},
		TensorSpec{p + "self_attn.f_b_proj.weight", BF16, []int64{12288, 128}},
		TensorSpec{p + "self_attn.b_proj.weight", BF16, []int64{96, h}},
		TensorSpec{p + "self_attn.dt_bias", F32, []int64{12288}},
		TensorSpec{p + "self_attn.o_norm.weight", F32, []int64{128}},
		TensorSpec{p + "self_attn.A_log", F32, []int64{128}},
		TensorSpec{p + "block_sparse_moe.gate.weight", BF16, []int64{896, h}},
		TensorSpec{p + "block_sparse_moe.gate.e_score_correction_bias", F32, []int64{896}},
	)
	for e := range 896 {
		q := fmt.Sprintf("%sblock_sparse_moe.experts.%d.", p, e)
		s = append(s,
			TensorSpec{q + "w1.weight_packed", U8, []int64{3072, 1792}},
			TensorSpec{q + "w1.weight_scale", U8, []int64{3072, 112}},
			TensorSpec{q + "w2.weight_packed", U8, []int64{3584, 1536}},
			TensorSpec{q + "w2.weight_scale", U8, []int64{3584, 96}},
			TensorSpec{q + "w3.weight_packed", U8, []int64{3072, 1792}},
			TensorSpec{q + "w3.weight_scale", U8, []int64{3072, 112}},
		)
	}
	return s
}

// BenchmarkParseLayerHeader parses one full-size K3 layer shard header.
func BenchmarkParseLayerHeader(b *testing.B) {
	l, err := NewFilePlan(k3LayerSpecs(5), nil)
	if err != nil {
		b.Fatal(err)
	}
	h := l.Header[8:]
	b.ReportAllocs()
	b.SetBytes(int64(len(h)))
	for b.Loop() {
		if _, err := ParseHeader(h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewFilePlan renders the same header canonically (the writer's cost).
func BenchmarkNewFilePlan(b *testing.B) {
	specs := k3LayerSpecs(5)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewFilePlan(specs, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// fullSizeCheckpoint writes 93 sparse, header-only layer shards shaped like
// Kimi K3's (about 76 MB of headers, 1.4 TB of holes) plus their index.
func fullSizeCheckpoint(b *testing.B) string {
	dir := b.TempDir()
	idx := &Index{WeightMap: map[string]string{}}
	for l := range 93 {
		name := fmt.Sprintf("model-%05d-of-00093.safetensors", l+1)
		lay, err := NewFilePlan(k3LayerSpecs(l), nil)
		if err != nil {
			b.Fatal(err)
		}
		w, err := Create(dir+"/"+name, lay)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.CommitSparse(); err != nil {
			b.Fatal(err)
		}
		for _, t := range lay.Tensors {
			idx.WeightMap[t.Name] = name
			idx.TotalSize += t.Size()
		}
	}
	if err := WriteIndex(dir+"/"+IndexName, idx); err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkOpenFullCheckpoint opens (reads and validates every header and the
// index of) a full-size K3-shaped checkpoint.
func BenchmarkOpenFullCheckpoint(b *testing.B) {
	dir := fullSizeCheckpoint(b)
	b.ReportAllocs()
	var hdr int64
	for b.Loop() {
		c, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		hdr = c.HeaderBytesRead
		c.Close()
	}
	b.SetBytes(hdr)
}

// BenchmarkWalkFullCheckpoint is BenchmarkOpenFullCheckpoint streamed: every
// header read, validated against the index, handed over and let go.
func BenchmarkWalkFullCheckpoint(b *testing.B) {
	dir := fullSizeCheckpoint(b)
	b.ReportAllocs()
	var hdr int64
	for b.Loop() {
		s, err := OpenShards(b.Context(), dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Walk(b.Context(), false, func(int, *File) error { return nil }); err != nil {
			b.Fatal(err)
		}
		hdr, _ = s.BytesRead()
	}
	b.SetBytes(hdr)
}

// BenchmarkParseFullIndex parses a full-size K3-shaped index (497K entries).
func BenchmarkParseFullIndex(b *testing.B) {
	idx := &Index{WeightMap: map[string]string{}}
	for l := range 93 {
		for _, s := range k3LayerSpecs(l) {
			idx.WeightMap[s.Name] = fmt.Sprintf("model-%05d-of-00096.safetensors", l+1)
		}
	}
	raw, err := idx.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseIndex(raw, "i"); err != nil {
			b.Fatal(err)
		}
	}
}
