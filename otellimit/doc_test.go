package otellimit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestMetricsListed: the instruments are named once, by the *Name
// constants of otellimit.go, and every list of them says the same: the
// package documentation (what go doc otellimit shows) and
// docs/metrics.md's table.
func TestMetricsListed(t *testing.T) {
	t.Parallel()
	names, doc := constants(t, "otellimit.go")
	listed := regexp.MustCompile(`(?m)^\t(redlimit\.[a-z.]+) `).FindAllStringSubmatch(doc, -1)
	page, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	table := regexp.MustCompile("(?m)^\\| `redlimit_[a-z_]+\\{[a-z,]+\\}` [a-z]+ \\| `(redlimit\\.[a-z.]+)`").FindAllStringSubmatch(string(page), -1)
	for what, found := range map[string][][]string{"the package documentation": listed, "docs/metrics.md": table} {
		var got []string
		for _, m := range found {
			got = append(got, m[1])
		}
		if !slices.Equal(got, names) {
			t.Errorf("%s lists %q; the constants name %q, in this order", what, got, names)
		}
	}
}

// constants returns the metric names of the constants of file whose
// names end in "Name", in order, and the file's package documentation.
func constants(t *testing.T, file string) ([]string, string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, id := range v.Names {
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && strings.HasSuffix(id.Name, "Name") {
					if name, _ := strconv.Unquote(lit.Value); strings.HasPrefix(name, "redlimit") { // not the meter's
						names = append(names, name)
					}
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("no *Name constants in %s", file)
	}
	return names, f.Doc.Text()
}
