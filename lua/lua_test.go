package lua

import (
	"regexp"
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
		for _, want := range []string{"KEYS", "ARGV", "Reply"} {
			if !strings.Contains(header.String(), want) {
				t.Errorf("%s: the opening comment does not mention %s", e.Name(), want)
			}
		}
		if n := strings.Count(src, "\n"); n > 100 {
			t.Errorf("%s: %d lines; keep scripts under 100", e.Name(), n)
		}
	}
}

// TestDecisionScripts: a decision script is the prelude, the algorithms'
// files, each adding its entries to the table, decide.lua and one.lua; a
// batch script ends with settle.lua and batch.lua instead; a settlement
// script has settle.lua and one_settle.lua where a decision has decide.lua
// and one.lua.
func TestDecisionScripts(t *testing.T) {
	t.Parallel()
	prelude, decide := read("prelude"), read("decide")+read("one")
	entry := regexp.MustCompile(`(?m)^algorithms\.(\w+) = \{args = \d+, decide = function\(key, cost, at, commit\)$`)
	names := []string{"gcra", "token_bucket", "token_bucket_stepped", "fixed_window",
		"sliding_window", "sliding_log", "leaky_bucket", "concurrency"}
	for _, name := range names {
		src := Decision(name)
		if !strings.HasPrefix(src, prelude) || !strings.HasSuffix(src, decide) || len(src) == len(prelude)+len(decide) {
			t.Errorf("%s is not the prelude, a body, decide.lua and one.lua", name)
		}
		found := entry.FindAllStringSubmatch(read(name), -1)
		if len(found) == 0 || found[0][1] != name {
			t.Errorf("%s.lua does not add algorithms.%s first: %v", name, name, found)
		}
	}
	all := Decision(names...)
	if got := len(entry.FindAllString(all, -1)); got != len(names)+2 { // leaky_bucket_shape and fixed_window_calendar too
		t.Errorf("the script of every algorithm has %d entries, want %d", got, len(names)+1)
	}
	if batch := Batch(names...); !strings.HasSuffix(batch, read("decide")+read("settle")+read("batch")) ||
		strings.TrimSuffix(batch, read("settle")+read("batch")) != strings.TrimSuffix(all, read("one")) {
		t.Error("the batch script is not the script of every algorithm ending with settle.lua and batch.lua")
	}
	settle := Settle(names...)
	if !strings.HasPrefix(settle, prelude) || !strings.HasSuffix(settle, read("settle")+read("one_settle")) ||
		strings.Contains(settle, read("decide")) ||
		strings.Count(settle, "settle = ")-strings.Count(prelude, "settle = ") != len(names)+2 {
		t.Errorf("the settlement script is not the prelude, every algorithm with its settle function, settle.lua and one_settle.lua")
	}
	defer func() {
		if recover() == nil {
			t.Error("Decision of an unknown script did not panic")
		}
	}()
	Decision("no_such_algorithm")
}
