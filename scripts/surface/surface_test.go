package main

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCountMatchesGoDoc checks the counter against go/doc, the standard
// library's reading of a package's API, on archive/zip (40 names in the Go
// release this module builds with) and on every package of this module.
func TestCountMatchesGoDoc(t *testing.T) {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	dirs := []string{filepath.Join(strings.TrimSpace(string(goroot)), "src", "archive", "zip")}
	err = filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, dir := range dirs {
		if seen[dir] {
			continue
		}
		seen[dir] = true
		fset := token.NewFileSet()
		var files []*ast.File
		ours := 0
		paths, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if f.Name.Name == "main" {
				continue
			}
			files = append(files, f)
			ours += exported(f)
		}
		if len(files) == 0 {
			continue
		}
		pkg, err := doc.NewFromFiles(fset, files, "example.com/"+filepath.Base(dir))
		if err != nil {
			t.Fatal(err)
		}
		want := len(pkg.Funcs) + names(pkg.Consts) + names(pkg.Vars)
		for _, typ := range pkg.Types {
			want += 1 + len(typ.Funcs) + len(typ.Methods) + names(typ.Consts) + names(typ.Vars)
		}
		if ours != want {
			t.Errorf("%s: counted %d exported names, go/doc lists %d", dir, ours, want)
		}
		if filepath.Base(dir) == "zip" && ours != 40 {
			t.Errorf("archive/zip: counted %d names, want 40", ours)
		}
	}
}

func names(vs []*doc.Value) int {
	n := 0
	for _, v := range vs {
		n += len(v.Names)
	}
	return n
}
