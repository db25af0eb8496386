package inspect

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/layout"
)

// TestTextFits renders the report of every built-in layout, with the recipe
// and the memory steps: no line passes TextWidth columns, the components left
// out are named under "other", and --wide gives every component a column.
func TestTextFits(t *testing.T) {
	dir := tinyReplica(t)
	for _, name := range layout.Names() {
		rep, err := Inspect(dir, Options{Recipe: DefaultRecipe, Layout: name, Steps: true})
		if err != nil {
			t.Logf("%s does not fit the tiny replica: %.200v", name, err)
			continue
		}
		var narrow, wide bytes.Buffer
		must(t, WriteText(&narrow, rep, TextOptions{}))
		must(t, WriteText(&wide, rep, TextOptions{Wide: true}))
		for i, line := range strings.Split(narrow.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > TextWidth {
				t.Errorf("%s: line %d is %d columns: %s", name, i+1, n, line)
			}
		}
		// Every component the layout places is a column of the wide table.
		header := ""
		for _, line := range strings.Split(wide.String(), "\n") {
			if strings.HasPrefix(line, "│ rank") {
				header = line
				break
			}
		}
		for _, c := range rep.Layout.Ranks[0].Components {
			if !strings.Contains(header, " "+c.Key+" ") {
				t.Errorf("%s --wide: rank table lacks column %s: %s", name, c.Key, header)
			}
		}
		if s := narrow.String(); strings.Contains(s, "│ other │") != strings.Contains(s, "\nother: ") {
			t.Errorf("%s: an 'other' column without the list of what it holds:\n%s", name, s)
		}
	}
}

// TestRecipeSideBySide: with --recipe the component and dtype tables show
// before and after in one row each, and are not printed twice.
func TestRecipeSideBySide(t *testing.T) {
	rep, err := Inspect(tinyReplica(t), Options{Recipe: DefaultRecipe})
	must(t, err)
	var buf bytes.Buffer
	must(t, WriteText(&buf, rep, TextOptions{}))
	s := buf.String()
	if n := strings.Count(s, "│ routed_experts "); n != 1 {
		t.Errorf("routed_experts appears in %d tables, want 1 (before → after):\n%s", n, s)
	}
	var kda Row
	for _, c := range rep.Components {
		if c.Key == "attention.kda" {
			kda = c
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "│ attention.kda ") {
			f := strings.Fields(strings.ReplaceAll(line, "│", " "))
			// name, tensors before, after, MiB before, after, change
			if len(f) != 6 || f[1] != commasOf(kda.Tensors) {
				t.Errorf("kda row %q: want 6 cells with 966 tensors before", line)
			}
		}
	}
}

func commasOf(n int64) string { return termtext.Int(n) }
