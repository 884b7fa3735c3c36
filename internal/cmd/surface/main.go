// Command surface counts the exported identifiers of Go packages: top-level
// types, functions, constants and variables, and the exported methods of
// exported types (struct fields not counted), as a user of the package
// meets them in its documentation.
//
//	go run ./internal/cmd/surface ./core . ./keyfunc    # "./core 44" per line
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: surface DIR...")
		os.Exit(2)
	}
	for _, dir := range os.Args[1:] {
		n, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "surface:", err)
			os.Exit(1)
		}
		fmt.Printf("%s %d\n", dir, n)
	}
}

// count returns how many exported identifiers the package in dir has
// (its test files and a package main left out).
func count(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	fset := token.NewFileSet()
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return 0, err
		}
		if f.Name.Name == "main" {
			continue
		}
		for _, d := range f.Decls {
			n += exported(d)
		}
	}
	return n, nil
}

// exported counts the exported names a declaration adds.
func exported(d ast.Decl) int {
	n := 0
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Name.IsExported() && (d.Recv == nil || len(d.Recv.List) == 0 || receiverExported(d.Recv.List[0].Type)) {
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
	return n
}

func receiverExported(e ast.Expr) bool {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverExported(t.X)
	case *ast.IndexExpr:
		return receiverExported(t.X)
	case *ast.IndexListExpr:
		return receiverExported(t.X)
	case *ast.Ident:
		return t.IsExported()
	}
	return false
}
