package convert

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// nVFP4BandBytes bounds the packed MXFP4 codes cast at once.
const nVFP4BandBytes = 4 << 20

// inputScaleOne is X.input_scale, F32 1.0: NVIDIA's converter pins every
// expert's activation scale to --input_scale (default 1.0), no calibration.
var inputScaleOne = binary.LittleEndian.AppendUint32(nil, math.Float32bits(1))

// castScratch is a job's state for NVFP4 casts and its counts.
type castScratch struct {
	mx, e4    []byte // one band of E8M0 and of E4M3 scales
	zeros     []byte // zero codes for casts that only want the scales
	file      *safetensors.File
	kmax      map[string]int // file's K_max per w1/w3 pair, shared by their steps
	cast      quant.CastStats
	zeroScale int64
}

// kmaxOf returns the K_max of a cast: NVIDIA's mxfp4_kmax of the projection's
// E8M0 scales, for w1/w3 the larger of the pair's (all-zero scales count as
// 0), read the first time the file needs it.
func (s *scratch) kmaxOf(ctx context.Context, ra io.ReaderAt, sf *safetensors.File, c *castSource, prog meter) (int, error) {
	if s.cs.file != sf {
		s.cs.file, s.cs.kmax = sf, map[string]int{}
	}
	key := c.kmaxKey()
	if k, ok := s.cs.kmax[key]; ok {
		return k, nil
	}
	k, err := s.scanKMax(ctx, ra, sf, c.Scales, prog)
	if err != nil {
		return 0, err
	}
	if c.Partner != nil {
		kp, err := s.scanKMax(ctx, ra, sf, *c.Partner, prog)
		if err != nil {
			return 0, err
		}
		k = max(k, kp)
	}
	s.cs.kmax[key] = k
	return k, nil
}

// scanKMax is KMax over one E8M0 scale tensor.
func (s *scratch) scanKMax(ctx context.Context, ra io.ReaderAt, sf *safetensors.File, t safetensors.TensorInfo, prog meter) (int, error) {
	var m quant.KMax
	sec := tensorSection(ra, sf, t)
	for off := int64(0); off < t.Size(); {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n := min(nVFP4BandBytes, t.Size()-off)
		s.cs.mx = bufs.Grow(s.cs.mx, int(n))
		if _, err := sec.ReadAt(s.cs.mx, off); err != nil {
			return 0, fmt.Errorf("read %s at %d: %w", t.Name, off, err)
		}
		if err := m.Add(s.cs.mx); err != nil {
			return 0, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		prog.add(n)
		off += n
	}
	return m.Value, nil
}

// castBandRows is how many rows of k elements one band of the cast holds.
func castBandRows(n int64, k int) int {
	return int(min(n, max(1, int64(nVFP4BandBytes/(k/2)))))
}

// castNVFP4 casts one MXFP4 projection to NVFP4 band by band, handing codes
// and E4M3 scales to codes and scales (either nil). Without codes, zero codes
// are cast: the scales depend on the E8M0 scales and K_max alone.
func (s *scratch) castNVFP4(ctx context.Context, ra io.ReaderAt, sf *safetensors.File, c *castSource, kmax int, codes, scales func([]byte) error, prog meter) (quant.CastStats, error) {
	n, k := c.Packed.Shape[0], c.k()
	cast, err := quant.NewNVFP4Cast(k, kmax)
	if err != nil {
		return quant.CastStats{}, fmt.Errorf("tensor %s: %w", c.Packed.Name, err)
	}
	if codes != nil { // zero codes say nothing of the error
		cast.Measure = s.measure
	}
	s.measure = nil
	rows := castBandRows(n, k)
	pb, sb := rows*k/2, rows*k/quant.MXGroupSize
	s.cs.mx = bufs.Grow(s.cs.mx, sb)
	s.cs.e4 = bufs.Grow(s.cs.e4, 2*sb)
	packed := s.cs.zeros // cast in place: zero codes stay zero
	if codes != nil {
		s.src = bufs.Grow(s.src, pb)
		packed = s.src
	} else if len(packed) < pb {
		s.cs.zeros = make([]byte, pb)
		packed = s.cs.zeros
	}
	pSec, sSec := tensorSection(ra, sf, c.Packed), tensorSection(ra, sf, c.Scales)
	for r0 := int64(0); r0 < n; r0 += int64(rows) {
		if err := ctx.Err(); err != nil {
			return cast.Stats, err
		}
		m := int(min(int64(rows), n-r0))
		mp, ms := m*k/2, m*k/quant.MXGroupSize
		if _, err := sSec.ReadAt(s.cs.mx[:ms], r0*int64(k/quant.MXGroupSize)); err != nil {
			return cast.Stats, fmt.Errorf("read %s rows %d..%d: %w", c.Scales.Name, r0, r0+int64(m), err)
		}
		read := int64(ms)
		if codes != nil {
			if _, err := pSec.ReadAt(packed[:mp], r0*int64(k/2)); err != nil {
				return cast.Stats, fmt.Errorf("read %s rows %d..%d: %w", c.Packed.Name, r0, r0+int64(m), err)
			}
			read += int64(mp)
		}
		prog.add(read)
		if err := cast.CastBand(packed[:mp], s.cs.e4[:2*ms], packed[:mp], s.cs.mx[:ms], m); err != nil {
			return cast.Stats, fmt.Errorf("tensor %s: %w", c.Packed.Name, err)
		}
		if codes != nil {
			if err := codes(packed[:mp]); err != nil {
				return cast.Stats, err
			}
		}
		if scales != nil {
			if err := scales(s.cs.e4[:2*ms]); err != nil {
				return cast.Stats, err
			}
		}
	}
	return cast.Stats, nil
}

// writeNVFP4 writes the tensor of a StepNVFP4; its code step counts the cast.
func (s *scratch) writeNVFP4(ctx context.Context, ra io.ReaderAt, sf *safetensors.File, st step, w func([]byte) error, prog meter) error {
	if st.Part == partInputScale {
		return w(inputScaleOne)
	}
	kmax, err := s.kmaxOf(ctx, ra, sf, st.Cast, prog)
	if err != nil {
		return err
	}
	switch st.Part {
	case partScale2:
		b, err := scale2Bytes(kmax)
		if err != nil {
			return err
		}
		return w(b)
	case partScales:
		_, err := s.castNVFP4(ctx, ra, sf, st.Cast, kmax, nil, w, prog)
		return err
	}
	s.measure = s.errs.tensor(st.Cast.Packed.Name) // partCodes
	cs, err := s.castNVFP4(ctx, ra, sf, st.Cast, kmax, w, nil, prog)
	if err == nil {
		s.cs.cast = s.cs.cast.Add(cs)
	}
	return err
}

// tensorSection is t's bytes in ra, which holds sf's (the file, or a
// stream of its planned ranges).
func tensorSection(ra io.ReaderAt, sf *safetensors.File, t safetensors.TensorInfo) *io.SectionReader {
	return io.NewSectionReader(ra, sf.DataStart+t.Begin, t.Size())
}

// nvfp4Reads calls read with each (tensor, offset, length) a StepNVFP4
// reads, in the cast's order; seen holds the K_max keys met already.
func nvfp4Reads(st step, seen map[string]bool, read func(t safetensors.TensorInfo, off, n int64)) {
	c := st.Cast
	if st.Part == partInputScale || c == nil {
		return
	}
	if key := c.kmaxKey(); !seen[key] {
		seen[key] = true
		for _, t := range []*safetensors.TensorInfo{&c.Scales, c.Partner} {
			for off := int64(0); t != nil && off < t.Size(); off += nVFP4BandBytes {
				read(*t, off, min(nVFP4BandBytes, t.Size()-off))
			}
		}
	}
	if st.Part != partScales && st.Part != partCodes {
		return
	}
	n, k := c.Packed.Shape[0], c.k()
	rows := int64(castBandRows(n, k))
	for r0 := int64(0); r0 < n; r0 += rows {
		m := min(rows, n-r0)
		read(c.Scales, r0*int64(k/quant.MXGroupSize), m*int64(k/quant.MXGroupSize))
		if st.Part == partCodes {
			read(c.Packed, r0*int64(k/2), m*int64(k/2))
		}
	}
}

// scale2Bytes is weight_scale_2 = 2^(K_max − 8) as little-endian F32.
func scale2Bytes(kmax int) ([]byte, error) {
	c, err := quant.NewNVFP4Cast(quant.MXGroupSize, kmax)
	if err != nil {
		return nil, err
	}
	return binary.LittleEndian.AppendUint32(nil, math.Float32bits(c.Scale2)), nil
}
