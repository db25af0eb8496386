package convert

import "github.com/k3ckpt/k3ckpt/quant"

// unitCounts are what writing one output file counted, kept in its done
// record so that a resumed run reports the whole output.
type unitCounts struct {
	ZeroedNonFinite int64             `json:"zeroed_nonfinite,omitempty"`
	ZeroScaleBlocks int64             `json:"zero_scale_blocks,omitempty"`
	Cast            quant.CastStats   `json:"cast,omitzero"`
	Decoded         int               `json:"decoded,omitempty"`
	DecodedNaN      int64             `json:"decoded_nan,omitempty"`
	Packed          int               `json:"packed,omitempty"`
	Pack            quant.PackStats   `json:"pack,omitzero"`
	Repack          quant.RepackStats `json:"repack,omitzero"`
	FP8Experts      fp8ExpertStats    `json:"fp8_experts,omitzero"`
}

// takeCounts returns what the job counted since last asked, and starts afresh.
func (s *scratch) takeCounts(zeroed int64) *unitCounts {
	c := &unitCounts{
		ZeroedNonFinite: zeroed, ZeroScaleBlocks: s.cs.zeroScale, Cast: s.cs.cast,
		Decoded: s.xs.stats.decoded, DecodedNaN: s.xs.stats.nan, Packed: s.xs.stats.packed, Pack: s.xs.stats.pack,
		Repack: s.xs.stats.repack, FP8Experts: s.fx.stats,
	}
	s.cs.zeroScale, s.cs.cast, s.xs.stats, s.fx.stats = 0, quant.CastStats{}, xfStats{}, fp8ExpertStats{}
	if *c == (unitCounts{}) {
		return nil
	}
	return c
}

func (res *Result) add(c *unitCounts) {
	if c == nil {
		return
	}
	res.ZeroedNonFinite += c.ZeroedNonFinite
	res.ZeroScaleBlocks += c.ZeroScaleBlocks
	res.Cast = res.Cast.Add(c.Cast)
	res.Decoded += c.Decoded
	res.DecodedNaN += c.DecodedNaN
	res.Packed += c.Packed
	res.Pack = res.Pack.Add(c.Pack)
	res.Repack = res.Repack.Add(c.Repack)
	res.FP8Experts = res.FP8Experts.add(c.FP8Experts)
}
