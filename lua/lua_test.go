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
// files up to their "--- settle ---" line, each adding its entries to the
// table, decide.lua and one.lua; a batch script has the whole files and
// ends with settle.lua and batch.lua instead; a settlement script has the
// whole files, settle.lua and one_settle.lua.
func TestDecisionScripts(t *testing.T) {
	t.Parallel()
	prelude, decide := read("prelude"), read("decide")+read("one")
	entry := regexp.MustCompile(`(?m)^algorithms\.(\w+) = \{args = \d+, decide = function\(key, cost, at, commit\)$`)
	settles := regexp.MustCompile(`(?m)^algorithms\.(\w+)\.settle = `)
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
		if !strings.Contains(read(name), "\n"+settleMark) {
			t.Errorf("%s.lua has no settle mark", name)
		}
	}
	all := Decision(names...)
	if got := len(entry.FindAllString(all, -1)); got != len(names)+2 { // leaky_bucket_shape and fixed_window_calendar too
		t.Errorf("the script of every algorithm has %d entries, want %d", got, len(names)+2)
	}
	if strings.Contains(all, settleMark) || settles.MatchString(all) || strings.Contains(all, "function refund(") {
		t.Error("a decision script has what only settlements run")
	}
	var whole strings.Builder
	whole.WriteString(prelude + read("meter"))
	for _, name := range names {
		whole.WriteString(read(name))
	}
	if batch := Batch(names...); batch != whole.String()+read("decide")+read("settle")+read("batch") {
		t.Error("the batch script is not the prelude, every whole file, decide.lua, settle.lua and batch.lua")
	}
	settle := Settle(names...)
	if settle != whole.String()+read("settle")+read("one_settle") ||
		len(settles.FindAllString(settle, -1)) != len(names)+2 {
		t.Errorf("the settlement script is not the prelude, every algorithm with its settle function, settle.lua and one_settle.lua")
	}
	defer func() {
		if recover() == nil {
			t.Error("Decision of an unknown script did not panic")
		}
	}()
	Decision("no_such_algorithm")
}
