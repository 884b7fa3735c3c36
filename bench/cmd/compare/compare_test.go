package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestCompareSmoke runs every row in one small cell, so that the program
// does not rot: each row must decide at a positive rate, without errors,
// and those that run scripts must show up in the server's statistics.
func TestCompareSmoke(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := defaultConfig()
	cfg.Duration, cfg.Warmup = 50*time.Millisecond, 10*time.Millisecond
	cfg.Goroutines, cfg.Keys = []int{2}, []int{1}
	rep, err := run(context.Background(), cfg, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c := cell{goroutines: 2, keys: 1}
	for _, r := range allRows {
		s, ok := rep.summarize(r, c)
		switch {
		case !ok:
			t.Errorf("%s: did not run", r.name)
		case !(s.rate > 0):
			t.Errorf("%s: rate %v, want positive", r.name, s.rate)
		case s.errors > 0:
			t.Errorf("%s: %d errors, first: %v", r.name, s.errors, s.firstErr)
		case !(s.ratio > 0):
			t.Errorf("%s: ratio to evalsha %v, want positive", r.name, s.ratio)
		case r.name == "http-cost-refund" && !(s.callsPerOp > 1 && s.callsPerOp < 2.5):
			t.Errorf("%s: %v script calls per request, want two or fewer: the decision, and the settlement", r.name, s.callsPerOp)
		case r.name != "deny-cache" && r.name != "http-cost-refund" && !(s.callsPerOp > 0 && s.callsPerOp < 1.5):
			t.Errorf("%s: %v script calls per decision, want one or fewer (a batch script call holds several)", r.name, s.callsPerOp)
		}
	}
	if rep.errors() != 0 {
		t.Errorf("report counts %d errors", rep.errors())
	}

	var text, md bytes.Buffer
	rep.writeText(&text)
	rep.writeMarkdown(&md)
	for _, r := range allRows {
		if !strings.Contains(text.String(), "  "+r.name+" ") {
			t.Errorf("text output lacks row %s:\n%s", r.name, text.String())
		}
		if !strings.Contains(md.String(), "| `"+r.name+"` |") {
			t.Errorf("markdown output lacks row %s:\n%s", r.name, md.String())
		}
	}
}

// TestOnlyAndFlags checks the command line and row selection.
func TestOnlyAndFlags(t *testing.T) {
	cfg, opts, err := parseFlags([]string{"-only=core,http", "-goroutines=1,4", "-keys=10", "-markdown"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range cfg.selected() {
		names = append(names, r.name)
	}
	if got, want := strings.Join(names, ","), "evalsha,core,http-redlimit,http-ctxtimeout,http-cost-stands,http-cost-refund,http-ulule"; got != want {
		t.Errorf("selected rows %s, want %s", got, want)
	}
	if !opts.markdown || len(cfg.Goroutines) != 2 || cfg.Keys[0] != 10 {
		t.Errorf("flags not read: %+v %+v", cfg, opts)
	}
	if cfg.poolSize() < 4 {
		t.Errorf("pool size %d below the goroutines", cfg.poolSize())
	}
	for _, bad := range [][]string{{"-only=nope"}, {"-goroutines=0"}, {"-keys=x"}, {"-rounds=0"}, {"-rate=-1"}, {"-rate=4294967296"}, {"extra"}} {
		if _, _, err := parseFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

// TestRate: -rate sets the throughput rows' limits (a million a second by
// default), every peer's as well as redlimit's: at 1 a second one hot key
// denies after its first event, which the rows count as wrong answers.
func TestRate(t *testing.T) {
	cfg, _, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil || cfg.rate() != 1_000_000 {
		t.Fatalf("default rate %d (%v), want 1000000", cfg.rate(), err)
	}
	if cfg, _, err = parseFlags([]string{"-rate=1", "-only=core,redis_rate,ulule"}, &bytes.Buffer{}); err != nil || cfg.rate() != 1 {
		t.Fatalf("-rate=1: %d, %v", cfg.rate(), err)
	}
	srv := redistest.Standalone(t)
	cfg.Duration, cfg.Warmup = 50*time.Millisecond, 10*time.Millisecond
	cfg.Goroutines, cfg.Keys = []int{1}, []int{1}
	rep, err := run(context.Background(), cfg, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"core", "redis_rate", "ulule"} {
		for _, r := range allRows {
			if r.name != name {
				continue
			}
			if s, ok := rep.summarize(r, cell{goroutines: 1, keys: 1}); !ok || s.errors+s.warmErrs == 0 {
				t.Errorf("%s at 1 a second: no denial counted (%+v, ran: %v)", name, s, ok)
			}
		}
	}
	var text bytes.Buffer
	rep.writeText(&text)
	if !strings.Contains(text.String(), "core.Limit{Rate: 1, Period: time.Second}") {
		t.Errorf("the heading does not name the rate:\n%s", text.String())
	}
}
