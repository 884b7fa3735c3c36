package main

import (
	"bytes"
	"context"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	if got, want := strings.Join(names, ","), "evalsha,core,http-redlimit,http-cost-stands,http-cost-refund,http-ulule"; got != want {
		t.Errorf("selected rows %s, want %s", got, want)
	}
	if !opts.markdown || len(cfg.Goroutines) != 2 || cfg.Keys[0] != 10 {
		t.Errorf("flags not read: %+v %+v", cfg, opts)
	}
	if cfg.poolSize() < 4 {
		t.Errorf("pool size %d below the goroutines", cfg.poolSize())
	}
	for _, bad := range [][]string{{"-only=nope"}, {"-goroutines=0"}, {"-keys=x"}, {"-rounds=0"}, {"extra"}} {
		if _, _, err := parseFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

// TestHist checks that quantiles are within a bucket's width.
func TestHist(t *testing.T) {
	var h hist
	for i := 1; i <= 10000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5000 * time.Microsecond}, {0.99, 9900 * time.Microsecond}, {1, 10000 * time.Microsecond}} {
		got := h.quantile(c.q)
		if math.Abs(float64(got-c.want)) > float64(c.want)/subBuckets {
			t.Errorf("quantile(%v) = %v, want %v within 1/%d", c.q, got, c.want, subBuckets)
		}
	}
	for ns := uint64(0); ns < 1<<20; ns += 7 {
		if i := bucketOf(ns); i < 0 || i >= len(h.counts) || i > 0 && bucketOf(ns-1) > i {
			t.Fatalf("bucketOf(%d) = %d: out of range or not monotonic", ns, i)
		}
	}
	var empty hist
	if empty.quantile(0.5) != 0 {
		t.Error("an empty histogram has a quantile")
	}
}

// TestStartRedis checks the program's own server: on loopback, answering,
// and gone after stop.
func TestStartRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv(redistest.RequireEnv) != "1" {
		t.Skipf("%s: %v", redistest.Missing, err)
	}
	addr, stop, err := startRedis("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Errorf("address %s is not on loopback", addr)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	stop()
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Error("the server still accepts connections after stop")
	}
}
