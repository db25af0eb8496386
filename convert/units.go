package convert

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/k3ckpt/k3ckpt/quant"
)

// unit is one output file the workers produce (the index, configs and
// manifest are written by Finalize once every unit is done).
type unit struct {
	Name string
	Size int64
	Work int64     // bytes read and hashed to produce it (what progress counts)
	File *filePlan // an output shard, or
	Aux  *auxFile  // a side file copied byte for byte
}

// MaxWorkers bounds N in a worker slice I/N: more than any conversion's files.
const MaxWorkers = 1 << 16

// CheckWorker validates a worker slice I/N before anything depends on it.
func CheckWorker(i, n int) error {
	if n < 1 || n > MaxWorkers || i < 0 || i >= n {
		return fmt.Errorf("%w: %d/%d (want 0 ≤ I < N ≤ %d)", ErrWorker, i, n, MaxWorkers)
	}
	return nil
}

// units lists the plan's units sorted by name.
func (p *Plan) units() []unit {
	us := make([]unit, 0, len(p.Files)+len(p.Aux))
	for _, f := range p.Files {
		us = append(us, unit{Name: f.Name, Size: f.Layout.Size, Work: f.ReadBytes + f.rereadBytes() + f.Layout.Size, File: f})
	}
	for i := range p.Aux {
		a := &p.Aux[i]
		us = append(us, unit{Name: a.Name, Size: a.Size, Work: 2 * a.Size, Aux: a})
	}
	slices.SortFunc(us, func(a, b unit) int { return cmp.Compare(a.Name, b.Name) })
	return us
}

// slice returns worker i's share of the units out of n: dealt largest first
// (then by name) to the least loaded worker, it depends only on the plan, so
// every worker computes the same partition.
func (p *Plan) slice(i, n int) ([]unit, error) {
	if err := CheckWorker(i, n); err != nil {
		return nil, err
	}
	us := p.units()
	slices.SortStableFunc(us, func(a, b unit) int { return cmp.Compare(b.Size, a.Size) })
	// More workers than units: the first len(us) workers get one each.
	load := make([]int64, min(n, max(len(us), 1)))
	var mine []unit
	for _, u := range us {
		w := slices.Index(load, slices.Min(load)) // the lowest of ties
		load[w] += max(u.Size, 1)
		if w == i {
			mine = append(mine, u)
		}
	}
	slices.SortFunc(mine, func(a, b unit) int { return cmp.Compare(a.Name, b.Name) })
	return mine, nil
}

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
