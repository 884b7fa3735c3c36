package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// testConfig has small limits, to reach them; keys and plans change in
// step 3 (sk-a moves to pro).
const testConfig = `{
  "keys": {"sk-a": "free", "sk-b": "pro", "sk-batch": "pro"},
  "rules": {
    "*": "5/m fixed_window, 8/month calendar=Europe/Berlin, 100000/m fixed_window unit=tokens, 1000/month calendar=Europe/Berlin unit=tokens",
    "* tier=pro": "10/m fixed_window, 100/month calendar=Europe/Berlin, 100000/m fixed_window unit=tokens, 100000/month calendar=Europe/Berlin unit=tokens",
    "POST /v1/batches": "2 concurrent lease=10m"
  }
}`

// TestGateway runs the gateway as 4 instances (4 Limiters on 4 clients of
// one Redis), on miniredis and on redis-server, and checks the counts
// Redis keeps: requests and tokens per key, per minute and per month.
func TestGateway(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		addr := miniredis.RunT(t).Addr()
		gateway(t, func() *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) })
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Standalone(t)
		gateway(t, func() *redis.Client { return srv.Client(t) })
	})
}

func gateway(t *testing.T, newClient func() *redis.Client) {
	var now atomic.Int64
	now.Store(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	var gs []*Gateway
	for range 4 {
		rdb := newClient()
		t.Cleanup(func() { rdb.Close() })
		g, err := New(core.New(rdb, core.WithClock(clock), core.WithTimeout(10*time.Second)), []byte(testConfig), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	var next atomic.Int64
	send := func(ctx context.Context, key, path string, tokens int) int {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(fmt.Sprintf(`{"max_tokens":%d}`, tokens)))
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		gs[next.Add(1)%4].ServeHTTP(w, r)
		return w.Code
	}
	sendN := func(n int, key string, tokens int) string {
		var codes []string
		for range n {
			codes = append(codes, fmt.Sprint(send(t.Context(), key, "/v1/chat", tokens)))
		}
		return strings.Join(codes, " ")
	}
	want := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: %s, want %s", what, got, want)
		}
	}

	// 1. Concurrently, 40 requests of sk-b (pro, 10/m) on 4 instances:
	// exactly 10 pass.
	var wg sync.WaitGroup
	var passed atomic.Int64
	for range 40 {
		wg.Go(func() {
			if send(t.Context(), "sk-b", "/v1/chat", 100) == http.StatusOK {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	want("sk-b concurrently", fmt.Sprint(passed.Load()), "10")

	// 2. sk-a (free): 5 a minute, 8 a month, 100 tokens each.
	want("sk-a, minute 1", sendN(6, "sk-a", 100), "200 200 200 200 200 429")
	now.Add(int64(time.Minute))
	want("sk-a, minute 2", sendN(4, "sk-a", 100), "200 200 200 429")

	// 3. sk-a moves to pro on a reload of every instance: its month's 8
	// requests and 800 tokens stand, and the minute's 3 (10/m now).
	cfg := strings.Replace(testConfig, `"sk-a": "free"`, `"sk-a": "pro"`, 1)
	for _, g := range gs {
		if err := g.Reload([]byte(cfg)); err != nil {
			t.Fatal(err)
		}
	}
	want("sk-a as pro, minute 2", sendN(8, "sk-a", 200), "200 200 200 200 200 200 200 429")

	// 4. Batches: 2 in flight per key, across instances.
	release := make(chan struct{})
	ctx := context.WithValue(t.Context(), holdKey{}, release)
	var batches sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		batches.Go(func() { codes <- send(ctx, "sk-batch", "/v1/batches", 0) })
	}
	watcher := newClient()
	defer watcher.Close()
	deadline := time.Now().Add(10 * time.Second)
	for inFlight(t, watcher) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	want("a third batch", fmt.Sprint(send(t.Context(), "sk-batch", "/v1/batches", 0)), "429")
	close(release)
	batches.Wait()
	want("the 2 batches", fmt.Sprint(<-codes, <-codes), "200 200")
	want("a batch after", fmt.Sprint(send(t.Context(), "sk-batch", "/v1/batches", 0)), "200")

	// The counts Redis keeps, per key, limit and window.
	got := counts(t, newClient())
	for _, w := range []string{
		"redlimit:*:{key:sk-b}:fixed_window:1m = 10",                                     // requests this minute
		"redlimit:*:{key:sk-b}:fixed_window:calendar:Europe/Berlin:1month = 10",          // and this month
		"redlimit:*:{key:sk-b}:fixed_window:1m:tokens = 1000",                            // 10 × 100 tokens
		"redlimit:*:{key:sk-b}:fixed_window:calendar:Europe/Berlin:1month:tokens = 1000", //
		"redlimit:*:{key:sk-a}:fixed_window:1m = 10",                                     // minute 2: 3 as free, 7 as pro
		"redlimit:*:{key:sk-a}:fixed_window:calendar:Europe/Berlin:1month = 15",          // 8 as free, 7 as pro
		"redlimit:*:{key:sk-a}:fixed_window:1m:tokens = 1700",                            // 3 × 100 + 7 × 200
		"redlimit:*:{key:sk-a}:fixed_window:calendar:Europe/Berlin:1month:tokens = 2200", // 8 × 100 + 7 × 200
	} {
		if !strings.Contains(got+"\n", w+"\n") {
			t.Errorf("Redis holds\n%s\nwant the line %q", got, w)
		}
	}
}

// inFlight counts the batch slots held in Redis (a sorted set of leases).
func inFlight(t *testing.T, rdb *redis.Client) int64 {
	n, _ := rdb.ZCard(t.Context(), "redlimit:POST /v1/batches:{key:sk-batch}:concurrency:10m").Result()
	return n
}

// counts lists the fixed windows' counts in Redis, a line each.
func counts(t *testing.T, rdb *redis.Client) string {
	defer rdb.Close()
	keys, err := rdb.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	var lines []string
	for _, k := range keys {
		if !strings.Contains(k, "fixed_window") {
			continue
		}
		n, err := rdb.HGet(t.Context(), k, "n").Result()
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, k+" = "+n)
	}
	return strings.Join(lines, "\n")
}
