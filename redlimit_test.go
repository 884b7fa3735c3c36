package redlimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/keyfunc"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// embedded returns a Limiter on a fresh miniredis with a still clock. Its
// client gives up on a refused connection at once, so that a decision made
// while the server is closed fails before the policy's timeout, instead of
// retrying in the background and landing after a Restart.
func embedded(t *testing.T) (*core.Limiter, *miniredis.Miniredis) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	return core.New(rdb, core.WithTimeout(10*time.Second)), m // generous, for -race
}

// mustPolicy builds a policy or fails the test.
func mustPolicy(t *testing.T, lim *core.Limiter, limit core.Limit, opts ...redlimit.Option) redlimit.Policy {
	t.Helper()
	p, err := redlimit.NewPolicy(lim, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serveRequest runs r through p to a handler that answers 200 "ok".
func serveRequest(p redlimit.Policy, r *http.Request) (redlimit.Decision, *httptest.ResponseRecorder) {
	w := httptest.NewRecorder()
	d := redlimit.Serve(p, w, r, func(w http.ResponseWriter, _ *http.Request) int {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok"))
		return http.StatusOK
	})
	return d, w
}

// decide sends GET / from remote through p.
func decide(p redlimit.Policy, remote string) (redlimit.Decision, *httptest.ResponseRecorder) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	return serveRequest(p, r)
}

// logTo returns a logger writing text lines to buf, debug level included.
func logTo(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestRetryAfterRounding: Retry-After and X-RateLimit-Reset are whole
// seconds rounded up; a sub-second wait is 1, never 0.
func TestRetryAfterRounding(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	for _, tt := range []struct {
		limit             core.Limit
		retryAfter, reset string
	}{
		{core.PerSecond(5), "1", "1"},                            // 200ms
		{core.Limit{Rate: 5, Period: 6 * time.Second}, "2", "6"}, // 1.2s
		{core.PerMinute(1), "60", "60"},
	} {
		p := mustPolicy(t, lim, tt.limit, redlimit.WithName("round-"+tt.limit.String()))
		for i := 0; i <= tt.limit.Rate; i++ {
			decide(p, "192.0.2.1:1")
		}
		d, w := decide(p, "192.0.2.1:1")
		if d.Status != http.StatusTooManyRequests || w.Header().Get("Retry-After") != tt.retryAfter || w.Header().Get("X-RateLimit-Reset") != tt.reset {
			t.Errorf("%v: status %d, Retry-After %q, Reset %q; want 429, %q, %q", tt.limit, d.Status,
				w.Header().Get("Retry-After"), w.Header().Get("X-RateLimit-Reset"), tt.retryAfter, tt.reset)
		}
	}
}

func TestNewPolicyErrors(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	for _, tt := range []struct {
		lim   *core.Limiter
		limit core.Limit
		opts  []redlimit.Option
		says  string
	}{
		{nil, core.PerSecond(1), nil, "create it with core.New"},
		{lim, core.Limit{}, nil, "rate 0 must be positive"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithCost(6)}, "cost 6 must be between 1 and the burst"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithCost(0)}, "cost 0"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithFailure(7)}, "unknown failure policy"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithRetryAfterJitter(-time.Second)}, "negative Retry-After jitter"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithPartitionKey([]byte("short"))}, "at least 16"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithName("é")}, "not printable ASCII"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithAlso(core.PerSecond(9))}, "would share state"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithHeaders(9)}, "unknown header profile"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithKey(nil)}, "WithKey(nil)"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithName(strings.Repeat("n", 300))}, "longer than 256"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithMaxCost(-1)}, "WithMaxCost(-1): want 0 (the default, 4294967295) to 4294967295"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithMaxCost(1 << 32)}, "WithMaxCost(4294967296)"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithCost(3), redlimit.WithMaxCost(2)}, "WithMaxCost(2) is below the cost of a request, 3"},
	} {
		_, err := redlimit.NewPolicy(tt.lim, tt.limit, tt.opts...)
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("NewPolicy: error %v, want one saying %q", err, tt.says)
		}
	}
}

// TestPolicyNames: a policy keeps its state under its name, its limits by
// default. Building the same policies again (a second router on one
// Limiter, a reload) never fails and finds the same state; two unnamed
// policies with the same limits share it; a global 100/m and a route's
// 5/m never do; a named policy keeps its state when its rate changes, an
// unnamed one starts afresh.
func TestPolicyNames(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var names []string
	observe := redlimit.WithObserver(func(_ *http.Request, d redlimit.Decision) { names = append(names, d.Policy) })
	l := core.Limit{Rate: 7, Period: 7 * time.Second}
	remaining := func(p redlimit.Policy) int {
		t.Helper()
		d, _ := decide(p, "192.0.2.1:1")
		if !d.Allowed() {
			t.Fatalf("denied: %+v", d)
		}
		return d.Result.Remaining
	}

	first := mustPolicy(t, lim, l, observe)
	again := mustPolicy(t, lim, l, observe) // the same router built twice
	if a, b := remaining(first), remaining(again); a != 6 || b != 5 {
		t.Fatalf("two unnamed 7/7s policies: remaining %d then %d, want 6 then 5 (one state)", a, b)
	}
	also := mustPolicy(t, lim, l, observe, redlimit.WithAlso(core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: time.Hour}))
	remaining(also)
	if got := strings.Join(names, " | "); got != "7/7s | 7/7s | 7/7s, 100/h fixed_window" {
		t.Fatalf("default names %q", got)
	}

	global, route := mustPolicy(t, lim, core.PerMinute(100)), mustPolicy(t, lim, core.PerMinute(5))
	if g, r := remaining(global), remaining(route); g != 99 || r != 4 {
		t.Fatalf("a global 100/m and a route's 5/m: remaining %d and %d, want 99 and 4 (apart)", g, r)
	}
	if r := remaining(mustPolicy(t, lim, core.PerMinute(6))); r != 5 {
		t.Fatalf("an unnamed policy whose rate changed: remaining %d, want a fresh 5", r)
	}

	named := mustPolicy(t, lim, core.PerMinute(5), redlimit.WithName("login"))
	remaining(named)
	remaining(named)
	if r := remaining(mustPolicy(t, lim, core.PerMinute(6), redlimit.WithName("login"))); r != 2 {
		t.Fatalf("a named policy whose rate changed to 6/m: remaining %d, want 2 (its state kept)", r)
	}
}

// TestFailLocalUntilRedisAnswers: with Redis gone the local limiter decides;
// when Redis is back, it decides again. (A limit that refills within a
// minute starts full in process; a longer one would admit only the
// outage's share: TestFailLocalQuota.)
func TestFailLocalUntilRedisAnswers(t *testing.T) {
	t.Parallel()
	lim, m := embedded(t)
	p := mustPolicy(t, lim, core.PerMinute(2), redlimit.WithFailure(redlimit.FailLocal))
	if d, _ := decide(p, "192.0.2.1:1"); d.Outcome != redlimit.OutcomeAllowed || !d.Allowed() {
		t.Fatalf("Redis up: %+v", d)
	}
	m.Close()
	for i, want := range []int{0, 0, http.StatusTooManyRequests} {
		d, _ := decide(p, "192.0.2.1:1")
		if d.Outcome != redlimit.OutcomeLocal || d.Status != want || d.Err == nil {
			t.Fatalf("Redis down, request %d: %+v, want a local decision with status %d", i, d, want)
		}
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	// Redis counted only the request it saw: one of two is left.
	d, _ := decide(p, "192.0.2.1:1")
	if d.Outcome != redlimit.OutcomeAllowed || d.Err != nil || !d.Allowed() || d.Result.Remaining != 0 {
		t.Fatalf("Redis back: %+v, want Redis's own decision: allowed, 0 remaining", d)
	}
}

// TestDefaultErrorLog: Redis errors are logged at most once a second, with
// the count of those left out.
func TestDefaultErrorLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithLogger(logTo(&buf)), core.WithBreaker(0))
	p := mustPolicy(t, lim, core.PerHour(1))
	m.Close()
	start := time.Now()
	for i := 0; i < 50; i++ {
		if d, _ := decide(p, "192.0.2.1:1"); !d.Allowed() || d.Err == nil {
			t.Fatalf("fail open: %+v", d)
		}
	}
	// One line, then at most one a second (each failed dial may take up to
	// the timeout, so the 50 errors can span seconds).
	lines := strings.Count(buf.String(), "rate limit decision failed")
	if most := int(time.Since(start)/time.Second) + 1; lines < 1 || lines > most {
		t.Fatalf("%d log lines for 50 errors in %v, want 1 to %d:\n%s", lines, time.Since(start), most, buf.String())
	}
	if !strings.Contains(buf.String(), "failure=fail-open") {
		t.Fatalf("log line lacks the failure policy: %s", buf.String())
	}
}

// TestClientGoneIsNotARedisError: a request whose client left before the
// decision is not logged as a Redis failure.
func TestClientGoneIsNotARedisError(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	p := mustPolicy(t, core.New(rdb, core.WithLogger(logTo(&buf))), core.PerHour(1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	d, w := serveRequest(p, r)
	if d.Status != http.StatusServiceUnavailable || w.Code != http.StatusServiceUnavailable || !errors.Is(d.Err, context.Canceled) || buf.Len() != 0 {
		t.Fatalf("decision %+v, answer %d, log %q; want 503 and nothing logged", d, w.Code, buf.String())
	}
}

// TestBodies: a request that does not pass gets a short JSON body that
// says why and when to come back, and never an error's details.
func TestBodies(t *testing.T) {
	t.Parallel()
	lim, m := embedded(t)
	p := mustPolicy(t, lim, core.Limit{Rate: 2, Period: 3 * time.Second}, redlimit.WithFailure(redlimit.FailClosed))
	decide(p, "192.0.2.1:1")
	decide(p, "192.0.2.1:1")
	for _, tt := range []struct {
		name, remote string
		status       int
		body         string
	}{
		{"denied", "192.0.2.1:1", 429, `{"error":"rate limit exceeded","retry_after":2}`},
		{"no key", "not an address", 400, `{"error":"request has no rate limit key"}`},
		{"Redis gone", "192.0.2.2:1", 503, `{"error":"rate limiter unavailable","retry_after":1}`},
	} {
		if tt.status == 503 {
			m.Close()
		}
		d, w := decide(p, tt.remote)
		if d.Status != tt.status || w.Code != tt.status || strings.TrimSpace(w.Body.String()) != tt.body ||
			w.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("%s: %d %q %q, want %d %q", tt.name, w.Code, w.Body.String(), w.Header().Get("Content-Type"), tt.status, tt.body)
		}
	}
}

// TestDefaultTimeout: a Redis that never answers costs a request the
// Limiter's timeout, core.DefaultTimeout unless set, and the failure policy
// decides.
func TestDefaultTimeout(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Silent(t), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	var buf bytes.Buffer
	p := mustPolicy(t, core.New(rdb, core.WithLogger(logTo(&buf))), core.PerHour(1), redlimit.WithFailure(redlimit.FailClosed))
	d, w := decide(p, "192.0.2.1:1")
	if d.Status != http.StatusServiceUnavailable || d.Outcome != redlimit.OutcomeError || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("silent Redis, fail closed: %+v %v", d, w.Header())
	}
	if !errors.Is(d.Err, context.DeadlineExceeded) || !strings.Contains(d.Err.Error(), "within "+core.DefaultTimeout.String()) {
		t.Fatalf("error %v, want a deadline of %v", d.Err, core.DefaultTimeout)
	}
	if !strings.Contains(buf.String(), "rate limit decision failed") {
		t.Fatalf("the error was not logged: %q", buf.String())
	}
}

// TestDryRunNeverBlocks: not for a denial, a missing key, or a Redis
// failure under FailClosed.
func TestDryRunNeverBlocks(t *testing.T) {
	t.Parallel()
	lim, m := embedded(t)
	p := mustPolicy(t, lim, core.PerHour(1), redlimit.WithDryRun(), redlimit.WithFailure(redlimit.FailClosed))
	decide(p, "192.0.2.1:1")
	if d, w := decide(p, "192.0.2.1:1"); !d.Allowed() || d.Outcome != redlimit.OutcomeDryRun || len(w.Header()) != 0 {
		t.Fatalf("over the limit: %+v %v, want a pass reported as a dry-run denial, no headers", d, w.Header())
	}
	if d, _ := decide(p, "not an address"); !d.Allowed() || d.Outcome != redlimit.OutcomeInvalid || !errors.Is(d.Err, keyfunc.ErrNoKey) {
		t.Fatalf("no key: %+v, want a pass", d)
	}
	m.Close()
	// Another client: the first one's denial is still in the deny cache,
	// which answers it without Redis.
	if d, w := decide(p, "192.0.2.2:1"); !d.Allowed() || d.Outcome != redlimit.OutcomeError || d.Err == nil || len(w.Header()) != 0 {
		t.Fatalf("Redis gone, fail closed: %+v %v, want a pass", d, w.Header())
	}
}

// TestLimitHeaderIsTheBurst: X-RateLimit-Limit is the limit's capacity (the
// burst), RateLimit-Policy's q its rate; a skipped request is marked so and
// gets no headers.
func TestLimitHeaderIsTheBurst(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	l := core.Limit{Rate: 10, Period: time.Second, Burst: 25}
	p := mustPolicy(t, lim, l, redlimit.WithName("burst"), redlimit.WithHeaders(redlimit.HeadersBoth),
		redlimit.WithSkip(func(r *http.Request) bool { return r.RemoteAddr == "192.0.2.9:1" }))
	_, w := decide(p, "192.0.2.1:1")
	if got := w.Header().Get("X-RateLimit-Limit"); got != "25" {
		t.Errorf("X-RateLimit-Limit %q, want the burst 25", got)
	}
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "24" {
		t.Errorf("X-RateLimit-Remaining %q, want 24", got)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"burst";q=10;w=1;redlimit-burst=25` {
		t.Errorf("RateLimit-Policy %q, want q=10 (the rate) and the burst as a vendor parameter", got)
	}
	if d, w := decide(p, "192.0.2.9:1"); d.Outcome != redlimit.OutcomeSkipped || !d.Allowed() || len(w.Header()) != 0 {
		t.Errorf("skipped request: %+v %v", d, w.Header())
	}
}

// TestOutcomes: every path of the request flow reports its one outcome to
// the observer, with the time the decision took.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	lim, m := embedded(t)
	var got []redlimit.Decision
	observe := redlimit.WithObserver(func(_ *http.Request, d redlimit.Decision) { got = append(got, d) })
	apiKey := redlimit.WithKey(keyfunc.Header("X-Api-Key"))
	send := func(p redlimit.Policy, key string) {
		r := httptest.NewRequest(http.MethodGet, "/skip-me", nil)
		if key != "" {
			r.Header.Set("X-Api-Key", key)
			r.URL.Path = "/"
		}
		serveRequest(p, r)
	}
	skip := redlimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/skip-me" && r.Header.Get("X-Api-Key") == "" })
	p := mustPolicy(t, lim, core.PerHour(1), redlimit.WithName("o"), observe, apiKey)
	send(p, "a") // allowed
	send(p, "a") // denied by Redis
	send(p, "a") // denied from the deny cache
	send(p, "")  // no key
	dry := mustPolicy(t, lim, core.PerHour(1), redlimit.WithName("dry"), observe, apiKey, redlimit.WithDryRun())
	send(dry, "b")
	send(dry, "b") // would deny
	skipped := mustPolicy(t, lim, core.PerHour(1), redlimit.WithName("skip"), observe, skip)
	send(skipped, "")
	local := mustPolicy(t, lim, core.PerHour(1), redlimit.WithName("local"), observe, apiKey,
		redlimit.WithFailure(redlimit.FailLocal))
	open := mustPolicy(t, lim, core.PerHour(1), redlimit.WithName("open"), observe, apiKey)
	m.Close()
	send(local, "c")
	send(open, "c")
	var outcomes []string
	for _, d := range got {
		outcomes = append(outcomes, string(d.Outcome))
		if d.Outcome != redlimit.OutcomeSkipped && d.Duration <= 0 {
			t.Errorf("%s: Duration %v, want measured", d.Outcome, d.Duration)
		}
	}
	want := "allowed denied denied_cached invalid allowed dry_run_denied skipped local error"
	if strings.Join(outcomes, " ") != want {
		t.Fatalf("outcomes %v, want %s", outcomes, want)
	}
}

// TestLogger: a policy logs to its Limiter's logger (core.WithLogger),
// every line with the policy's name; a dry run logs each would-be denial
// at debug level and at most one line a second at info level.
func TestLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithLogger(logTo(&buf)), core.WithTimeout(10*time.Second))
	p := mustPolicy(t, lim, core.PerHour(1), redlimit.WithName("dry"), redlimit.WithDryRun())
	for i := 0; i < 20; i++ {
		if d, _ := decide(p, "192.0.2.1:1"); !d.Allowed() {
			t.Fatalf("a dry run blocked: %+v", d)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var debug, info int
	for _, line := range lines {
		if !strings.Contains(line, "policy=dry") {
			t.Errorf("line without the policy: %s", line)
		}
		switch {
		case strings.Contains(line, "level=DEBUG"):
			debug++
		case strings.Contains(line, "level=INFO"):
			info++
		}
	}
	if debug != 19 || info != 1 {
		t.Fatalf("%d debug and %d info lines for 19 would-be denials, want 19 and 1:\n%s", debug, info, buf.String())
	}
}

// TestObserversCompose: every WithObserver of a policy sees every decision,
// in the order given.
func TestObserversCompose(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var calls []string
	p := mustPolicy(t, lim, core.PerHour(5), redlimit.WithName("two-observers"),
		redlimit.WithObserver(func(*http.Request, redlimit.Decision) { calls = append(calls, "first") }),
		redlimit.WithObserver(func(*http.Request, redlimit.Decision) { calls = append(calls, "second") }))
	decide(p, "192.0.2.1:1")
	decide(p, "192.0.2.1:1")
	if got := strings.Join(calls, " "); got != "first second first second" {
		t.Fatalf("observer calls %q", got)
	}
}

// TestDefaultMaxCost: WithMaxCost's default, 4294967295, is the largest
// cost a settlement takes, so a request charged it is settled, never
// refused; WithMaxCost and Budget.MaxCost take it, and not one more.
func TestDefaultMaxCost(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	ctx := context.Background()
	for cost, ok := range map[int]bool{1<<32 - 1: true, 1 << 32: false} {
		res, err := lim.Reserve(ctx, fmt.Sprint("max-cost-", cost), []core.Limit{core.PerHour(10)}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Settle(ctx, cost); (err == nil) != ok || !ok && !errors.Is(err, core.ErrInvalidCost) {
			t.Errorf("Settle(%d): %v; want it settled: %v", cost, err, ok)
		}
	}
	tokens := []core.Limit{{Rate: 100, Period: time.Hour, Unit: "tokens"}}
	for n, ok := range map[int]bool{1<<32 - 1: true, 1 << 32: false} {
		_, err := redlimit.NewPolicy(lim, core.PerSecond(5), redlimit.WithMaxCost(n))
		if (err == nil) != ok {
			t.Errorf("WithMaxCost(%d): %v; want it taken: %v", n, err, ok)
		}
		_, err = redlimit.NewPolicy(lim, core.PerSecond(5), redlimit.WithBudget(redlimit.Budget{Limits: tokens, MaxCost: n}))
		if (err == nil) != ok {
			t.Errorf("Budget.MaxCost %d: %v; want it taken: %v", n, err, ok)
		}
	}
	// Usage counts up to one above the most a request is charged, so that
	// its excess is logged, and never wraps.
	var u redlimit.Usage
	u.Add("tokens", 1)
	u.Add("tokens", math.MaxInt)
	u.Add("tokens", math.MaxInt)
	if n, _ := u.Used("tokens"); n != 1<<32 {
		t.Errorf("Used after adding past the maximum: %d, want %d", n, 1<<32)
	}
}

// TestHTTPOptionsWithoutHTTP: the options of an *http.Request meet a
// request of another protocol (ServeRequest) as documented: WithKey finds
// no key (400), WithSkip skips nothing, WithRequestLimits picks the
// policy's own limits, WithObserver and WithResponseCost get a nil
// request; none is asked with a nil request it would have to check.
func TestHTTPOptionsWithoutHTTP(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	call := redlimit.Request{Context: t.Context(), Method: http.MethodPost, Route: "/pkg.S/M", Path: "/pkg.S/M", Peer: "192.0.2.1:1234"}
	byPeer := redlimit.WithRequestKey(func(q redlimit.Request) (string, error) { return q.Peer, nil })
	asked := 0
	var observed []*http.Request
	var costs []int
	p := mustPolicy(t, lim, core.PerMinute(3), byPeer,
		redlimit.WithSkip(func(*http.Request) bool { asked++; return true }),
		redlimit.WithRequestLimits(func(*http.Request) ([]core.Limit, error) { asked++; return []core.Limit{core.PerMinute(1)}, nil }),
		redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) { observed = append(observed, r) }),
		redlimit.WithResponseCost(func(r *http.Request, status int, h http.Header) int {
			if r != nil || h != nil {
				t.Errorf("response cost of a call: request %v, header %v", r, h)
			}
			costs = append(costs, status)
			return 1
		}))
	md := map[string][]string{}
	d := redlimit.ServeRequest(p, call, md, func() int { return http.StatusTeapot })
	if d.Outcome != redlimit.OutcomeAllowed || d.Result.Limit != core.PerMinute(3) || md["x-ratelimit-remaining"][0] != "2" {
		t.Errorf("decision %+v, metadata %v: want the policy's own limit, not skipped", d, md)
	}
	if asked != 0 || len(observed) != 1 || observed[0] != nil || len(costs) != 1 || costs[0] != http.StatusTeapot {
		t.Errorf("asked %d, observed %v, costs %v", asked, observed, costs)
	}

	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	quiet := core.New(rdb, core.WithLogger(slog.New(slog.DiscardHandler)))
	httpKey := mustPolicy(t, quiet, core.PerMinute(3), redlimit.WithKey(keyfunc.IP()))
	d = redlimit.ServeRequest(httpKey, call, map[string][]string{}, func() int { t.Error("served"); return 200 })
	if d.Status != http.StatusBadRequest || !errors.Is(d.Err, keyfunc.ErrNoKey) {
		t.Errorf("a keyfunc.Func on a call: %d %v, want 400 wrapping keyfunc.ErrNoKey", d.Status, d.Err)
	}
}
