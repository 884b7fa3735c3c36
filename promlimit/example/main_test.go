package main

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// TestMetrics serves the example over HTTP, logs in four times and says
// hello twice, then scrapes /metrics: the counts are exact, and the
// breaker is closed.
func TestMetrics(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	app, err := newApp(core.New(rdb), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)

	do := func(method, path string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	for i, want := range []int{200, 200, 200, 429} {
		if res := do(http.MethodPost, "/login"); res.StatusCode != want {
			t.Fatalf("login %d: %s, want %d", i+1, res.Status, want)
		}
	}
	for i := 0; i < 2; i++ {
		if res := do(http.MethodGet, "/hello"); res.StatusCode != http.StatusOK {
			t.Fatalf("hello: %s", res.Status)
		}
	}

	res := do(http.MethodGet, "/metrics")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	lines := map[string]bool{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		lines[sc.Text()] = true
	}
	for _, want := range []string{
		`redlimit_decisions_total{outcome="allowed",policy="login"} 3`,
		`redlimit_decisions_total{outcome="denied",policy="login"} 1`,
		`redlimit_decisions_total{outcome="allowed",policy="hello"} 2`,
		`redlimit_decisions_total{outcome="error",policy="hello"} 0`,
		`redlimit_decision_duration_seconds_count{policy="login"} 4`,
		`redlimit_decision_duration_seconds_count{policy="hello"} 2`,
		`redlimit_breaker_open{limiter="default"} 0`,
	} {
		if !lines[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestHelp: -h documents ADDR and REDIS_URL with their defaults, on
// stdout; a stray argument is an error.
func TestHelp(t *testing.T) {
	var stdout, stderr strings.Builder
	if code, exit := parseArgs([]string{"-h"}, &stdout, &stderr); !exit || code != 0 {
		t.Fatalf("-h: exit %v, code %d", exit, code)
	}
	for _, want := range []string{"ADDR", "localhost:8080", "REDIS_URL", "embedded miniredis", "/metrics"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("-h does not print %q:\n%s", want, &stdout)
		}
	}
	if code, exit := parseArgs([]string{"stray"}, io.Discard, &stderr); !exit || code != 2 {
		t.Errorf("a stray argument: exit %v, code %d, want 2", exit, code)
	}
	if _, exit := parseArgs(nil, io.Discard, io.Discard); exit {
		t.Error("no arguments: exits")
	}
}

// TestRedisDefault: without REDIS_URL, the example's Redis is an
// embedded miniredis.
func TestRedisDefault(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	rdb, where, stop, err := redisClient()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := rdb.Ping(t.Context()).Err(); err != nil || !strings.Contains(where, "miniredis") {
		t.Fatalf("ping %v, where %q", err, where)
	}
}
