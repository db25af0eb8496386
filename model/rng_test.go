package model

import (
	"math"
	"testing"
)

// Reference outputs of splitmix64 (Vigna's splitmix64.c) from state 0.
func TestSplitmixReference(t *testing.T) {
	t.Parallel()
	r := splitmix{}
	for i, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := r.next(); got != want {
			t.Fatalf("output %d: %#x, want %#x", i, got, want)
		}
	}
}

// Irwin–Hall(12) moments: mean 0, variance 1, excess kurtosis −0.1.
func TestNormalMoments(t *testing.T) {
	t.Parallel()
	r := tensorStream(7, "x")
	const n = 1 << 20
	var s1, s2, s4 float64
	lo, hi := 0.0, 0.0
	for range n {
		v := r.normal()
		s1 += v
		s2 += v * v
		s4 += v * v * v * v
		lo, hi = min(lo, v), max(hi, v)
	}
	mean, vari := s1/n, s2/n-(s1/n)*(s1/n)
	kurt := s4 / n / (vari * vari)
	if math.Abs(mean) > 0.005 || math.Abs(vari-1) > 0.01 || math.Abs(kurt-2.9) > 0.05 {
		t.Errorf("mean %.4f var %.4f kurtosis %.3f", mean, vari, kurt)
	}
	if lo < -6 || hi > 6 || lo > -4 || hi < 4 {
		t.Errorf("range [%.2f, %.2f]", lo, hi)
	}
}

func TestStreamsDiffer(t *testing.T) {
	t.Parallel()
	a, b, c := tensorStream(0, "a.weight"), tensorStream(0, "b.weight"), tensorStream(1, "a.weight")
	x, y, z := a.next(), b.next(), c.next()
	if x == y || x == z || y == z {
		t.Fatalf("streams collide: %x %x %x", x, y, z)
	}
	a2 := tensorStream(0, "a.weight")
	if a2.next() != x {
		t.Fatal("stream not reproducible")
	}
}

func TestDistOf(t *testing.T) {
	t.Parallel()
	cases := map[string]valueDist{
		"language_model.model.layers.0.input_layernorm.weight":          {1, 0.05},
		"language_model.model.layers.3.self_attn.kv_a_layernorm.weight": {1, 0.05},
		"language_model.model.layers.0.self_attn.o_norm.weight":         {1, 0.05},
		"vision_tower.encoder.blocks.0.norm1.weight":                    {1, 0.05},
		"language_model.model.layers.0.self_attn.A_log":                 {1.96, 0.7},
		"language_model.model.layers.0.self_attn.dt_bias":               {-4, 1},
		"language_model.model.layers.0.self_attn.v_conv1d.weight":       {0, 0.25},
		"language_model.model.layers.0.self_attn.q_proj.weight":         {0, 0.02},
		"language_model.model.layers.0.self_attention_res_proj.weight":  {0, 0.02},
	}
	for name, want := range cases {
		if got := distOf(name); got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
}

func BenchmarkNormal(b *testing.B) {
	r := tensorStream(0, "x")
	var s float64
	b.ReportAllocs()
	for b.Loop() {
		s += r.normal()
	}
	_ = s
}
