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
	return fmt.Sprintf("%s, %d blocks (%d lossy), max abs error %.3g, %s",
		termtext.Plural(e.Tensors, "tensor", "tensors"), e.Blocks, e.LossyBlocks, e.MaxAbsError, sqnr)
}
