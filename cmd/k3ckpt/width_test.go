package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestOutputFitsColumns: the dry-run plan and the tables fit 80 columns
// when nothing says otherwise, and $COLUMNS when it is set (inspect's first
// line may be a long path alone). Under -short on the 16-layer replica.
func TestOutputFitsColumns(t *testing.T) {
	dir := shortReplica(t)
	dst := filepath.Join(t.TempDir(), "out")
	cases := [][]string{
		{"convert", dir, dst, "--dry-run"},
		{"convert", dir, dst, "--dry-run", "--recipe", "modelopt-k3", "--experts", "nvfp4"},
		{"convert", dir, dst, "--dry-run", "-v"},
		{"inspect", dir, "--layout", "dp16"},
		{"inspect", dir, "--layout", "pp16", "--by", "stage", "--recipe", "modelopt-k3"},
		{"inspect", dir, "--by", "file"},
	}
	outs := map[string]string{} // stdout by $COLUMNS and command line
	for _, cols := range []string{"", "100"} {
		t.Setenv("COLUMNS", cols)
		width := 80
		if cols != "" {
			width = 100
		}
		for _, args := range cases {
			out, errOut, code := k3(args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errOut)
			}
			outs[cols+" "+strings.Join(args, " ")] = out
			for i, line := range strings.Split(out, "\n") {
				n := utf8.RuneCountInString(line)
				if n <= width || i == 0 && args[0] == "inspect" {
					continue
				}
				t.Errorf("COLUMNS=%q %v: line %d is %d columns: %s", cols, args, i+1, n, line)
			}
			// Warnings (the engines' verdicts on stderr) wrap too.
			for i, line := range strings.Split(errOut, "\n") {
				if n := utf8.RuneCountInString(line); n > width {
					t.Errorf("COLUMNS=%q %v: stderr line %d is %d columns: %s", cols, args, i+1, n, line)
				}
			}
		}
	}
	// $COLUMNS decides whether the --by file table keeps its bytes column.
	hasBytes := func(out string) bool {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "│ file ") {
				return strings.Contains(line, " bytes ")
			}
		}
		return false
	}
	if out := outs["100 "+strings.Join(cases[5], " ")]; !hasBytes(out) {
		t.Errorf("COLUMNS=100: --by file table lacks the bytes column:\n%.400s", out)
	}
	t.Setenv("COLUMNS", "60")
	if out, _, _ := k3("inspect", dir, "--by", "file"); hasBytes(out) {
		t.Errorf("COLUMNS=60: --by file table has the bytes column:\n%.400s", out)
	}
	// The plan's file rows are GiB; -v gives the exact bytes.
	out := outs[" "+strings.Join(cases[0], " ")]
	if !strings.Contains(out, "source GiB") || strings.Contains(out, "source bytes") {
		t.Errorf("plan rows are not in GiB:\n%.400s", out)
	}
	if out = outs[" "+strings.Join(cases[2], " ")]; !strings.Contains(out, "source bytes") {
		t.Errorf("-v plan rows lack the exact bytes:\n%.400s", out)
	}
}

// TestLineWrapper: a summary line longer than the width wraps at spaces with
// its continuation indented; shorter lines and a line written in pieces
// pass through as they were.
func TestLineWrapper(t *testing.T) {
	var b strings.Builder
	w := &lineWrapper{w: &b, width: 20}
	fmt.Fprintf(w, "short line\n")
	fmt.Fprintf(w, "wrote 96 files")
	fmt.Fprintf(w, "; kept 3 files of an earlier run\n")
	want := "short line\nwrote 96 files; kept\n  3 files of an\n  earlier run\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}
