// Command surface prints the size of the module's API and code: exported
// names per package, in the whole module and in convert + layout, and the
// lines of non-test Go. Counts only; CI prints them.
//
// An exported name is what go doc lists for a package: its exported
// top-level functions, types, constants and variables, and the exported
// methods of its exported types. Methods of unexported types (an io.Reader
// that a function returns as an interface) are not part of the API and are
// not counted; neither are struct fields. By this count archive/zip has 40
// names (surface_test.go checks the count against go/doc).
//
//	go run ./scripts/surface
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	names := map[string]int{} // package directory -> exported names
	lines := 0
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines += bytes.Count(src, []byte("\n"))
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		names[filepath.ToSlash(dir)] += exported(f)
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "surface:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(names))
	total := 0
	for d, n := range names {
		dirs = append(dirs, d)
		total += n
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if names[d] > 0 {
			fmt.Printf("exported %-24s %4d\n", d, names[d])
		}
	}
	fmt.Printf("exported names, module:          %d\n", total)
	fmt.Printf("exported names, convert + layout: %d\n", names["convert"]+names["layout"])
	fmt.Printf("non-test Go lines:                %d\n", lines)
}

// exported counts f's exported top-level names and exported methods.
func exported(f *ast.File) int {
	n := 0
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && (d.Recv == nil || receiverExported(d.Recv.List[0].Type)) {
				n++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

// receiverExported reports whether a method's receiver type (T, *T, T[P]
// or *T[P, Q]) has an exported name.
func receiverExported(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
