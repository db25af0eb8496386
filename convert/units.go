package convert

import (
	"cmp"
	"fmt"
	"slices"
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

// slice returns worker i's share of the units out of n: dealt largest
// first (then by name) to the least loaded worker (the lowest of ties), it
// depends only on the plan, so every worker computes the same partition.
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
		w := 0
		for j := 1; j < len(load); j++ {
			if load[j] < load[w] {
				w = j
			}
		}
		load[w] += max(u.Size, 1)
		if w == i {
			mine = append(mine, u)
		}
	}
	slices.SortFunc(mine, func(a, b unit) int { return cmp.Compare(a.Name, b.Name) })
	return mine, nil
}
