package convert

import (
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/quant"
)

// TestMXFP4ExpertsAsBlockFP8 measures, over the mini replica's MXFP4
// experts, how many 128×128 blocks stay lossless when the decoded values
// are cast to block FP8 with each scale format (DeepGEMM's numerics): an
// E4M3 code under one block scale cannot hold every E8M0 scale of the
// block's 32-wide groups. The counts are the ones convert/README.md quotes;
// the test fails if UE8M0 ever keeps fewer blocks lossless than fp32.
func TestMXFP4ExpertsAsBlockFP8(t *testing.T) {
	t.Parallel()
	src := tensorsOf(t, miniSrc)
	var blocks int64
	lossless := map[quant.ScaleFmt]int64{}
	for name, s := range src {
		base, packed, ok := model.K3Classifier().MXFP4Part(name)
		if !ok || !packed {
			continue
		}
		n, k := int(s.shape[0]), int(2*s.shape[1])
		sc := src[base+".weight_scale"].data
		bf := make([]byte, 2*n*k)
		for r := range n {
			if _, err := quant.MXFP4ToBF16(bf[2*r*k:2*(r+1)*k], s.data[r*k/2:(r+1)*k/2], sc[r*k/32:(r+1)*k/32]); err != nil {
				t.Fatal(err)
			}
		}
		kb := numBlocks(k)
		blocks += int64(numBlocks(n) * kb)
		for _, f := range []quant.ScaleFmt{quant.ScaleFP32, quant.ScaleUE8M0} {
			q := quant.NewQuantizer(k, quant.BF16, f)
			codes, scales, back := make([]byte, 128*k), make([]float32, kb), make([]byte, 2*128*k)
			for b := range numBlocks(n) {
				r0, r1 := b*128, min(b*128+128, n)
				rows := r1 - r0
				if err := q.QuantizeBandAt(b, codes, scales, bf[2*r0*k:2*r1*k], rows); err != nil {
					t.Fatal(err)
				}
				if err := quant.DequantizeBandBF16(back, codes, scales, rows, k); err != nil {
					t.Fatal(err)
				}
				for j := range kb {
					c0, c1 := j*128, min(j*128+128, k)
					same := true
					for r := range rows {
						row := 2 * (r0 + r) * k
						if !sameUpToZeroSign(back[2*r*k+2*c0:2*r*k+2*c1], bf[row+2*c0:row+2*c1]) {
							same = false
							break
						}
					}
					if same {
						lossless[f]++
					}
				}
			}
		}
	}
	t.Logf("%d blocks of 128×128: lossless with fp32 scales %d, with UE8M0 scales %d", blocks, lossless[quant.ScaleFP32], lossless[quant.ScaleUE8M0])
	if blocks == 0 || lossless[quant.ScaleUE8M0] < lossless[quant.ScaleFP32] {
		t.Fatalf("UE8M0 keeps %d lossless, fp32 %d", lossless[quant.ScaleUE8M0], lossless[quant.ScaleFP32])
	}
}
