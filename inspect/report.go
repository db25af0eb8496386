package inspect

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// readQuantReport reads quantization_report.json (nil when absent).
func (a *auditor) readQuantReport() (*convert.Report, error) {
	b, ok, err := a.readAux(convert.ReportName)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", convert.ReportName, err)
	}
	if !ok {
		return nil, nil
	}
	r, err := convert.ParseReport(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errConfig, convert.ReportName, err)
	}
	return r, nil
}

// quantReportText writes the report's errors per group and in total.
func quantReportText(w io.Writer, r *convert.Report, width int) error {
	fmt.Fprintf(w, "\nerror on record (%s; lossy: blocks with a changed value):\n", convert.ReportName)
	cells := [][]string{{"group", "tensors", "max abs", "rel fro", "SQNR dB", "lossy"}}
	for _, e := range append(slices.Clone(r.Groups), r.Total) {
		key := termtext.Name(e.Group)
		if e.Group == "" {
			key = "total"
		}
		cells = append(cells, []string{key, termtext.Int(e.Tensors), sci(e.MaxAbsError), optSci(e.RelFro), sqnr(e), termtext.Int(e.LossyBlocks)})
	}
	return fitTable(w, cells, 1, width)
}

func sci(v float64) string { return strconv.FormatFloat(v, 'e', 2, 64) }

func optSci(v *float64) string {
	if v == nil {
		return "-"
	}
	return sci(*v)
}

// sqnr is the entry's SQNR in dB, "lossless" when the error is zero, "-"
// where it is undefined (an all-zero source).
func sqnr(e convert.ReportEntry) string {
	switch {
	case e.SQNR != nil:
		return strconv.FormatFloat(*e.SQNR, 'f', 2, 64)
	case e.Lossless:
		return "lossless"
	}
	return "-"
}
