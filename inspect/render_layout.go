package inspect

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// otherColumn holds, in a narrow table, the components that got no column.
const otherColumn = "other"

// compTable is a table of fixed columns and one column of bytes per component;
// narrow, it keeps the largest components that fit and sums the rest as "other".
type compTable struct {
	width int
	u     unit
	head  []string
	fixed [][]string
	vals  []map[string]int64
	cols  []string // every component seen (in schema order once chosen)
}

func (c *compTable) add(fixed []string, comps []row) {
	c.fixed = append(c.fixed, fixed)
	m := make(map[string]int64, len(comps))
	for _, r := range comps {
		m[r.Key] = r.Bytes
		if !slices.Contains(c.cols, r.Key) {
			c.cols = append(c.cols, r.Key)
		}
	}
	c.vals = append(c.vals, m)
}

// tableWidth is the printed width of a boxed table whose columns are ws wide.
func tableWidth(ws []int) int {
	n := 1
	for _, w := range ws {
		n += w + 3
	}
	return n
}

func textWidth(s string) int { return utf8.RuneCountInString(s) }

// colWidth is the widest cell of component column col (header included).
func (c *compTable) colWidth(col string) int {
	w := textWidth(col)
	for _, m := range c.vals {
		w = max(w, textWidth(c.u.str(m[col])))
	}
	return w
}

// choose returns the component columns to show (schema order) and whether
// an "other" column sums the rest.
func (c *compTable) choose() ([]string, bool) {
	slices.SortStableFunc(c.cols, func(a, b string) int { return componentRank(a) - componentRank(b) })
	fixed := tableWidth(cellWidths(append([][]string{c.head}, c.fixed...)))
	all := fixed
	for _, col := range c.cols {
		all += c.colWidth(col) + 3
	}
	if all <= c.width {
		return c.cols, false
	}
	// Largest components first, while they fit next to an "other" column.
	bySize := slices.Clone(c.cols)
	total := func(col string) int64 {
		var n int64
		for _, m := range c.vals {
			n += m[col]
		}
		return n
	}
	slices.SortStableFunc(bySize, func(a, b string) int { return cmp.Compare(total(b), total(a)) })
	var shown []string
	used := fixed
	for _, col := range bySize {
		try := append(slices.Clone(shown), col)
		if w := used + c.colWidth(col) + 3; w+c.otherWidth(try)+3 <= c.width {
			shown, used = try, w
		}
	}
	slices.SortStableFunc(shown, func(a, b string) int { return componentRank(a) - componentRank(b) })
	return shown, len(shown) < len(c.cols)
}

// otherWidth is the width of the "other" column when shown are the columns.
func (c *compTable) otherWidth(shown []string) int {
	w := len(otherColumn)
	for _, m := range c.vals {
		w = max(w, textWidth(c.u.str(c.rest(m, shown))))
	}
	return w
}

func (c *compTable) rest(m map[string]int64, shown []string) int64 {
	var n int64
	for k, v := range m {
		if !slices.Contains(shown, k) {
			n += v
		}
	}
	return n
}

func (c *compTable) render(w io.Writer) error {
	shown, other := c.choose()
	head := slices.Concat(c.head, shown)
	if other {
		head = append(head, otherColumn)
	}
	t := newTable(w, len(head), 1)
	t.Header(head)
	for i, fixed := range c.fixed {
		row := slices.Clone(fixed)
		for _, col := range shown {
			row = append(row, c.u.str(c.vals[i][col]))
		}
		if other {
			row = append(row, c.u.str(c.rest(c.vals[i], shown)))
		}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if other {
		var rest []string
		for _, col := range c.cols {
			if !slices.Contains(shown, col) {
				rest = append(rest, col)
			}
		}
		fmt.Fprintf(w, "%s: %s (--wide: a column each)\n", otherColumn, wrapList(rest, c.width-len(otherColumn)-24))
	}
	return nil
}

// wrapList joins names with ", ", breaking lines so none passes width.
func wrapList(names []string, width int) string {
	var b strings.Builder
	line := 0
	for i, n := range names {
		switch {
		case i == 0:
		case line+2+len(n) > width:
			b.WriteString(",\n  ")
			line = 2
		default:
			b.WriteString(", ")
			line += 2
		}
		b.WriteString(n)
		line += len(n)
	}
	return b.String()
}

func layoutText(w io.Writer, lr *layoutReport, files []fileRow, width int) error {
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
	head, what := "layout "+termtext.Name(lr.Name), lr.Recipe
	if lr.Experts != convert.ExpertsKeep {
		what = strings.TrimSpace(what + " --experts " + lr.Experts.String())
	}
	if what != "" {
		head += " on the " + what + " output"
	}
	head += fmt.Sprintf(": %s, %s per rank, %s %s dropped", termtext.Plural(int64(len(lr.Ranks)), "rank", "ranks"), u.name, u.str(lr.DroppedBytes), u.name)
	fmt.Fprintf(w, "\n%s\n", termtext.Wrap(head, width, "  "))
	if op := lr.Options; op != nil {
		onOff := map[bool]string{true: "on", false: "off"}
		fmt.Fprintf(w, "  text only %s, weight shard %s, vocab TP %s\n", onOff[op.TextOnly], onOff[op.WeightShard], onOff[op.VocabTP])
		if len(op.PPPartition) > 0 {
			fmt.Fprintf(w, "  partition %s\n", strings.Trim(strings.ReplaceAll(fmt.Sprint(op.PPPartition), " ", ","), "[]"))
		}
	}
	ranks := compTable{width: width, u: u, head: []string{"rank", "stage", "tensors", u.name}}
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
		ranks.add([]string{label, strconv.Itoa(r.Stage), termtext.Int(r.Tensors), u.str(r.Bytes)}, r.Components)
	}
	if err := ranks.render(w); err != nil {
		return err
	}
	if len(lr.Unaligned) > 0 {
		fmt.Fprintf(w, "%s split across a 128 block; their scales stay replicated\n%s\n",
			termtext.Plural(int64(len(lr.Unaligned)), "FP8 weight is", "FP8 weights are"), termtext.Wrap("  (first: "+termtext.Name(lr.Unaligned[0])+")", width, "    "))
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
				fileRanges(s.Files, pos), strconv.Itoa(len(s.Files)), termtext.Int(s.Tensors), u.str(s.Bytes)); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if len(lr.Steps) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%s\n", termtext.Wrap(fmt.Sprintf("per-rank weight memory, step by step (%s, the fullest rank at each step):", u.name), width, "  "))
	steps := compTable{width: width, u: u, head: []string{"step", "rank", u.name, "saved", "sliced (full)"}}
	for i, s := range lr.Steps {
		saved := ""
		if i > 0 {
			saved = u.str(lr.Steps[i-1].Total - s.Total)
		}
		steps.add([]string{s.Label, strconv.Itoa(s.Rank), u.str(s.Total), saved, u.str(s.Sliced)}, s.Components)
	}
	return steps.render(w)
}

// sameHoldings reports whether two ranks of one stage hold the same amounts.
func sameHoldings(a, b rankRow) bool {
	return a.Stage == b.Stage && a.Tensors == b.Tensors && a.Bytes == b.Bytes && slices.Equal(a.Components, b.Components)
}

// fileRanges shows a stage's files by their 1-based place in the name-ordered
// file list ("#1–7, #94, #96"): for K3's shards, the shard number.
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
