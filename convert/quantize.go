package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

var quantElems = map[safetensors.DType]quant.Elem{safetensors.BF16: quant.BF16, safetensors.F16: quant.F16, safetensors.F32: quant.F32}

// tileCols is k, or the widest 128-multiple tile whose band fits TileBytes.
func tileCols(k, esz int) int {
	if blockSize*k*esz <= tileBytes {
		return k
	}
	return max(blockSize, tileBytes/(blockSize*esz)/blockSize*blockSize)
}

// quantize streams one [N, K] weight through the quantizer in 128-row bands,
// handing the FP8 codes to emit or onto *hold (within its capacity); it
// leaves the fp32 scales in s.sbytes, the zero scales counted in
// s.lastZeroScale, and returns how many non-finite values it zeroed.
func (s *scratch) quantize(ctx context.Context, ra io.ReaderAt, f *safetensors.File, t safetensors.TensorInfo, opts Options,
	emit func([]byte) error, hold *[]byte, prog meter) (int64, error) {
	sec, t, viewed, err := s.weightSource(ra, f, t, prog)
	if err != nil {
		return 0, err
	}
	elem, ok := quantElems[t.DType]
	if !ok || len(t.Shape) != 2 {
		return 0, fmt.Errorf("%w: %s %v", errNotQuantizable, t.DType, t.Shape)
	}
	if t.Shape[1] > quant.MaxK {
		return 0, fmt.Errorf("%w: K = %d over %d", errNotQuantizable, t.Shape[1], quant.MaxK)
	}
	n, k, esz := t.Shape[0], int(t.Shape[1]), elem.Size()
	nb, kb := blocks(n), blocks(int64(k))
	if nb*kb > maxScaleBlocks {
		return 0, fmt.Errorf("%w: %d scale blocks, over %d", errNotQuantizable, nb*kb, maxScaleBlocks)
	}
	rowBytes := int64(k) * int64(esz)
	wcols := tileCols(k, esz)
	s.src = bufs.Grow(s.src, blockSize*wcols*esz)
	s.band = bufs.Grow(s.band, blockSize*k)
	if wcols < k {
		s.tile = bufs.Grow(s.tile, blockSize*wcols)
	}
	s.scales = bufs.Grow(s.scales, int(nb*kb))
	quantizers := map[int]*quant.Quantizer{}
	measure := s.measure
	s.measure = nil
	var zeroed, recounted int64
	for b := range nb {
		if err := ctx.Err(); err != nil {
			return zeroed, err
		}
		rows := int(min(blockSize, n-b*blockSize))
		if hold != nil && len(*hold)+rows*k > cap(*hold) {
			return zeroed, fmt.Errorf("codes held over the planned %d bytes", cap(*hold))
		}
		for c0 := 0; c0 < k; c0 += wcols {
			w := min(wcols, k-c0)
			src := s.src[:rows*w*esz]
			if w == k { // the band is contiguous
				if _, err := sec.ReadAt(src, b*blockSize*rowBytes); err != nil {
					return zeroed, fmt.Errorf("read rows %d..%d: %w", b*blockSize, b*blockSize+int64(rows), err)
				}
			} else {
				for r := range rows {
					off := (b*blockSize+int64(r))*rowBytes + int64(c0*esz)
					if _, err := sec.ReadAt(src[r*w*esz:(r+1)*w*esz], off); err != nil {
						return zeroed, fmt.Errorf("read row %d: %w", b*blockSize+int64(r), err)
					}
				}
			}
			q := quantizers[w]
			if q == nil {
				q = quant.NewQuantizer(w, elem, opts.ScaleFmt)
				q.Numerics, q.Measure = opts.Numerics, measure
				quantizers[w] = q
			}
			dst := s.band[:rows*k]
			if w != k {
				dst = s.tile[:rows*w]
			} else if hold != nil { // straight into the held codes: no copy of the band
				dst = (*hold)[len(*hold) : len(*hold)+rows*k]
			}
			scales := s.scales[b*kb+int64(c0/blockSize):]
			z0 := q.ZeroScaleBlocks
			err := q.QuantizeBandAt(int(b), dst, scales, src, rows)
			var nf *quant.BlockError
			if errors.As(err, &nf) && nf.Err == quant.ErrNonFinite {
				recounted += q.ZeroScaleBlocks - z0 // the blocks before it, counted again below
				if opts.NonFinite != nonFiniteZero {
					return zeroed, fmt.Errorf("%w: %s %#x at row %d, column %d (128×128 block %d,%d); pass --nonfinite zero to replace such values by 0",
						errNonFinite, t.DType, nf.Bits, nf.Row, c0+nf.Col, b, c0/blockSize+nf.ColBlock)
				}
				zeroed += zeroNonFinite(src, elem)
				err = q.QuantizeBandAt(int(b), dst, scales, src, rows)
			}
			var so *quant.BlockError
			if errors.As(err, &so) && so.Err == quant.ErrRange {
				return zeroed, fmt.Errorf("%w: %s amax %#x in 128×128 block %d,%d gets the %v block scale %g, at which it dequantizes to infinity; convert with --scale-fmt fp32",
					quant.ErrRange, t.DType, so.Bits, b, c0/blockSize+so.ColBlock, opts.ScaleFmt, so.Scale)
			}
			if err != nil {
				return zeroed, err
			}
			if w != k {
				for r := range rows {
					copy(s.band[r*k+c0:r*k+c0+w], dst[r*w:(r+1)*w])
				}
			}
			if !viewed { // a view counts the source bytes it reads
				prog.add(int64(len(src)))
			}
		}
		switch {
		case hold != nil && wcols == k:
			*hold = (*hold)[:len(*hold)+rows*k]
		case hold != nil:
			*hold = append(*hold, s.band[:rows*k]...)
		case emit != nil:
			if err := emit(s.band[:rows*k]); err != nil {
				return zeroed, err
			}
		}
	}
	s.lastZeroScale = -recounted
	for _, q := range quantizers {
		s.lastZeroScale += q.ZeroScaleBlocks
	}
	s.sbytes = bufs.Grow(s.sbytes, 4*len(s.scales))
	for i, v := range s.scales {
		binary.LittleEndian.PutUint32(s.sbytes[4*i:], math.Float32bits(v))
	}
	return zeroed, nil
}

// zeroNonFinite replaces every Inf or NaN element of src by +0 and counts them.
func zeroNonFinite(src []byte, e quant.Elem) int64 {
	size, exp := 2, uint32(0x7F80) // BF16
	switch e {
	case quant.F32:
		size, exp = 4, 0x7F800000
	case quant.F16:
		exp = 0x7C00
	}
	var n int64
	for i := 0; i+size <= len(src); i += size {
		v := uint32(binary.LittleEndian.Uint16(src[i:]))
		if size == 4 {
			v = binary.LittleEndian.Uint32(src[i:])
		}
		if v&exp == exp {
			clear(src[i : i+size])
			n++
		}
	}
	return n
}
