package keyfunc

import (
	"slices"
	"testing"
)

// splitForward splits a Forwarded line into its elements reading from the
// start, as RFC 7239 and RFC 9110 define them: commas inside quoted
// strings, where a backslash escapes the next character, do not separate.
// It reports false when a quoted string is not closed.
func splitForward(line string) ([]string, bool) {
	var elements []string
	quoted, start := false, 0
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			elements = append(elements, line[start:i])
			start = i + 1
		}
	}
	if quoted {
		return nil, false
	}
	return append(elements, line[start:]), true
}

// splitBackward splits a line with lastElement, as the walk does, and
// returns its elements in order.
func splitBackward(line string) []string {
	var elements []string
	for rest := line; ; {
		before, e := lastElement(rest)
		elements = append(elements, e)
		if len(e) == len(rest) { // no comma left
			break
		}
		rest = before
	}
	slices.Reverse(elements)
	return elements
}

// TestLastElement: reading a line from its end finds the elements that
// reading it from the start finds.
func TestLastElement(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		line string
		want []string
	}{
		{"for=1.2.3.4", []string{"for=1.2.3.4"}},
		{"for=1.2.3.4, for=5.6.7.8", []string{"for=1.2.3.4", " for=5.6.7.8"}},
		{`for="a,b", by=c`, []string{`for="a,b"`, " by=c"}},
		{`for="a\",b", by=c`, []string{`for="a\",b"`, " by=c"}},
		{`for="a\\", by=c`, []string{`for="a\\"`, " by=c"}},
		{`for="a\\\",b", by=c`, []string{`for="a\\\",b"`, " by=c"}},
		{`for=",",for=","`, []string{`for=","`, `for=","`}},
		{",", []string{"", ""}},
		// Unclosed quotes: the line is read as ending outside a quoted
		// string, so what a proxy appended is found whatever is before it.
		{`x="a, by=c`, []string{`x="a`, " by=c"}},
		{`x="a, for=1.2.3.4`, []string{`x="a`, " for=1.2.3.4"}},
		{`x="a, for="[::1]:80"`, []string{`x="a`, ` for="[::1]:80"`}},
		{`x="a", for=1.2.3.4`, []string{`x="a"`, " for=1.2.3.4"}},
	} {
		if got := splitBackward(tt.line); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.line, got, tt.want)
		}
	}
}

// FuzzLastElement: for every line whose elements all parse, reading it
// from the end (lastElement) and from the start agree on the elements.
func FuzzLastElement(f *testing.F) {
	for _, seed := range []string{
		`for=1.2.3.4, for="[2001:db8::1]:80"`,
		`for="a\",b";by=c, for=_x`,
		`for="a\\", by="\\\""`,
		`;;, ,for=unknown`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		forward, ok := splitForward(line)
		if !ok {
			return
		}
		for _, e := range forward {
			if e = trimOWS(e); e == "" {
				continue
			}
			if _, ok := forwardedFor(e); !ok {
				return
			}
		}
		if backward := splitBackward(line); !slices.Equal(forward, backward) {
			t.Fatalf("%q: from the start %q, from the end %q", line, forward, backward)
		}
	})
}
