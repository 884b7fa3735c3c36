package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/envoyrls"
)

// corpusResult is one case's answer in one mode.
type corpusResult struct {
	step      corpusStep
	got       string
	different []string
}

// TestCorpus runs the reference's corpus against redlimit-rls: with
// REDLIMIT_COMPAT=reference every answer must be the reference's; in
// redlimit's own mode (the default) the answers that differ, and how
// (docs/envoy.md says why each does, and which setting removes it), must
// be those testdata/corpus/default-mode.golden lists (go test -run
// TestCorpus -update rewrites it).
func TestCorpus(t *testing.T) {
	t.Parallel()
	blocks := loadCorpus(t)
	total, agreeRef, agreeDefault, onlyFields := 0, 0, 0, 0
	var golden []string
	for _, b := range blocks {
		for _, r := range runBlock(t, b, true) {
			total++
			if r.different == nil {
				agreeRef++
				continue
			}
			t.Errorf("%s (%s): reference mode answers\n got %s\nwant %s", r.step.id, r.step.source, r.got, r.step.want)
		}
		for _, r := range runBlock(t, b, false) {
			switch {
			case r.different == nil:
				agreeDefault++
			case strings.Join(r.different, ",") == "fields":
				onlyFields++
			}
			if r.different != nil {
				golden = append(golden, fmt.Sprintf("%s %s", r.step.id, strings.Join(r.different, ",")))
			}
		}
	}
	summary := fmt.Sprintf("# %d cases: REDLIMIT_COMPAT=reference agrees on %d; the default mode on %d, and on %d more but for the fields added (REDLIMIT_HEADERS=none removes them)",
		total, agreeRef, agreeDefault, onlyFields)
	t.Log(summary)
	if total < 300 {
		t.Errorf("%d cases: the corpus lost some?", total)
	}
	checkGolden(t, summary, golden)
}

// checkGolden compares the default mode's differences with the golden
// file, or rewrites it with -update.
func checkGolden(t *testing.T, summary string, lines []string) {
	path := filepath.Join(corpusDir, "default-mode.golden")
	text := "# The corpus cases whose answers differ in redlimit-rls's default mode\n" +
		"# (REDLIMIT_COMPAT unset), and how: answer (a code, limit, remaining count\n" +
		"# or error), reset (duration_until_reset), fields (the rate-limit fields\n" +
		"# added). docs/envoy.md says why. Written by go test -run TestCorpus -update.\n" +
		summary + "\n" + strings.Join(lines, "\n") + "\n"
	if *updateGolden {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestCorpus -update writes it)", err)
	}
	if string(b) != text {
		t.Errorf("the default mode's differences changed from %s (if on purpose, say why in docs/envoy.md and run go test -run TestCorpus -update):\n%s", path, lineDiff(string(b), text))
	}
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// testClock is a settable clock.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// runBlock serves a block's configuration with its settings, in the
// reference's mode or redlimit's, on a clock at corpusT0 and a fresh
// miniredis, and asks each of its cases in turn.
func runBlock(t *testing.T, b corpusBlock, reference bool) []corpusResult {
	t.Helper()
	env := append([]string{}, b.env...)
	if reference {
		env = append(env, "REDLIMIT_COMPAT=reference")
	}
	s, err := parse([]string{"-config", filepath.Join(corpusDir, b.config, "config")}, envOf(env), io.Discard)
	if err != nil {
		t.Fatalf("%s: %v", b.file, err)
	}
	opts, err := serverOptions(&s, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("%s: %v", b.file, err)
	}
	clk := &testClock{}
	clk.ns.Store(corpusT0.UnixNano())
	opts.Clock = clk.now
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	lopts := []core.Option{core.WithClock(clk.now), core.WithTimeout(10 * time.Second), core.WithPrefix(s.prefix)}
	if s.denyCacheKeys >= 0 {
		lopts = append(lopts, core.WithDenyCache(s.denyCacheKeys))
	}
	cfg, err := envoyrls.LoadConfig(s.config, envoyrls.ConfigOptions{MergeDomains: s.merge, AllFiles: true, IgnoreDotFiles: s.ignoreDotFiles})
	if err != nil {
		cfg = nil // served as the program serves it: no configuration loaded
	}
	srv, err := envoyrls.New(core.New(rdb, lopts...), cfg, opts)
	if err != nil {
		t.Fatalf("%s: %v", b.file, err)
	}
	var out []corpusResult
	for _, st := range b.steps {
		if st.at != "" {
			moveClock(t, clk, st)
			continue
		}
		resp, err := srv.ShouldRateLimit(context.Background(), st.req)
		got := answerString(resp, err, st.want)
		out = append(out, corpusResult{step: st, got: got, different: differences(got, st.want)})
	}
	return out
}

// moveClock moves the clock as an "at:" line says: by +DURATION, or to
// HH:MM:SS of corpusT0's day.
func moveClock(t *testing.T, clk *testClock, st corpusStep) {
	if d, ok := strings.CutPrefix(st.at, "+"); ok {
		dur, err := time.ParseDuration(d)
		if err != nil {
			t.Fatalf("%s: %v", st.id, err)
		}
		clk.ns.Add(int64(dur))
		return
	}
	tod, err := time.Parse("15:04:05", st.at)
	if err != nil {
		t.Fatalf("%s: %v", st.id, err)
	}
	day := corpusT0.Truncate(24 * time.Hour)
	clk.ns.Store(day.Add(time.Duration(tod.Hour())*time.Hour + time.Duration(tod.Minute())*time.Minute + time.Duration(tod.Second())*time.Second).UnixNano())
}
