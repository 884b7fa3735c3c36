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
		if n := strings.Count(src, "\n"); n > 120 {
			t.Errorf("%s: %d lines; keep scripts under 120", e.Name(), n)
		}
	}
}

// TestDecisionScripts: a decision script is first the prelude's first
// part (up to its "--- general ---" line), decide.lua's with the
// algorithms' fast paths (each file's "--- fast ---" section, an
// `if name == ...` block) in its quick, and one.lua's; then the rest of
// each: the prelude, meter.lua and the algorithms' files up to their
// "--- settle ---" line, each adding its entries to the table, decide.lua
// and one.lua. A batch script has the whole files and ends with settle.lua
// and batch.lua instead; a settlement script has the prelude's first part,
// the whole files without their fast paths, settle.lua and one_settle.lua.
func TestDecisionScripts(t *testing.T) {
	t.Parallel()
	cut := func(name, mark string) (string, string) { // the text before mark's line (with it) and after
		before, after, ok := strings.Cut(read(name), "\n"+mark)
		if !ok {
			return "", read(name)
		}
		return before + "\n", after
	}
	upToSettle := func(src string) string { before, _, _ := strings.Cut(src, "\n"+settleMark); return before + "\n" }
	preludeFirst, prelude := cut("prelude", generalMark)
	decideFirst, decide := cut("decide", generalMark)
	oneFirst, one := cut("one", generalMark)
	paths := func(names ...string) (fast, rest string) {
		for _, name := range names {
			head, after, ok := strings.Cut(read(name), "\n"+fastMark)
			if !ok { // no fast path
				rest += read(name)
				continue
			}
			path, general, _ := strings.Cut(after, "\n"+generalMark)
			fast += path + "\n"
			rest += head + "\n" + general
		}
		return fast, rest
	}
	if !strings.Contains(decideFirst, "\n"+pathsMark) {
		t.Fatal("decide.lua's quick has no line for the fast paths")
	}
	entry := regexp.MustCompile(`(?m)^algorithms\.(\w+) = \{args = \d+, decide = function\(key, cost, at, commit\)$`)
	settles := regexp.MustCompile(`(?m)^algorithms\.(\w+)\.settle = `)
	block := regexp.MustCompile(`(?m)^if name == '(\w+)' then$`)
	names := []string{"gcra", "token_bucket", "token_bucket_stepped", "fixed_window",
		"sliding_window", "sliding_log", "leaky_bucket", "concurrency"}
	fastNames := 0
	for _, name := range names {
		fast, rest := paths(name)
		first := preludeFirst + strings.Replace(decideFirst, pathsMark, fast, 1) + oneFirst
		want := first + prelude + upToSettle(read("meter")) + upToSettle(rest) + decide + one
		if got := Decision(name); got != want {
			t.Errorf("%s: the decision script is not laid out as the test expects", name)
		}
		found := entry.FindAllStringSubmatch(read(name), -1)
		if len(found) == 0 || found[0][1] != name {
			t.Errorf("%s.lua does not add algorithms.%s first: %v", name, name, found)
		}
		if !strings.Contains(read(name), "\n"+settleMark) {
			t.Errorf("%s.lua has no settle mark", name)
		}
		if fast != "" {
			fastNames++
			for _, m := range block.FindAllStringSubmatch(fast, -1) {
				if m[1] != name && m[1] != name+"_calendar" {
					t.Errorf("%s.lua's fast path takes the decisions of %s", name, m[1])
				}
			}
			if !block.MatchString(fast) {
				t.Errorf("%s.lua's fast path is not an `if name == ...` block", name)
			}
		}
	}
	if fastNames < 2 {
		t.Errorf("%d algorithms have a fast path, want gcra and fixed_window at least", fastNames)
	}
	all := Decision(names...)
	if got := len(entry.FindAllString(all, -1)); got != len(names)+2 { // leaky_bucket_shape and fixed_window_calendar too
		t.Errorf("the script of every algorithm has %d entries, want %d", got, len(names)+2)
	}
	if strings.Contains(all, settleMark) || settles.MatchString(all) || strings.Contains(all, "function refund(") ||
		strings.Contains(all, generalMark) || strings.Contains(all, fastMark) {
		t.Error("a decision script has what only settlements run, or a mark")
	}
	fast, rest := paths(names...)
	first := preludeFirst + strings.Replace(decideFirst, pathsMark, fast, 1)
	general := batchGeneral + prelude + read("meter") + rest + decide + read("settle") + "return decide, settle\nend\n"
	if batch := Batch(names...); batch != first+general+read("batch") {
		t.Error("the batch script is not the first parts, then general (the prelude, every whole file, decide.lua, settle.lua), then batch.lua")
	}
	settle := Settle(names...)
	if settle != preludeFirst+prelude+read("meter")+rest+read("settle")+read("one_settle") ||
		len(settles.FindAllString(settle, -1)) != len(names)+2 || block.MatchString(settle) {
		t.Errorf("the settlement script is not the prelude, every algorithm with its settle function, settle.lua and one_settle.lua")
	}
	defer func() {
		if recover() == nil {
			t.Error("Decision of an unknown script did not panic")
		}
	}()
	Decision("no_such_algorithm")
}
