package main

import (
	"context"
	"fmt"
	"net"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// testConfig has small limits, to reach them; keys and plans change in
// step 3 (sk-a moves to pro).
const testConfig = `{
  "keys": {"sk-a": "free", "sk-b": "pro", "sk-batch": "pro", "sk-g": "free"},
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

	// 5. sk-g (free) by HTTP and gRPC in turn, on the 4 instances: one
	// minute's 5 requests between them, then a denial by either; its
	// tokens are one budget too: a call that reports more than the month
	// has left puts the key in debt, and both protocols deny it.
	calls := grpcClients(t, gs)
	var seq []string
	for i := range 6 {
		if i%2 == 0 {
			seq = append(seq, "http:"+fmt.Sprint(send(t.Context(), "sk-g", "/v1/chat", 100)))
		} else {
			seq = append(seq, "grpc:"+calls(t.Context(), "sk-g", 100))
		}
	}
	want("sk-g, minute 1", strings.Join(seq, " "), "http:200 grpc:OK http:200 grpc:OK http:200 grpc:ResourceExhausted")
	want("sk-g's 6th by HTTP", fmt.Sprint(send(t.Context(), "sk-g", "/v1/chat", 100)), "429")
	now.Add(int64(time.Minute))
	want("sk-g, 600 tokens by gRPC (500 left this month)", calls(t.Context(), "sk-g", 600), "OK")
	want("sk-g in debt, by HTTP", fmt.Sprint(send(t.Context(), "sk-g", "/v1/chat", 1)), "429")
	want("sk-g in debt, by gRPC", calls(t.Context(), "sk-g", 1), "ResourceExhausted")
	want("an unknown key by gRPC", calls(t.Context(), "sk-nobody", 1), "Unauthenticated")

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
		"redlimit:*:{key:sk-g}:fixed_window:1m = 1",                                      // minute 2: the 600 tokens' call
		"redlimit:*:{key:sk-g}:fixed_window:calendar:Europe/Berlin:1month = 6",           // 3 by HTTP, 3 by gRPC
		"redlimit:*:{key:sk-g}:fixed_window:calendar:Europe/Berlin:1month:tokens = 1100", // 5 × 100 + 600
	} {
		if !strings.Contains(got+"\n", w+"\n") {
			t.Errorf("Redis holds\n%s\nwant the line %q", got, w)
		}
	}
}

// grpcClients serves each gateway's gRPC service on 127.0.0.1 and returns
// a function calling Chat on them in turn with an API key and max_tokens,
// which returns the call's status code.
func grpcClients(t *testing.T, gs []*Gateway) func(ctx context.Context, key string, tokens int64) string {
	var conns []*grpc.ClientConn
	for _, g := range gs {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := g.GRPCServer()
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns = append(conns, conn)
	}
	var next atomic.Int64
	return func(ctx context.Context, key string, tokens int64) string {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
		var reply wrapperspb.Int64Value
		err := conns[next.Add(1)%int64(len(conns))].Invoke(ctx, ChatMethod, wrapperspb.Int64(tokens), &reply)
		if err == nil && reply.GetValue() != tokens {
			t.Errorf("Chat(%d) replied %d", tokens, reply.GetValue())
		}
		return status.Code(err).String()
	}
}

// TestMetrics checks GET /metrics: HTTP requests and gRPC calls of one
// key, allowed and denied, under the catch-all's policy "*".
func TestMetrics(t *testing.T) {
	still := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	g, err := New(core.New(rdb, core.WithClock(func() time.Time { return still })), []byte(testConfig), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	call := grpcClients(t, []*Gateway{g})
	send := func(key string) int {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat", strings.NewReader(`{"max_tokens":10}`))
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w.Code
	}
	// sk-a (free, 5/m): 4 by HTTP, 3 by gRPC: 5 allowed, 2 denied, the
	// second by the Limiter's deny cache, without asking Redis.
	for range 4 {
		send("sk-a")
	}
	for range 3 {
		call(t.Context(), "sk-a", 10)
	}
	send("sk-nobody") // 401 before any decision: not counted
	w := httptest.NewRecorder()
	g.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", w.Code)
	}
	for _, line := range []string{
		`redlimit_decisions_total{outcome="allowed",policy="*"} 5`,
		`redlimit_decisions_total{outcome="denied",policy="*"} 1`,
		`redlimit_decisions_total{outcome="denied_cached",policy="*"} 1`,
		`redlimit_decisions_total{outcome="invalid",policy="*"} 0`,
		`redlimit_breaker_open{limiter="gateway"} 0`,
	} {
		if !strings.Contains(w.Body.String(), line+"\n") {
			t.Errorf("GET /metrics has no line %q:\n%s", line, grep(w.Body.String(), "redlimit_"))
		}
	}
}

// grep returns the lines of s that start with prefix.
func grep(s, prefix string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
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
