package inspect

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// WriteJSON writes the report as one indented JSON object.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report as human-readable tables: the --by grouping
// (components by default), dtypes, totals; then the quantization configs, the
// recipe what-if, the layout's ranks and stages, the memory steps and the warnings.
func WriteText(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s: %s files, %s tensors, %s bytes (%.2f GiB)\n", r.Source,
		commas(int64(len(r.Files))), commas(r.TensorCount), commas(r.TotalBytes), gib(r.TotalBytes))
	pct := 0.0
	if r.TotalBytes > 0 {
		pct = 100 * float64(r.BytesRead) / float64(r.TotalBytes)
	}
	fmt.Fprintf(bw, "read %s bytes of headers, index and config (%.4f%% of the data), no tensor data\n\n", commas(r.BytesRead), pct)

	groups := r.Groups
	if r.By == ByComponent {
		groups = r.Components
	}
	total := Sum{Tensors: r.TensorCount, Bytes: r.TotalBytes}
	if r.By == ByStage || r.By == ByRank {
		// Resident bytes under a layout: replicas count once per rank, dropped
		// tensors not at all, so the total is the rows' own.
		total = Sum{}
		for _, g := range groups {
			total.merge(g.Sum)
		}
	}
	if err := shareTable(bw, r.By.String(), groups, total); err != nil {
		return err
	}
	if r.By != ByDType {
		fmt.Fprintln(bw)
		rows := make([]Row, len(r.DTypes))
		for i, d := range r.DTypes {
			rows[i] = Row{Key: d.DType, Sum: d.Sum}
		}
		if err := shareTable(bw, "dtype", rows, Sum{Tensors: r.TensorCount, Bytes: r.TotalBytes}); err != nil {
			return err
		}
	}
	for _, q := range r.Quantization {
		where := q.File
		if q.Key != "" {
			where += " " + q.Key
		}
		fmt.Fprintf(bw, "\nquantization (%s):\n", where)
		for _, s := range q.Summary {
			fmt.Fprintf(bw, "  %s\n", s)
		}
	}
	if r.Recipe != nil {
		if err := recipeText(bw, r); err != nil {
			return err
		}
	}
	if r.Layout != nil {
		if err := layoutText(bw, r.Layout, r.Files); err != nil {
			return err
		}
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintln(bw, "\nwarnings:")
		for _, s := range r.Warnings {
			fmt.Fprintf(bw, "  %s\n", s)
		}
	}
	return bw.Flush()
}

// newTable is a boxed table with left-aligned text and right-aligned numbers
// (columns from numFrom on).
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
func shareTable(w io.Writer, key string, rows []Row, total Sum) error {
	t := newTable(w, 5, 1)
	t.Header(key, "tensors", "bytes", "GiB", "share")
	for _, r := range rows {
		if err := t.Append(r.Key, commas(r.Tensors), commas(r.Bytes), gibStr(r.Bytes), share(r.Bytes, total.Bytes)); err != nil {
			return err
		}
	}
	t.Footer("total", commas(total.Tensors), commas(total.Bytes), gibStr(total.Bytes), share(total.Bytes, total.Bytes))
	return t.Render()
}

func recipeText(w io.Writer, r *Report) error {
	rr := r.Recipe
	u := unitFor(max(r.TotalBytes, rr.TotalBytes))
	fmt.Fprintf(w, "\nrecipe %s (%s scales, experts %s): %s → %s %s (%+.2f %s), %s → %s tensors\n", rr.Name, rr.Format, rr.Experts,
		u.str(r.TotalBytes), u.str(rr.TotalBytes), u.name, u.of(rr.TotalBytes-r.TotalBytes), u.name, commas(r.TensorCount), commas(rr.TensorCount))
	for _, s := range rr.Splits {
		fmt.Fprintln(w, "warning: recipe", rr.Name, s)
	}
	after := map[string]Row{}
	for _, c := range rr.Components {
		after[c.Key] = c
	}
	t := newTable(w, 5, 1)
	t.Header("component", "tensors after", u.name+" before", u.name+" after", "change")
	seen := map[string]bool{}
	for _, c := range r.Components {
		seen[c.Key] = true
		a := after[c.Key]
		if err := t.Append(c.Key, commas(a.Tensors), u.str(c.Bytes), u.str(a.Bytes), fmt.Sprintf("%+.2f", u.of(a.Bytes-c.Bytes))); err != nil {
			return err
		}
	}
	for _, a := range rr.Components { // components only the output has
		if !seen[a.Key] {
			if err := t.Append(a.Key, commas(a.Tensors), u.str(0), u.str(a.Bytes), fmt.Sprintf("%+.2f", u.of(a.Bytes))); err != nil {
				return err
			}
		}
	}
	t.Footer("total", commas(rr.TensorCount), u.str(r.TotalBytes), u.str(rr.TotalBytes), fmt.Sprintf("%+.2f", u.of(rr.TotalBytes-r.TotalBytes)))
	if err := t.Render(); err != nil {
		return err
	}
	for _, d := range rr.DTypes {
		fmt.Fprintf(w, "  %-8s %12s tensors %10s %s\n", d.DType, commas(d.Tensors), u.str(d.Bytes), u.name)
	}
	return nil
}

// componentColumns is the union of components over rows, in the order of
// componentRows (the schema's, other last).
func componentColumns(lists ...[]Row) []string {
	var cols []string
	seen := map[string]bool{}
	for _, l := range lists {
		for _, r := range l {
			if !seen[r.Key] {
				seen[r.Key] = true
				cols = append(cols, r.Key)
			}
		}
	}
	slices.SortStableFunc(cols, func(a, b string) int { return componentRank(a) - componentRank(b) })
	return cols
}

func byKey(rows []Row) map[string]int64 {
	m := make(map[string]int64, len(rows))
	for _, r := range rows {
		m[r.Key] = r.Bytes
	}
	return m
}

func layoutText(w io.Writer, lr *LayoutReport, files []FileRow) error {
	fmt.Fprintf(w, "\nlayout %s", lr.Name)
	if lr.Recipe != "" {
		fmt.Fprintf(w, " on the %s output", lr.Recipe)
	}
	if o := lr.Options; o != nil {
		fmt.Fprintf(w, " (text only %v, weight shard %v, vocab TP %v", o.TextOnly, o.WeightShard, o.VocabTP)
		if len(o.PPPartition) > 0 {
			fmt.Fprintf(w, ", partition %s", joinInts(o.PPPartition))
		}
		fmt.Fprint(w, ")")
	}
	var largest int64
	for _, r := range lr.Ranks {
		largest = max(largest, r.Bytes)
	}
	for _, s := range lr.Stages {
		largest = max(largest, s.Bytes)
	}
	for _, s := range lr.Steps {
		largest = max(largest, s.Total)
	}
	u := unitFor(largest)
	fmt.Fprintf(w, ": %d ranks, %s per rank; %s %s dropped\n", len(lr.Ranks), u.name, u.str(lr.DroppedBytes), u.name)
	var lists [][]Row
	for _, r := range lr.Ranks {
		lists = append(lists, r.Components)
	}
	cols := componentColumns(lists...)
	t := newTable(w, 4+len(cols), 1)
	t.Header(append([]string{"rank", "stage", "tensors", u.name}, cols...))
	// Consecutive ranks holding the same amounts share a row ("0–15" under dp16).
	for i := 0; i < len(lr.Ranks); {
		r := lr.Ranks[i]
		j := i
		for j+1 < len(lr.Ranks) && sameHoldings(lr.Ranks[j+1], r) {
			j++
		}
		label := strconv.Itoa(r.Rank)
		if j > i {
			label += "–" + strconv.Itoa(lr.Ranks[j].Rank)
		}
		i = j + 1
		m := byKey(r.Components)
		row := []string{label, strconv.Itoa(r.Stage), commas(r.Tensors), u.str(r.Bytes)}
		for _, c := range cols {
			row = append(row, u.str(m[c]))
		}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if len(lr.Unaligned) > 0 {
		fmt.Fprintf(w, "%d FP8 weights are split across a 128 block; their scales stay replicated (first: %s)\n", len(lr.Unaligned), lr.Unaligned[0])
	}
	if len(lr.Stages) > 0 {
		fmt.Fprintln(w)
		pos := map[string]int{}
		for i, f := range files {
			pos[f.Path] = i + 1
		}
		t := newTable(w, 6, 3)
		t.Header("stage", "layers", "files opened (# in name order)", "files", "tensors", u.name)
		for _, s := range lr.Stages {
			if err := t.Append(strconv.Itoa(s.Stage), fmt.Sprintf("%d–%d", s.Layers[0], s.Layers[1]-1),
				fileRanges(s.Files, pos), strconv.Itoa(len(s.Files)), commas(s.Tensors), u.str(s.Bytes)); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if len(lr.Steps) > 0 {
		fmt.Fprintf(w, "\nper-rank weight memory, step by step (%s):\n", u.name)
		var lists [][]Row
		for _, s := range lr.Steps {
			lists = append(lists, s.Components)
		}
		cols := componentColumns(lists...)
		t := newTable(w, 5+len(cols), 1)
		t.Header(append([]string{"step", "rank", u.name, "saved", "sliced (full)"}, cols...))
		for i, s := range lr.Steps {
			saved := ""
			if i > 0 {
				saved = u.str(lr.Steps[i-1].Total - s.Total)
			}
			m := byKey(s.Components)
			row := []string{s.Label, strconv.Itoa(s.Rank), u.str(s.Total), saved, u.str(s.Sliced)}
			for _, c := range cols {
				row = append(row, u.str(m[c]))
			}
			if err := t.Append(row); err != nil {
				return err
			}
		}
		return t.Render()
	}
	return nil
}

// sameHoldings reports whether two ranks of one stage hold the same amounts.
func sameHoldings(a, b RankRow) bool {
	return a.Stage == b.Stage && a.Tensors == b.Tensors && a.Bytes == b.Bytes && slices.Equal(a.Components, b.Components)
}

// fileRanges shows a stage's files compactly by their 1-based place in the
// checkpoint's name-ordered file list ("#1–7, #94, #96"); for K3's shard
// names that is the shard number.
func fileRanges(files []string, pos map[string]int) string {
	nums := make([]int, 0, len(files))
	for _, f := range files {
		nums = append(nums, pos[f])
	}
	slices.Sort(nums)
	var parts []string
	for i := 0; i < len(nums); {
		j := i
		for j+1 < len(nums) && nums[j+1] == nums[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("#%d–%d", nums[i], nums[j]))
		} else {
			parts = append(parts, fmt.Sprintf("#%d", nums[i]))
		}
		i = j + 1
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func gibStr(b int64) string { return strconv.FormatFloat(gib(b), 'f', 2, 64) }

func share(b, total int64) string {
	if total == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(b)/float64(total), 'f', 1, 64) + "%"
}

// commas writes an integer with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
