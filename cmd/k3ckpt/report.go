package main

import (
	"fmt"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// reportTotalLine sums up a quantization report's total in one line.
func reportTotalLine(e convert.ReportEntry) string {
	sqnr := "lossless"
	if e.SQNR != nil {
		sqnr = fmt.Sprintf("SQNR %.2f dB", *e.SQNR)
	} else if !e.Lossless {
		sqnr = "SQNR undefined"
	}
	return fmt.Sprintf("%s, %s blocks (%s lossy), max abs error %.3g, %s",
		termtext.Plural(e.Tensors, "tensor", "tensors"), termtext.Int(e.Blocks), termtext.Int(e.LossyBlocks), e.MaxAbsError, sqnr)
}
