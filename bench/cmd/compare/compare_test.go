package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/bench/internal/harness"
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
		case processCPU() >= 0 && !(s.cpuPerOp > 0 && s.cpuPerOp < 1e6):
			t.Errorf("%s: %v µs of CPU per decision, want positive (and below a second)", r.name, s.cpuPerOp)
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

// TestTSVAndAB: -tsv appends a run's measurements, and -ab prints the
// medians of two such files side by side, with the ratios to evalsha
// taken round by round.
func TestTSVAndAB(t *testing.T) {
	cfg := defaultConfig()
	cfg.Goroutines, cfg.Keys, cfg.Only = []int{1}, []int{1}, []string{"core"}
	c := cell{goroutines: 1, keys: 1}
	core := cfg.selected()[1]
	// run writes one round in which evalsha made 2000 decisions in a
	// second on 30 ms of CPU, and core made ops on 20 ms.
	run := func(path string, ops int64) {
		rep := newReport(cfg, "addr", "7.0")
		rep.add(c, map[*row]*measurement{
			evalshaRow: {ops: 2000, elapsed: time.Second, mallocs: 16000, cpu: 30 * time.Millisecond, lat: new(harness.Hist)},
			core:       {ops: ops, elapsed: time.Second, mallocs: 7 * uint64(ops), cpu: 20 * time.Millisecond, lat: new(harness.Hist)},
		})
		if err := rep.appendTSV(path); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	oldPath, newPath := filepath.Join(dir, "old.tsv"), filepath.Join(dir, "new.tsv")
	for _, ops := range []int64{1000, 900, 1100} {
		run(oldPath, ops)
		run(newPath, ops*3/2)
	}
	before, err := readTSV(oldPath)
	if err != nil {
		t.Fatal(err)
	}
	k := abKey{keys: 1, goroutines: 1, row: "core"}
	if got, want := before.rounds(), 3; got != want {
		t.Errorf("rounds %d, want %d", got, want)
	}
	if got, want := before.median(k, "x_evalsha"), 0.5; got != want {
		t.Errorf("median × EVALSHA %v, want %v", got, want)
	}
	if got, want := before.median(k, "cpu_us/op"), 20.0; got != want {
		t.Errorf("median CPU µs/op %v, want %v", got, want)
	}
	if got, want := before.median(k, "cpu_x_evalsha"), 20.0/15; math.Abs(got-want) > 1e-4 {
		t.Errorf("median CPU × EVALSHA %v, want %v", got, want)
	}
	if got, want := before.median(k, "allocs/op"), 7.0; got != want {
		t.Errorf("median allocs/op %v, want %v", got, want)
	}

	var out bytes.Buffer
	if err := mainErr([]string{"-ab=" + oldPath + "," + newPath}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	// core: 0.50 of evalsha before, 0.75 after, 1.5 times; 20 µs of CPU
	// a decision before, 13.3 after.
	for _, want := range []string{"evalsha", "0.50 (0.45–0.55)", "0.75 (0.68–0.82)", "1.50", "20.0", "13.3", "1.33", "0.89", "1 000", "1 500"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-ab output lacks %q:\n%s", want, out.String())
		}
	}

	for _, bad := range []string{"round\tkeys\n1\t2\n", "1\t1\t1\tcore\n", "round\tkeys\tgoroutines\trow\tx_evalsha\n1\t1\t1\tcore\tfast\n", ""} {
		path := filepath.Join(dir, "bad.tsv")
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readTSV(path); err == nil {
			t.Errorf("readTSV(%q): no error", bad)
		}
	}
	if err := mainErr([]string{"-ab=" + oldPath}, &out, &bytes.Buffer{}); err == nil {
		t.Error("-ab with one file: no error")
	}
}
