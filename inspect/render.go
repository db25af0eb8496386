package inspect

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// defaultTextWidth is the terminal width assumed when none is known.
const defaultTextWidth = 80

// WriteText writes the report as tables (the --by grouping, before → after with
// a recipe, dtypes, quantization configs, the layout's ranks, stages and memory
// steps) and the warnings, the checkpoint's control characters escaped. To fit
// width (0: 80; wide: none), the smallest components share an "other" column
// and byte counts leave the tables (only a longer path or name passes it).
func WriteText(w io.Writer, r *Report, width int, wide bool) error {
	bw := bufio.NewWriter(w)
	switch {
	case wide:
		width = math.MaxInt
	case width <= 0:
		width = defaultTextWidth
	}
	summary := fmt.Sprintf("%s, %s, %s bytes (%.2f GiB)",
		termtext.Plural(int64(len(r.Files)), "file", "files"), termtext.Plural(r.TensorCount, "tensor", "tensors"),
		termtext.Int(r.TotalBytes), gibUnit.of(r.TotalBytes))
	fmt.Fprintln(bw, headline(termtext.Name(r.Source), summary, width))
	pct := 0.0
	if r.TotalBytes > 0 {
		pct = 100 * float64(r.BytesRead) / float64(r.TotalBytes)
	}
	fmt.Fprintln(bw, termtext.Wrap(fmt.Sprintf("no tensor data read: %s bytes of headers, index and config (%.4f%% of the data)", termtext.Int(r.BytesRead), pct), width, "  "))

	if r.Recipe == nil || r.By != byComponent { // else side by side in recipeText
		if err := mainTables(bw, r, width); err != nil {
			return err
		}
	}
	if r.Recipe != nil {
		if err := recipeText(bw, r, width); err != nil {
			return err
		}
	}
	for _, q := range r.Quantization {
		where := strings.TrimSpace(q.File + " " + q.Key)
		listText(bw, fmt.Sprintf("quantization (%s)", termtext.Lines(where)), q.Summary, width)
	}
	if r.QuantReport != nil {
		if err := quantReportText(bw, r.QuantReport, width); err != nil {
			return err
		}
	}
	if r.Layout != nil {
		if err := layoutText(bw, r.Layout, r.Files, width); err != nil {
			return err
		}
	}
	if len(r.Warnings) > 0 {
		listText(bw, "warnings", r.Warnings, width)
	}
	return bw.Flush()
}

// listText writes a titled list, one wrapped item a line.
func listText(w io.Writer, title string, items []string, width int) {
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, s := range items {
		fmt.Fprintln(w, termtext.Wrap("  "+termtext.Lines(s), width, "    "))
	}
}

// headline is "source: summary", the summary on the next line if it would pass width.
func headline(source, summary string, width int) string {
	if textWidth(source)+2+textWidth(summary) <= width {
		return source + ": " + summary
	}
	return source + ":\n  " + summary
}

// mainTables writes the --by table and, unless it is the dtype table, the dtype table.
func mainTables(w io.Writer, r *Report, width int) error {
	fmt.Fprintln(w)
	total := tally{Tensors: r.TensorCount, Bytes: r.TotalBytes}
	if r.By == byStage || r.By == byRank {
		// Resident bytes count replicas once per rank and dropped tensors not at all.
		total = tally{}
		for _, g := range r.Groups {
			total.merge(g.tally)
		}
	}
	if err := shareTable(w, string(r.By), r.Groups, total, width); err != nil {
		return err
	}
	if r.By == byDType {
		return nil
	}
	fmt.Fprintln(w)
	return shareTable(w, "dtype", dtypeGroups(r.DTypes), tally{Tensors: r.TensorCount, Bytes: r.TotalBytes}, width)
}

// newTable is a boxed table, columns from numFrom on right-aligned.
func newTable(w io.Writer, cols, numFrom int) *tablewriter.Table {
	align := make(tw.Alignment, cols)
	for i := range align {
		align[i] = tw.AlignLeft
		if i >= numFrom {
			align[i] = tw.AlignRight
		}
	}
	return tablewriter.NewTable(w,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithFooterAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithRowAlignmentConfig(tw.CellAlignment{PerColumn: align}),
		tablewriter.WithFooterAlignmentConfig(tw.CellAlignment{PerColumn: align}),
		tablewriter.WithHeaderAlignmentConfig(tw.CellAlignment{PerColumn: align}),
	)
}

// shareTable renders key | tensors | bytes | GiB | share with a total line.
func shareTable(w io.Writer, key string, rows []row, total tally, width int) error {
	cells := make([][]string, 0, len(rows)+2)
	cells = append(cells, []string{key, "tensors", "bytes", "GiB", "share"})
	for _, r := range rows {
		cells = append(cells, []string{termtext.Name(r.Key), termtext.Int(r.Tensors), termtext.Int(r.Bytes), gibUnit.str(r.Bytes), share(r.Bytes, total.Bytes)})
	}
	cells = append(cells, []string{"total", termtext.Int(total.Tensors), termtext.Int(total.Bytes), gibUnit.str(total.Bytes), share(total.Bytes, total.Bytes)})
	return fitTable(w, cells, 2, width)
}

// fitTable renders cells (header, rows, footer), without column drop when the
// table would be wider than width.
func fitTable(w io.Writer, cells [][]string, drop, width int) error {
	if tableWidth(cellWidths(cells)) > width {
		for i, row := range cells {
			cells[i] = slices.Delete(row, drop, drop+1)
		}
	}
	t := newTable(w, len(cells[0]), 1)
	t.Header(cells[0])
	for _, row := range cells[1 : len(cells)-1] {
		if err := t.Append(row); err != nil {
			return err
		}
	}
	t.Footer(cells[len(cells)-1])
	return t.Render()
}

// cellWidths is the widest cell of every column.
func cellWidths(rows [][]string) []int {
	var ws []int
	for _, row := range rows {
		for i, c := range row {
			if i == len(ws) {
				ws = append(ws, 0)
			}
			ws[i] = max(ws[i], textWidth(c))
		}
	}
	return ws
}

// recipeText is the what-if of --recipe: totals, then components and dtypes before → after.
func recipeText(w io.Writer, r *Report, width int) error {
	rr := r.Recipe
	u := unitFor(max(r.TotalBytes, rr.TotalBytes))
	fmt.Fprintf(w, "\nrecipe %s (%s scales, experts %s), before → after:\n", rr.Name, rr.Format, rr.Experts)
	fmt.Fprintln(w, termtext.Wrap(fmt.Sprintf("  %s → %s %s (%+.2f %s), %s → %s tensors",
		u.str(r.TotalBytes), u.str(rr.TotalBytes), u.name, u.of(rr.TotalBytes-r.TotalBytes), u.name,
		termtext.Int(r.TensorCount), termtext.Int(rr.TensorCount)), width, "    "))
	for _, s := range rr.Splits {
		fmt.Fprintln(w, termtext.Wrap(termtext.Lines(fmt.Sprintf("warning: recipe %s %s", rr.Name, s)), width, "  "))
	}
	if err := beforeAfter(w, "component", u, r.Components, rr.Components, r.accounting, rr.accounting); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return beforeAfter(w, "dtype", u, dtypeGroups(r.DTypes), dtypeGroups(rr.DTypes), r.accounting, rr.accounting)
}

// beforeAfter renders key | tensors before | after | size before | after | change.
func beforeAfter(w io.Writer, key string, u unit, before, after []row, tb, ta accounting) error {
	am := map[string]tally{}
	for _, a := range after {
		am[a.Key] = a.tally
	}
	t := newTable(w, 6, 1)
	t.Header(key, "tensors before", "after", u.name+" before", "after", "change")
	cells := func(k string, b, a tally) []string {
		return []string{termtext.Name(k), termtext.Int(b.Tensors), termtext.Int(a.Tensors), u.str(b.Bytes), u.str(a.Bytes), fmt.Sprintf("%+.2f", u.of(a.Bytes-b.Bytes))}
	}
	for _, b := range before {
		if err := t.Append(cells(b.Key, b.tally, am[b.Key])); err != nil {
			return err
		}
		delete(am, b.Key)
	}
	for _, a := range after {
		if _, ok := am[a.Key]; ok {
			if err := t.Append(cells(a.Key, tally{}, a.tally)); err != nil {
				return err
			}
		}
	}
	t.Footer(cells("total", tally{Tensors: tb.TensorCount, Bytes: tb.TotalBytes}, tally{Tensors: ta.TensorCount, Bytes: ta.TotalBytes}))
	return t.Render()
}

func share(b, total int64) string {
	if total == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(b)/float64(total), 'f', 1, 64) + "%"
}
