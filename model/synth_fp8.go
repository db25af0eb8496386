package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// fP8Scale is the scale tensor of a block-FP8 weight in a family's release
// (DeepSeek's weight_scale_inv), when specs hold one of the right shape.
func fP8Scale(weight safetensors.TensorSpec, byName map[string]safetensors.TensorSpec) (safetensors.TensorSpec, bool) {
	if weight.DType != safetensors.F8_E4M3 || len(weight.Shape) != 2 {
		return safetensors.TensorSpec{}, false
	}
	sc, ok := byName[DeepSeek.ScaleName(weight.Name)]
	return sc, ok && sc.DType == safetensors.F32 && IsBlockScaleShape(sc.Shape, weight.Shape) && len(sc.Shape) == 2
}

// fillFP8 draws the [N, K] weight as BF16 normals, 128 rows at a time, and
// writes their block-FP8 cast (quant.Quantizer: DeepGEMM's
// per_block_cast_to_fp8, as convert casts) and its F32 scales.
func (s *synth) fillFP8(w *safetensors.Writer, weight, scale safetensors.TensorSpec, buf *synthBuf) error {
	n, k := weight.Shape[0], weight.Shape[1]
	ww, err := w.Tensor(weight.Name)
	if err != nil {
		return err
	}
	sw, err := w.Tensor(scale.Name)
	if err != nil {
		return err
	}
	q := quant.NewQuantizer(int(k), quant.BF16, quant.ScaleFP32)
	dist := distOf(weight.Name)
	r := tensorStream(s.opts.Seed, weight.Name)
	nkb := int(scale.Shape[1])
	buf.out = bufs.Grow(buf.out, quant.BlockSize*int(k)*2)
	buf.fp8 = bufs.Grow(buf.fp8, quant.BlockSize*int(k))
	buf.f32 = bufs.Grow(buf.f32, nkb)
	buf.scales = bufs.Grow(buf.scales, 4*nkb)
	for row := int64(0); row < n; row += quant.BlockSize {
		rows := int(min(quant.BlockSize, n-row))
		src := buf.out[:rows*int(k)*2]
		for j := 0; j < len(src); j += 2 {
			binary.LittleEndian.PutUint16(src[j:], quant.F32ToBF16(dist.draw(&r)))
		}
		dst, sc := buf.fp8[:rows*int(k)], buf.f32[:nkb]
		if err := q.QuantizeBandAt(int(row/quant.BlockSize), dst, sc, src, rows); err != nil {
			return fmt.Errorf("tensor %s: %w", weight.Name, err)
		}
		b := buf.scales[:4*nkb]
		for j, v := range sc {
			binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(v))
		}
		if _, err := ww.Write(dst); err != nil {
			return err
		}
		if _, err := sw.Write(b); err != nil {
			return err
		}
	}
	return nil
}
