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
	// Size is the output file's size.
	Size int64
	// Work is the bytes read and hashed to produce it (what progress counts).
	Work int64
	// File is set for an output shard written from its source shard, Aux
	// for a side file copied byte for byte.
	File *filePlan
	Aux  *auxFile
}

// MaxWorkers bounds N in a worker slice I/N: far more machines than any
// conversion has files, small enough that checking it needs no allocation.
const MaxWorkers = 1 << 16

// CheckWorker validates a worker slice I/N before anything depends on it.
func CheckWorker(i, n int) error {
	if n < 1 || n > MaxWorkers || i < 0 || i >= n {
		return fmt.Errorf("%w: %d/%d (want 0 ≤ I < N ≤ %d)", ErrWorker, i, n, MaxWorkers)
	}
	return nil
}

// Units lists the plan's units sorted by name.
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

// Slice returns worker i's share of the units out of n workers: units are
// dealt largest first to the least loaded worker (ties to the lowest worker
// and then by name), which balances bytes and depends only on the plan, so
// every worker computes the same partition on its own.
func (p *Plan) slice(i, n int) ([]unit, error) {
	if err := CheckWorker(i, n); err != nil {
		return nil, err
	}
	us := p.units()
	order := slices.Clone(us)
	slices.SortStableFunc(order, func(a, b unit) int { return cmp.Compare(b.Size, a.Size) })
	// More workers than units: the first len(us) workers get one each.
	load := make([]int64, min(n, max(len(us), 1)))
	var mine []unit
	for _, u := range order {
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
