package redlimit_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocSnippets: every Go snippet in README.md and docs/ is code a test
// compiles and runs. A ```go block must follow a line
//
//	<!-- snippet: PATH -->
//
// naming a Go file of this repository (an Example function, an example
// program, a test): the block's lines, each trimmed of indentation, must
// stand in that file as consecutive lines, except where the block has a
// line "// ..." which skips any lines of the file. Since the file is built
// and run by the tests, the snippet cannot rot.
func TestDocSnippets(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, doc := range append([]string{"README.md"}, docs...) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range goBlocks(string(text)) {
			blocks++
			if b.source == "" {
				t.Errorf("%s:%d: a Go snippet without a <!-- snippet: PATH --> line before it", doc, b.line)
				continue
			}
			src, err := os.ReadFile(b.source)
			if err != nil {
				t.Errorf("%s:%d: %v", doc, b.line, err)
				continue
			}
			if !excerpt(b.lines, strings.Split(string(src), "\n")) {
				t.Errorf("%s:%d: this snippet does not stand in %s as written:\n%s", doc, b.line, b.source, strings.Join(b.lines, "\n"))
			}
		}
	}
	if blocks == 0 {
		t.Fatal("no Go snippets found")
	}
}

// block is a ```go block of a Markdown file.
type block struct {
	line   int    // of its opening fence
	source string // the file its snippet line names, or ""
	lines  []string
}

var snippetLine = regexp.MustCompile(`^<!-- snippet: (\S+) -->$`)

// goBlocks returns the ```go blocks of a Markdown text.
func goBlocks(text string) []block {
	var blocks []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		b := block{line: i + 1}
		for j := i - 1; j >= 0 && j >= i-2; j-- { // the snippet line, maybe a blank line between
			if m := snippetLine.FindStringSubmatch(strings.TrimSpace(lines[j])); m != nil {
				b.source = m[1]
				break
			}
		}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			b.lines = append(b.lines, lines[i])
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// excerpt reports whether snippet stands in src as consecutive lines,
// compared trimmed, blank lines of the snippet included, a "// ..." line
// of the snippet skipping any lines of src.
func excerpt(snippet, src []string) bool {
	var want []string
	for _, l := range snippet {
		want = append(want, strings.TrimSpace(l))
	}
	have := make([]string, len(src))
	for i, l := range src {
		have[i] = strings.TrimSpace(l)
	}
	for start := range have {
		if matchFrom(want, have[start:]) {
			return true
		}
	}
	return false
}

// matchFrom reports whether want matches the start of have.
func matchFrom(want, have []string) bool {
	for len(want) > 0 {
		if want[0] == "// ..." {
			want = want[1:]
			if len(want) == 0 {
				return true
			}
			for i := range have {
				if matchFrom(want, have[i:]) {
					return true
				}
			}
			return false
		}
		if len(have) == 0 || want[0] != have[0] {
			return false
		}
		want, have = want[1:], have[1:]
	}
	return true
}

// TestExcerpt: the snippet check itself refuses what is not in the file.
func TestExcerpt(t *testing.T) {
	t.Parallel()
	src := strings.Split("func f() {\n\ta := 1\n\tb := 2\n\n\treturn a + b\n}", "\n")
	for _, c := range []struct {
		snippet string
		ok      bool
	}{
		{"a := 1\nb := 2", true},
		{"  a := 1\n    b := 2", true},
		{"a := 1\n// ...\nreturn a + b", true},
		{"b := 2\na := 1", false},
		{"a := 1\nreturn a + b", false},
		{"a := 3", false},
		{"// ...\nc := 3", false},
	} {
		if got := excerpt(strings.Split(c.snippet, "\n"), src); got != c.ok {
			t.Errorf("%q: %v, want %v", c.snippet, got, c.ok)
		}
	}
}
