package redlimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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

func decide(p *redlimit.Policy, remote string) (redlimit.Decision, *httptest.ResponseRecorder) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	return p.Decide(w, r), w
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
		p := redlimit.MustPolicy(lim, tt.limit, redlimit.WithName("round-"+tt.limit.String()))
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
		{nil, core.PerSecond(1), nil, "nil *core.Limiter"},
		{lim, core.Limit{}, nil, "rate 0 must be positive"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithCost(6)}, "cost 6 must be between 1 and the burst"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithCost(0)}, "cost 0"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithTimeout(-time.Second)}, "negative timeout"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithFailure(7)}, "unknown failure policy"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithFailure(redlimit.FailLocal), redlimit.WithLocalKeys(0)}, "WithLocalKeys(0)"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithHeaders(9)}, "unknown header profile"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithKey(nil)}, "WithKey(nil)"},
		{lim, core.PerSecond(5), []redlimit.Option{redlimit.WithName(strings.Repeat("n", 300))}, "longer than 256"},
	} {
		_, err := redlimit.NewPolicy(tt.lim, tt.limit, tt.opts...)
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("NewPolicy: error %v, want one saying %q", err, tt.says)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("MustPolicy with an invalid limit did not panic")
		}
	}()
	redlimit.MustPolicy(lim, core.Limit{})
}

// TestDefaultNames: a policy's default name is its limits, whatever else
// was built before it, so every instance of a service names it alike. Two
// policies of one Limiter that would share a name by default are an error
// telling to name them; explicit names may be shared on purpose.
func TestDefaultNames(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	l := core.Limit{Rate: 7, Period: 7 * time.Second}
	first := redlimit.MustPolicy(lim, l)
	if first.Name() != "7/7s" {
		t.Fatalf("default name %q, want 7/7s", first.Name())
	}
	also := redlimit.MustPolicy(lim, l, redlimit.WithAlso(core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: time.Hour}))
	if also.Name() != "7/7s, 100/h fixed_window" {
		t.Fatalf("default name with WithAlso %q", also.Name())
	}
	for _, opts := range [][]redlimit.Option{nil, {redlimit.WithName("7/7s")}} {
		_, err := redlimit.NewPolicy(lim, l, opts...)
		if err == nil || !strings.Contains(err.Error(), "WithName") {
			t.Fatalf("a second policy named 7/7s (%d options): %v, want an error telling to name it", len(opts), err)
		}
	}
	// Built in another order, or on another Limiter, the answer is the same.
	other, _ := embedded(t)
	if p := redlimit.MustPolicy(other, l); p.Name() != "7/7s" {
		t.Fatalf("on another Limiter: %q", p.Name())
	}
	a := redlimit.MustPolicy(lim, l, redlimit.WithName("shared-on-purpose"))
	b := redlimit.MustPolicy(lim, l, redlimit.WithName("shared-on-purpose"))
	if a.Name() != b.Name() {
		t.Fatalf("explicit names %q and %q differ", a.Name(), b.Name())
	}
	if _, err := redlimit.NewPolicy(lim, core.PerSecond(1), redlimit.WithName("é")); err == nil {
		t.Fatal("a name the RateLimit headers cannot carry was accepted")
	}
}

// TestFailLocalUntilRedisAnswers: with Redis gone the local limiter decides;
// when Redis is back, it decides again.
func TestFailLocalUntilRedisAnswers(t *testing.T) {
	t.Parallel()
	lim, m := embedded(t)
	p := redlimit.MustPolicy(lim, core.PerHour(2), redlimit.WithFailure(redlimit.FailLocal),
		redlimit.WithErrorHandler(func(*http.Request, error) {}))
	if d, _ := decide(p, "192.0.2.1:1"); d.Local || !d.Allowed() {
		t.Fatalf("Redis up: %+v", d)
	}
	m.Close()
	for i, want := range []int{0, 0, http.StatusTooManyRequests} {
		d, _ := decide(p, "192.0.2.1:1")
		if !d.Local || d.Status != want || d.Err == nil {
			t.Fatalf("Redis down, request %d: %+v, want a local decision with status %d", i, d, want)
		}
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	// Redis counted only the request it saw: one of two is left.
	d, _ := decide(p, "192.0.2.1:1")
	if d.Local || d.Err != nil || !d.Allowed() || d.Result.Remaining != 0 {
		t.Fatalf("Redis back: %+v, want Redis's own decision: allowed, 0 remaining", d)
	}
}

// TestFailLocalMemoryBounded: the local limiter keeps at most WithLocalKeys
// keys, so a flood of addresses during an outage cannot grow memory; a
// forgotten key starts afresh.
func TestFailLocalMemoryBounded(t *testing.T) {
	t.Parallel()
	lim, m := embedded(t)
	p := redlimit.MustPolicy(lim, core.PerHour(1), redlimit.WithFailure(redlimit.FailLocal),
		redlimit.WithLocalKeys(2), redlimit.WithErrorHandler(func(*http.Request, error) {}))
	m.Close()
	decide(p, "192.0.2.1:1")
	if d, _ := decide(p, "192.0.2.1:1"); d.Status != http.StatusTooManyRequests {
		t.Fatalf("second request of a 1/h limit: %+v", d)
	}
	for i := 2; i < 100; i++ {
		decide(p, fmt.Sprintf("192.0.2.%d:1", i))
	}
	if got := redlimit.LocalKeys(p); got > 2 {
		t.Fatalf("the local limiter holds %d keys, want at most 2", got)
	}
	if d, _ := decide(p, "192.0.2.1:1"); !d.Allowed() {
		t.Fatalf("a forgotten key: %+v, want a fresh allowance", d)
	}
}

// TestDefaultErrorLog: Redis errors are logged at most once a second, with
// the count of those left out.
func TestDefaultErrorLog(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	lim, m := embedded(t)
	p := redlimit.MustPolicy(lim, core.PerHour(1))
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
// decision is not reported as a Redis failure.
func TestClientGoneIsNotARedisError(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	reported := false
	p := redlimit.MustPolicy(lim, core.PerHour(1), redlimit.WithErrorHandler(func(*http.Request, error) { reported = true }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	d := p.Decide(httptest.NewRecorder(), r)
	if d.Status != http.StatusServiceUnavailable || reported {
		t.Fatalf("decision %+v, reported %v; want 503 and no report", d, reported)
	}
}

func TestDecisionBody(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    redlimit.Decision
		body string
	}{
		{redlimit.Decision{Status: 429, Result: core.Result{RetryAfter: 1500 * time.Millisecond}}, `{"error":"rate limit exceeded","retry_after":2}`},
		{redlimit.Decision{Status: 503, Err: errors.New("secret detail")}, `{"error":"rate limiter unavailable","retry_after":1}`},
		{redlimit.Decision{Status: 400, Err: keyfunc.ErrNoKey}, `{"error":"request has no rate limit key"}`},
	} {
		w := httptest.NewRecorder()
		redlimit.WriteBody(w, tt.d)
		if w.Code != tt.d.Status || strings.TrimSpace(w.Body.String()) != tt.body || w.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("WriteBody(%d): %d %q %q, want %q", tt.d.Status, w.Code, w.Body.String(), w.Header().Get("Content-Type"), tt.body)
		}
	}
}

// TestDefaultTimeout: without WithTimeout, a Redis that never answers costs
// a request DefaultTimeout, and the failure policy decides.
func TestDefaultTimeout(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Silent(t), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	var got error
	p := redlimit.MustPolicy(core.New(rdb), core.PerHour(1), redlimit.WithFailure(redlimit.FailClosed),
		redlimit.WithErrorHandler(func(_ *http.Request, err error) { got = err }))
	d, w := decide(p, "192.0.2.1:1")
	if d.Status != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("silent Redis, fail closed: %+v %v", d, w.Header())
	}
	if !errors.Is(got, context.DeadlineExceeded) || !strings.Contains(got.Error(), "within "+redlimit.DefaultTimeout.String()) {
		t.Fatalf("error %v, want a deadline of %v", got, redlimit.DefaultTimeout)
	}
}

// TestDryRunNeverBlocks: not for a denial, a missing key, or a Redis
// failure under FailClosed.
func TestDryRunNeverBlocks(t *testing.T) {
	t.Parallel()
	lim, m := embedded(t)
	p := redlimit.MustPolicy(lim, core.PerHour(1), redlimit.WithDryRun(), redlimit.WithFailure(redlimit.FailClosed),
		redlimit.WithErrorHandler(func(*http.Request, error) {}))
	decide(p, "192.0.2.1:1")
	if d, w := decide(p, "192.0.2.1:1"); !d.Allowed() || !d.DryRun || len(w.Header()) != 0 {
		t.Fatalf("over the limit: %+v %v, want a pass reported as a dry-run denial, no headers", d, w.Header())
	}
	if d, _ := decide(p, "not an address"); !d.Allowed() || !d.DryRun || !errors.Is(d.Err, keyfunc.ErrNoKey) {
		t.Fatalf("no key: %+v, want a pass", d)
	}
	m.Close()
	// Another client: the first one's denial is still in the deny cache,
	// which answers it without Redis.
	if d, w := decide(p, "192.0.2.2:1"); !d.Allowed() || d.Err == nil || len(w.Header()) != 0 {
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
	p := redlimit.MustPolicy(lim, l, redlimit.WithName("burst"), redlimit.WithHeaders(redlimit.HeadersBoth),
		redlimit.WithSkip(func(r *http.Request) bool { return r.RemoteAddr == "192.0.2.9:1" }))
	_, w := decide(p, "192.0.2.1:1")
	if got := w.Header().Get(redlimit.HeaderLimit); got != "25" {
		t.Errorf("X-RateLimit-Limit %q, want the burst 25", got)
	}
	if got := w.Header().Get(redlimit.HeaderRemaining); got != "24" {
		t.Errorf("X-RateLimit-Remaining %q, want 24", got)
	}
	if got := w.Header().Get(redlimit.HeaderPolicy); got != `"burst";q=10;w=1;redlimit-burst=25` {
		t.Errorf("RateLimit-Policy %q, want q=10 (the rate) and the burst as a vendor parameter", got)
	}
	if d, w := decide(p, "192.0.2.9:1"); !d.Skipped || !d.Allowed() || len(w.Header()) != 0 {
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
	quiet := redlimit.WithErrorHandler(func(*http.Request, error) {})
	apiKey := redlimit.WithKey(keyfunc.Header("X-Api-Key"))
	send := func(p *redlimit.Policy, key string) {
		r := httptest.NewRequest(http.MethodGet, "/skip-me", nil)
		if key != "" {
			r.Header.Set("X-Api-Key", key)
			r.URL.Path = "/"
		}
		p.Decide(httptest.NewRecorder(), r)
	}
	skip := redlimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/skip-me" && r.Header.Get("X-Api-Key") == "" })
	p := redlimit.MustPolicy(lim, core.PerHour(1), redlimit.WithName("o"), observe, apiKey, quiet)
	send(p, "a") // allowed
	send(p, "a") // denied by Redis
	send(p, "a") // denied from the deny cache
	send(p, "")  // no key
	dry := redlimit.MustPolicy(lim, core.PerHour(1), redlimit.WithName("dry"), observe, apiKey, redlimit.WithDryRun(), quiet)
	send(dry, "b")
	send(dry, "b") // would deny
	skipped := redlimit.MustPolicy(lim, core.PerHour(1), redlimit.WithName("skip"), observe, skip, quiet)
	send(skipped, "")
	local := redlimit.MustPolicy(lim, core.PerHour(1), redlimit.WithName("local"), observe, apiKey, quiet,
		redlimit.WithFailure(redlimit.FailLocal))
	open := redlimit.MustPolicy(lim, core.PerHour(1), redlimit.WithName("open"), observe, apiKey, quiet)
	m.Close()
	send(local, "c")
	send(open, "c")
	var outcomes []string
	for _, d := range got {
		outcomes = append(outcomes, string(d.Outcome()))
		if !d.Skipped && d.Duration <= 0 {
			t.Errorf("%s: Duration %v, want measured", d.Outcome(), d.Duration)
		}
	}
	want := "allowed denied denied_cached invalid allowed dry_run_denied skipped local error"
	if strings.Join(outcomes, " ") != want {
		t.Fatalf("outcomes %v, want %s", outcomes, want)
	}
}

// TestLogger: a policy logs to its WithLogger, every line with the policy's
// name; a dry run logs each would-be denial at debug level and at most one
// line a second at info level.
func TestLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lim, _ := embedded(t)
	p := redlimit.MustPolicy(lim, core.PerHour(1), redlimit.WithName("dry"), redlimit.WithDryRun(), redlimit.WithLogger(log))
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
	p := redlimit.MustPolicy(lim, core.PerHour(5), redlimit.WithName("two-observers"),
		redlimit.WithObserver(func(*http.Request, redlimit.Decision) { calls = append(calls, "first") }),
		redlimit.WithObserver(func(*http.Request, redlimit.Decision) { calls = append(calls, "second") }))
	decide(p, "192.0.2.1:1")
	decide(p, "192.0.2.1:1")
	if got := strings.Join(calls, " "); got != "first second first second" {
		t.Fatalf("observer calls %q", got)
	}
}
