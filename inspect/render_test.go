package inspect

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
	"github.com/k3ckpt/k3ckpt/layout"
	"github.com/k3ckpt/k3ckpt/model"
)

// TestTextFits renders the report of every built-in layout, with the recipe
// and the memory steps, and each --by table: at the default 80 columns and
// at a given width, no line passes the width, the components left
// out are named under "other", and --wide gives every component a column.
// The checkpoint's path is set rather than taken from where the replica lies
// (TMPDIR), so that each of three paths is rendered: a short one keeps
// "path: summary" on one line; one that fits width only without the
// summary puts the summary indented on the next line; one longer than
// width is the only line allowed past it, on its own line as "path:".
// Whatever the path, the rest of the report is the same bytes. The reports
// are audits of the in-memory tiny checkpoint, which TestFakeIsTheReplica
// holds to be the tiny replica header for header: rendering is the subject,
// not reading.
func TestTextFits(t *testing.T) {
	t.Parallel()
	reports := map[string]*Report{} // per layout or --by, shared by both widths
	for _, width := range []int{defaultTextWidth, 100} {
		textFits(t, width, reports)
	}
}

func textFits(t *testing.T, width int, reports map[string]*Report) {
	fk := fakeOf(t, model.ScaleTiny)
	o := 0 // the width WriteText is given: 0 for its default
	if width != defaultTextWidth {
		o = width
	}
	short := "/ckpt/Kimi-K3"
	fitsAlone := "/" + strings.Repeat("d", width-2) // "path:" is width columns
	tooLong := "/" + strings.Repeat("long-directory/", 10) + "Kimi-K3"
	for _, name := range layout.Names() {
		rep, ok := reports[name]
		if !ok {
			var err error
			rep, err = audit(fakeHeaders(fk), "fake", Options{Recipe: defaultRecipe, Layout: name, Steps: true, By: byStage})
			if err != nil {
				t.Logf("%s does not fit the tiny replica: %.200v", name, err)
			}
			reports[name] = rep
		}
		if rep == nil {
			continue
		}
		summary := fmt.Sprintf("%s files, %s tensors, %s bytes (%.2f GiB)",
			termtext.Int(int64(len(rep.Files))), termtext.Int(rep.TensorCount), termtext.Int(rep.TotalBytes), gibUnit.of(rep.TotalBytes))
		if len(short)+2+len(summary) > width || len(fitsAlone)+2+len(summary) <= width {
			t.Fatalf("the paths do not test both sides of width: summary %q", summary)
		}
		var rest string // the report after its first line, rendered for the short path
		for _, src := range []string{short, fitsAlone, tooLong} {
			rep.Source = src
			var narrow bytes.Buffer
			must(t, WriteText(&narrow, rep, o, false))
			s := narrow.String()
			head := src + ": " + summary + "\n"
			if src != short {
				head = src + ":\n  " + summary + "\n"
			}
			if !strings.HasPrefix(s, head) {
				t.Errorf("%s, path of %d columns: report starts %.300q, want %q", name, len(src), s, head)
				continue
			}
			if src == short {
				rest = s[len(head):]
			} else if s[len(head):] != rest {
				t.Errorf("%s, path of %d columns: the report after its first line differs from the short path's", name, len(src))
			}
			for i, line := range strings.Split(s, "\n") {
				if n := utf8.RuneCountInString(line); n > width && (i != 0 || line != src+":") {
					t.Errorf("%s, path of %d columns: line %d is %d columns: %s", name, len(src), i+1, n, line)
				}
			}
		}
		var narrow, wide bytes.Buffer
		must(t, WriteText(&narrow, rep, o, false))
		must(t, WriteText(&wide, rep, 0, true))
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
	// Every grouping's table fits too; --by file leaves out the exact bytes.
	for _, by := range []groupBy{byComponent, byDType, byLayer, byFile} {
		key := "--by " + string(by)
		rep := reports[key]
		if rep == nil {
			rep = auditFake(t, fk, Options{By: by})
			reports[key] = rep
		}
		var buf bytes.Buffer
		must(t, WriteText(&buf, rep, o, false))
		for i, line := range strings.Split(buf.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > width && i != 0 {
				t.Errorf("--by %s at %d columns: line %d is %d columns: %s", by, width, i+1, n, line)
			}
		}
	}
}

// TestRecipeSideBySide: with --recipe the component and dtype tables show
// before and after in one row each, and are not printed twice.
func TestRecipeSideBySide(t *testing.T) {
	t.Parallel()
	rep, err := Inspect(tinyReplica(t), Options{Recipe: defaultRecipe})
	must(t, err)
	var buf bytes.Buffer
	must(t, WriteText(&buf, rep, 0, false))
	s := buf.String()
	if n := strings.Count(s, "│ routed_experts "); n != 1 {
		t.Errorf("routed_experts appears in %d tables, want 1 (before → after):\n%s", n, s)
	}
	var kda row
	for _, c := range rep.Components {
		if c.Key == "attention.kda" {
			kda = c
		}
	}
	if kda.Tensors == 0 {
		t.Fatalf("no attention.kda component with tensors in %+v", rep.Components)
	}
	rows := 0
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "│ attention.kda ") {
			rows++
			f := strings.Fields(strings.ReplaceAll(line, "│", " "))
			// name, tensors before, after, MiB before, after, change
			if len(f) != 6 || f[1] != commasOf(kda.Tensors) {
				t.Errorf("kda row %q: want 6 cells with %d tensors before", line, kda.Tensors)
			}
		}
	}
	if rows != 1 {
		t.Errorf("attention.kda has %d rows, want 1 (before → after):\n%s", rows, s)
	}
}

func commasOf(n int64) string { return termtext.Int(n) }

// TestShareTableNarrow: a table that would pass the width leaves out the
// bytes column (full-size shards: 15-digit byte counts), one that fits keeps it.
func TestShareTableNarrow(t *testing.T) {
	t.Parallel()
	rows := []row{{Key: "model-00002-of-000096.safetensors", tally: tally{5414, 16990911504}}}
	total := tally{497220, 1560860324864}
	for _, c := range []struct {
		width     int
		wantBytes bool
	}{{80, false}, {100, true}} {
		var buf bytes.Buffer
		must(t, shareTable(&buf, "file", rows, total, c.width))
		s := buf.String()
		if strings.Contains(s, "16,990,911,504") != c.wantBytes || strings.Contains(s, " bytes ") != c.wantBytes {
			t.Errorf("width %d: bytes column shown = %v, want %v:\n%s", c.width, !c.wantBytes, c.wantBytes, s)
		}
		for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
			if n := utf8.RuneCountInString(line); n > c.width {
				t.Errorf("width %d: line of %d columns: %s", c.width, n, line)
			}
		}
		if !strings.Contains(s, "15.82") {
			t.Errorf("width %d: GiB column lost:\n%s", c.width, s)
		}
	}
}
