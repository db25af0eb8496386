package model

import (
	"hash/fnv"
	"math/bits"
	"regexp"
)

// The replica's values must be the same bytes on every machine, so the
// generator avoids everything whose result may differ between platforms:
//   - the stream is splitmix64 (integer only), seeded per tensor from the
//     run's seed and an FNV-1a hash of the tensor's name, so tensors can be
//     generated independently and in any order;
//   - normals are Irwin–Hall sums of twelve 16-bit uniforms (integer adds,
//     one exact int→float conversion): mean 0, standard deviation 1 to within
//     1e-9, support ±6σ. Box–Muller would need log/sin/cos, whose last bit
//     differs between Go's assembly and pure-Go implementations;
//   - scaling is float64(n*std) + mean with an explicit conversion, which
//     forbids the compiler from fusing it into an FMA on arm64/ppc64/s390x.

// splitmix is a splitmix64 stream (Steele, Lea, Flood 2014).
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// tensorStream is the deterministic stream of one tensor.
func tensorStream(seed uint64, name string) splitmix {
	h := fnv.New64a()
	h.Write([]byte(name))
	m := splitmix{s: seed ^ bits.RotateLeft64(h.Sum64(), 32)}
	return splitmix{s: m.next()}
}

const (
	lanes16 = 0x0000ffff0000ffff
	lanes32 = 0x00000000ffffffff
	// ihMean is the mean of a sum of twelve uniform 16-bit integers.
	ihMean = 12 * 65535 / 2.0
	// ihScale maps the sum's standard deviation, sqrt(65536²−1), to ≈ 1.
	ihScale = 1.0 / 65536
)

// sum12 is the sum of the twelve 16-bit lanes of the next three outputs,
// the integer behind a normal value: the lanes are added in 32-bit lanes
// (six 16-bit values fit) and folded once.
func (r *splitmix) sum12() uint64 {
	a, b, c := r.next(), r.next(), r.next()
	p := a&lanes16 + a>>16&lanes16 + b&lanes16 + b>>16&lanes16 + c&lanes16 + c>>16&lanes16
	return p&lanes32 + p>>32
}

// valueDist is the distribution of a tensor's values: realistic magnitudes so
// that conversions and audits meet the ranges real weights have.
type valueDist struct {
	mean, std float64
}

func (d valueDist) draw(r *splitmix) float32 {
	return d.of(r.sum12())
}

// of is the value of the Irwin–Hall sum s: nondecreasing in s (std > 0),
// since every step rounds monotonically; the MXFP4 path relies on it.
func (d valueDist) of(s uint64) float32 {
	n := (float64(s) - ihMean) * ihScale
	return float32(float64(n*d.std) + d.mean)
}

// defaultDist is projections, embeddings, experts: std 0.02 (the usual init range).
var defaultDist = valueDist{0, 0.02}

// valueRules is the one table of value distributions, first match wins.
var valueRules = []struct {
	pattern *regexp.Regexp
	dist    valueDist
}{
	// RMSNorm/LayerNorm gains sit around 1.
	{regexp.MustCompile(`(?:layernorm|norm\d?)\.weight$`), valueDist{1, 0.05}},
	// A_log = log(A) with A ~ U[1, 16] (Mamba/KDA init): mean ≈ 1.96, std ≈ 0.7.
	{regexp.MustCompile(`\.A_log$`), valueDist{1.96, 0.7}},
	// dt_bias = softplus⁻¹(dt) with dt in [1e-3, 0.1]: around −4.
	{regexp.MustCompile(`\.dt_bias$`), valueDist{-4, 1}},
	// Depthwise short convolutions of kernel 4: fan-in 4.
	{regexp.MustCompile(`_conv1d\.weight$`), valueDist{0, 0.25}},
	// Router bias, learned small offsets.
	{regexp.MustCompile(`\.e_score_correction_bias$`), valueDist{0, 0.1}},
}

func distOf(name string) valueDist {
	for _, r := range valueRules {
		if r.pattern.MatchString(name) {
			return r.dist
		}
	}
	return defaultDist
}
