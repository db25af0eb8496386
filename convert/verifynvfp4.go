package convert

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// verifyNVFP4 casts the source of a StepNVFP4 again, band by band, and
// compares the tensor it writes with the output's bytes. It returns a
// violation ("" when bit-identical) naming the first differing block, and
// for the code step the cast's block counts; the error is for failures to
// read.
func (s *scratch) verifyNVFP4(ctx context.Context, sf *safetensors.File, st step, out *io.SectionReader) (string, quant.CastStats, error) {
	var cs quant.CastStats
	if st.Part == partInputScale {
		v, err := sameScalar(out, inputScaleOne, "input_scale bytes %x, NVIDIA's converter writes F32 1.0 (%x)")
		return v, cs, err
	}
	kmax, err := s.kmaxOf(ctx, sf.ReaderAt(), sf, st.Cast, meter{})
	if err != nil {
		return "", cs, err
	}
	if st.Part == partScale2 {
		want, err := scale2Bytes(kmax)
		if err != nil {
			return "", cs, err
		}
		v, err := sameScalar(out, want, "weight_scale_2 bytes %x, the cast gives %x = 2^(K_max − 8) with K_max %d", kmax)
		return v, cs, err
	}
	c := &diffStream{out: out, diff: -1}
	if st.Part == partCodes {
		s.measure = s.errs.tensor(st.Cast.Packed.Name)
		cs, err = s.castNVFP4(ctx, sf.ReaderAt(), sf, st.Cast, kmax, c.emit, nil, meter{})
	} else {
		_, err = s.castNVFP4(ctx, sf.ReaderAt(), sf, st.Cast, kmax, nil, c.emit, meter{})
	}
	if err != nil {
		return "", cs, err
	}
	k := int64(st.Cast.k())
	// A row of k/2 code bytes, 8 per 16-element block, or of k/16 scales.
	row, block, what := c.diff/(k/2), c.diff%(k/2)/(quant.NVFP4GroupSize/2), "NVFP4 codes"
	if st.Part == partScales {
		row, block, what = c.diff/(k/quant.NVFP4GroupSize), c.diff%(k/quant.NVFP4GroupSize), "E4M3 scales"
	}
	switch {
	case c.diff >= 0:
		return fmt.Sprintf("%s differ from a fresh cast of %s (K_max %d): first at row %d, 16-element block %d (byte 0x%02x, the cast gives 0x%02x)",
			what, st.Cast.Packed.Name, kmax, row, block, c.got, c.want), cs, nil
	case c.off != out.Size():
		return fmt.Sprintf("%s of %d bytes, a fresh cast gives %d", what, out.Size(), c.off), cs, nil
	}
	return "", cs, nil
}

// sameScalar compares a scalar tensor's bytes with want; a difference is
// worded by format, given the bytes found, want and args.
func sameScalar(out *io.SectionReader, want []byte, format string, args ...any) (string, error) {
	got := make([]byte, len(want))
	if _, err := out.ReadAt(got, 0); err != nil {
		return "", fmt.Errorf("read at 0: %w", err)
	}
	if bytes.Equal(got, want) {
		return "", nil
	}
	return fmt.Sprintf(format, append([]any{got, want}, args...)...), nil
}
