package convert

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// cancelAfter cancels a run once half its work is done.
type cancelAfter struct {
	cancel      context.CancelFunc
	total, done atomic.Int64
}

func (c *cancelAfter) Start(n int64) { c.total.Store(n) }
func (c *cancelAfter) Add(n int64) {
	if c.done.Add(n) > c.total.Load()/2 {
		c.cancel()
	}
}

// TestResumedCountsCoverTheOutput: a run cut off halfway and resumed reports
// the same counts (NVFP4 cast, BF16 decode, MXFP4 pack) as one fresh run,
// from the done records of the files the first run wrote.
func TestResumedCountsCoverTheOutput(t *testing.T) {
	skipShort(t)
	t.Parallel()
	bf := filepath.Join(t.TempDir(), "bf16")
	convertRecipe(t, miniSrc, bf, BF16, Options{Experts: ExpertsBF16})
	for _, tc := range []struct {
		name, src, recipe string
		opts              Options
	}{
		{"nvfp4", miniSrc, ModelOptK3, nvidiaOpts},
		{"bf16", miniSrc, BF16, Options{Experts: ExpertsBF16}},
		{"mxfp4", bf, BF16, Options{Experts: ExpertsMXFP4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := convertRecipe(t, tc.src, filepath.Join(t.TempDir(), "fresh"), tc.recipe, tc.opts)
			if fresh.Cast.Blocks+int64(fresh.Decoded+fresh.Packed) == 0 {
				t.Fatal("the fresh run counted nothing: the test proves nothing")
			}
			r, err := Lookup(tc.recipe)
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewPlan(openSrc(t, tc.src), nil, r, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "out")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := Execute(ctx, p, dst, ExecOptions{Jobs: 1, Progress: &cancelAfter{cancel: cancel}}); !errors.Is(err, context.Canceled) {
				t.Fatalf("cut-off run: %v", err)
			}
			res, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2, Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Skipped) == 0 || len(res.Written) == 0 || !res.Finalized {
				t.Fatalf("resume wrote %d and kept %d files (finalized %v): not a resumed run", len(res.Written), len(res.Skipped), res.Finalized)
			}
			if res.Cast != fresh.Cast || res.Decoded != fresh.Decoded || res.DecodedNaN != fresh.DecodedNaN ||
				res.Packed != fresh.Packed || res.Pack != fresh.Pack || res.Repack != fresh.Repack || res.ZeroScaleBlocks != fresh.ZeroScaleBlocks || res.Uncounted != 0 {
				t.Errorf("resumed run counted cast %+v decoded %d/%d packed %d %+v zero-scale %d uncounted %d;\nfresh run: cast %+v decoded %d/%d packed %d %+v zero-scale %d",
					res.Cast, res.Decoded, res.DecodedNaN, res.Packed, res.Pack, res.ZeroScaleBlocks, res.Uncounted,
					fresh.Cast, fresh.Decoded, fresh.DecodedNaN, fresh.Packed, fresh.Pack, fresh.ZeroScaleBlocks)
			}
			// A rerun over the finished conversion keeps every file from its
			// manifest, which holds no counts: it says so.
			again, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2, Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(again.Written) != 0 || again.Uncounted == 0 {
				t.Errorf("rerun of a finished conversion: wrote %d, uncounted %d", len(again.Written), again.Uncounted)
			}
		})
	}
}
