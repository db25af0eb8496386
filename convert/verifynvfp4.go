package convert

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/k3ckpt/k3ckpt/internal/bufs"
	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// verifyNVFP4 casts the source of a StepNVFP4 again, band by band, and
// compares the tensor it writes with the output's bytes. It returns a
// violation ("" when bit-identical) naming the first differing block, and
// for the code step the cast's block counts; the error is for failures to
// read.
func (s *scratch) verifyNVFP4(ctx context.Context, sf *safetensors.File, st step, out *io.SectionReader) (string, quant.CastStats, error) {
	var got []byte
	read := func(n int, off int64) ([]byte, error) {
		got = bufs.Grow(got, n)
		if _, err := out.ReadAt(got, off); err != nil {
			return nil, fmt.Errorf("read at %d: %w", off, err)
		}
		return got, nil
	}
	if st.Part == partInputScale {
		b, err := read(len(inputScaleOne), 0)
		if err != nil {
			return "", quant.CastStats{}, err
		}
		if !bytes.Equal(b, inputScaleOne) {
			return fmt.Sprintf("input_scale bytes %x, NVIDIA's converter writes F32 1.0 (%x)", b, inputScaleOne), quant.CastStats{}, nil
		}
		return "", quant.CastStats{}, nil
	}
	kmax, err := s.kmaxOf(ctx, sf.ReaderAt(), sf, st.Cast, meter{})
	if err != nil {
		return "", quant.CastStats{}, err
	}
	if st.Part == partScale2 {
		want, err := scale2Bytes(kmax)
		if err != nil {
			return "", quant.CastStats{}, err
		}
		b, err := read(len(want), 0)
		if err != nil {
			return "", quant.CastStats{}, err
		}
		if !bytes.Equal(b, want) {
			return fmt.Sprintf("weight_scale_2 bytes %x, the cast gives %x = 2^(K_max − 8) with K_max %d", b, want, kmax), quant.CastStats{}, nil
		}
		return "", quant.CastStats{}, nil
	}
	k := st.Cast.k()
	unit, what := k/2, "NVFP4 codes" // bytes per row of the tensor compared
	if st.Part == partScales {
		unit, what = k/quant.NVFP4GroupSize, "E4M3 scales"
	}
	var off int64
	violation := ""
	compare := func(b []byte) error {
		if violation != "" {
			return nil
		}
		g, err := read(len(b), off)
		if err != nil {
			return err
		}
		if i := firstDiff(g, b); i >= 0 {
			at := off + int64(i)
			row, col := at/int64(unit), at%int64(unit)
			block := col / (quant.NVFP4GroupSize / 2) // 8 code bytes per 16-element block
			if st.Part == partScales {
				block = col
			}
			violation = fmt.Sprintf("%s differ from a fresh cast of %s (K_max %d): first at row %d, 16-element block %d (byte 0x%02x, the cast gives 0x%02x)",
				what, st.Cast.Packed.Name, kmax, row, block, g[i], b[i])
		}
		off += int64(len(b))
		return nil
	}
	var cs quant.CastStats
	if st.Part == partCodes {
		s.measure = s.errs.tensor(st.Cast.Packed.Name)
		cs, err = s.castNVFP4(ctx, sf.ReaderAt(), sf, st.Cast, kmax, compare, nil, meter{})
	} else {
		_, err = s.castNVFP4(ctx, sf.ReaderAt(), sf, st.Cast, kmax, nil, compare, meter{})
	}
	if err != nil {
		return "", cs, err
	}
	if violation == "" && off != out.Size() {
		violation = fmt.Sprintf("%s of %d bytes, a fresh cast gives %d", what, out.Size(), off)
	}
	return violation, cs, nil
}
