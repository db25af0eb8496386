package layout

import (
	"context"
	"fmt"

	"github.com/k3ckpt/k3ckpt/safetensors"
)

const (
	checkZeroPadding = "zero-padding"
	checkUE8M0Scale  = "ue8m0-scale"
)

// paddingChecks checks, for every tensor a Valid split keeps only the front
// of, that the entries it drops are zero (reassembly writes zeros back).
func paddingChecks(src *Source, pl *Placement) []dataCheck {
	var out []dataCheck
	for i, t := range pl.Tensors {
		place := pl.place[i]
		if place.stage < 0 || place.weight >= 0 {
			continue
		}
		r := &pl.Layout.Rules[place.rule]
		if r.Action != actSplit || r.Valid <= 0 || r.Valid == t.Shape[r.Axis] {
			continue
		}
		data := src.data[i]
		out = append(out, dataCheck{Kind: checkZeroPadding, Tensor: t.Name, run: func(ctx context.Context) error {
			return checkZero(ctx, data, t, r)
		}})
	}
	return out
}

func checkZero(ctx context.Context, data tensorData, t safetensors.TensorSpec, r *rule) error {
	buf := make([]byte, 64<<10)
	return forRuns(t.Shape, t.DType, r.Axis, r.Valid, t.Shape[r.Axis], func(off, n int64) error {
		for n > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			m := min(n, int64(len(buf)))
			if err := readFull(data, buf[:m], off); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			for _, b := range buf[:m] {
				if b != 0 {
					return fmt.Errorf("%w: tensor %s: rule %q keeps the first %d of %d entries along axis %d, but the rest is not zero",
						errPadding, t.Name, r.Name, r.Valid, t.Shape[r.Axis], r.Axis)
				}
			}
			off, n = off+m, n-m
		}
		return nil
	})
}

// packingChecks packs every distinct piece of a scale the plan packs, which
// fails on a scale that is not UE8M0, before anything is written.
func packingChecks(p *Plan) []dataCheck {
	type key struct {
		name       string
		rows, cols [2]int64
	}
	var out []dataCheck
	done := map[key]bool{}
	for _, d := range p.Dirs {
		for _, of := range d.files {
			for _, t := range of.tensors {
				if t.pack == nil {
					continue
				}
				k := key{t.spec.Name, t.pack.rows, t.pack.cols}
				if done[k] {
					continue
				}
				done[k] = true
				pj := t.pack
				out = append(out, dataCheck{Kind: checkUE8M0Scale, Tensor: t.spec.Name, run: func(context.Context) error {
					_, err := pj.bytes()
					return err
				}})
			}
		}
	}
	return out
}

// forRuns calls fn with the byte range of each contiguous run of the slice
// [start, stop) along axis of a row-major tensor.
func forRuns(shape []int64, dt safetensors.DType, axis int, start, stop int64, fn func(off, n int64) error) error {
	outer, innerB, rowB, run := sliceGeom(shape, dt, axis, start, stop)
	for o := int64(0); o < outer; o++ {
		if err := fn(o*rowB+start*innerB, run); err != nil {
			return err
		}
	}
	return nil
}
