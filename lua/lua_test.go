package lua

import (
	"strings"
	"testing"
)

// TestScriptsDocumented: every script opens with a comment naming its KEYS,
// its ARGV and its reply, and stays short enough to read in one screen.
func TestScriptsDocumented(t *testing.T) {
	t.Parallel()
	entries, err := files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := files.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		var header strings.Builder
		for _, line := range strings.Split(src, "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			header.WriteString(line + "\n")
		}
		h := header.String()
		if e.Name() != "prelude.lua" {
			for _, want := range []string{"KEYS", "Reply"} {
				if !strings.Contains(h, want) {
					t.Errorf("%s: the opening comment does not mention %s", e.Name(), want)
				}
			}
		}
		if !strings.Contains(h, "ARGV") {
			t.Errorf("%s: the opening comment does not mention ARGV", e.Name())
		}
		if n := strings.Count(src, "\n"); n > 100 {
			t.Errorf("%s: %d lines; keep scripts under 100", e.Name(), n)
		}
	}
}

// TestDecisionScripts: each decision script is the prelude and a body.
func TestDecisionScripts(t *testing.T) {
	t.Parallel()
	prelude := read("prelude")
	for _, name := range []string{"gcra", "token_bucket", "token_bucket_stepped", "fixed_window",
		"sliding_window", "sliding_log", "leaky_bucket"} {
		if src := Decision(name); !strings.HasPrefix(src, prelude) || len(src) == len(prelude) {
			t.Errorf("%s is not the prelude followed by a body", name)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Decision of an unknown script did not panic")
		}
	}()
	Decision("no_such_algorithm")
}
