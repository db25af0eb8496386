package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// scripts/tuning.py takes each tuning out of a copy of the source by
// replacing one line of code; a rename here must not leave it patching
// nothing, or its side-by-side figures stop meaning what they say.
func TestTuningPatchesApply(t *testing.T) {
	root := filepath.Join("..", "..")
	py, err := os.ReadFile(filepath.Join(root, "scripts", "tuning.py"))
	if err != nil {
		t.Fatal(err)
	}
	lit := `"((?:[^"\\]|\\.)*)"`
	re := regexp.MustCompile(`\("([^"]+\.go)",\s*` + lit + `,\s*` + lit + `\)`)
	patches := re.FindAllStringSubmatch(string(py), -1)
	if len(patches) < 3 {
		t.Fatalf("scripts/tuning.py: %d patches found, want the collector's three", len(patches))
	}
	for _, p := range patches {
		file, err1 := strconv.Unquote(`"` + p[1] + `"`)
		old, err2 := strconv.Unquote(`"` + p[2] + `"`)
		if err1 != nil || err2 != nil {
			t.Fatalf("scripts/tuning.py: patch %s: not a plain string literal", p[0])
		}
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatalf("scripts/tuning.py patches %s: %v", file, err)
		}
		if n := strings.Count(string(src), old); n != 1 {
			t.Errorf("scripts/tuning.py: %s holds %q %d times, want once: update its PATCHES", file, old, n)
		}
	}
}
