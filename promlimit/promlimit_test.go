package promlimit_test

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttp"
	"github.com/redlimit/redlimit/promlimit"
)

// limiter returns a Limiter on a miniredis of its own, with the Limiter
// options. Its client gives up on a refused connection at once, so that a
// decision made while the server is closed fails fast.
func limiter(t *testing.T, opts ...core.Option) (*core.Limiter, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	return core.New(rdb, append([]core.Option{core.WithTimeout(10 * time.Second), core.WithLogger(quiet)}, opts...)...), m
}

// scrape GETs the exposition at url and returns each sample's value by its
// name and labels as written: `redlimit_decisions_total{outcome="allowed",policy="api"}`.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("unparsable sample %q", line)
		}
		samples[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return samples
}

func decisions(policy string, o redlimit.Outcome) string {
	return `redlimit_decisions_total{outcome="` + string(o) + `",policy="` + policy + `"}`
}

func durationCount(policy string) string {
	return `redlimit_decision_duration_seconds_count{policy="` + policy + `"}`
}

func breakerOpen(limiter string) string { return `redlimit_breaker_open{limiter="` + limiter + `"}` }

func breakerOpens(limiter string) string {
	return `redlimit_breaker_opens_total{limiter="` + limiter + `"}`
}

var allOutcomes = []redlimit.Outcome{
	redlimit.OutcomeAllowed, redlimit.OutcomeDenied, redlimit.OutcomeCached, redlimit.OutcomeDryRun,
	redlimit.OutcomeLocal, redlimit.OutcomeError, redlimit.OutcomeInvalid, redlimit.OutcomeSkipped,
}

// checkCounts checks every outcome of policy (those not in want are 0) and
// its histogram's count: every decision but the skipped ones.
func checkCounts(t *testing.T, got map[string]float64, policy string, want map[redlimit.Outcome]int) {
	t.Helper()
	timed := 0
	for _, o := range allOutcomes {
		if g, w := got[decisions(policy, o)], float64(want[o]); g != w {
			t.Errorf("%s = %v, want %v", decisions(policy, o), g, w)
		}
		if o != redlimit.OutcomeSkipped {
			timed += want[o]
		}
	}
	if g, w := got[durationCount(policy)], float64(timed); g != w {
		t.Errorf("%s = %v, want %v", durationCount(policy), g, w)
	}
}

// send serves one request through h and returns the answer.
func send(h http.Handler, path, client string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestScrape sends a known sequence of requests through three policies on
// two Limiters and scrapes a promhttp server over HTTP: the counters by
// policy and outcome are exact, every outcome of a policy seen is exported
// (0 until it happens), the histogram counts every decision but the
// skipped one, and the breaker gauge of the Limiter whose Redis dies turns
// 1 once the breaker opens and back to 0 once Redis answers again, while
// its openings counter goes from 0 to 1 and stays there.
func TestScrape(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)

	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	mainLim, _ := limiter(t)
	fragileLim, fragileRedis := limiter(t, core.WithBreaker(10*time.Millisecond))
	for name, lim := range map[string]*core.Limiter{"main": mainLim, "fragile": fragileLim} {
		if err := metrics.WatchLimiter(lim, name); err != nil {
			t.Fatal(err)
		}
	}
	api := nethttp.New(mainLim, core.PerMinute(3), redlimit.WithName("api"), metrics.Observer(),
		redlimit.WithKey(keyfunc.Header("X-Client")),
		redlimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))(ok)
	shadow := nethttp.New(mainLim, core.PerMinute(1), redlimit.WithName("shadow"), metrics.Observer(),
		redlimit.WithDryRun())(ok)
	fragile := nethttp.New(fragileLim, core.PerMinute(1000), redlimit.WithName("fragile"), metrics.Observer())(ok)

	for i, tt := range []struct {
		h      http.Handler
		path   string
		client string
		status int
	}{
		{api, "/", "alice", http.StatusOK},
		{api, "/", "alice", http.StatusOK},
		{api, "/", "alice", http.StatusOK},
		{api, "/", "alice", http.StatusTooManyRequests}, // Redis denies
		{api, "/", "alice", http.StatusTooManyRequests}, // the deny cache does
		{api, "/", "", http.StatusBadRequest},           // no key
		{api, "/healthz", "", http.StatusOK},            // skipped
		{shadow, "/", "", http.StatusOK},
		{shadow, "/", "", http.StatusOK}, // would have been denied
		{fragile, "/", "", http.StatusOK},
	} {
		if w := send(tt.h, tt.path, tt.client); w.Code != tt.status {
			t.Fatalf("request %d: %d, want %d", i, w.Code, tt.status)
		}
	}
	fragileRedis.Close()
	if w := send(fragile, "/", ""); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Limit") != "" {
		t.Fatalf("Redis down, FailOpen: %d %v, want 200 without rate-limit headers", w.Code, w.Header())
	}

	got := scrape(t, srv.URL)
	checkCounts(t, got, "api", map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 3, redlimit.OutcomeDenied: 1,
		redlimit.OutcomeCached: 1, redlimit.OutcomeInvalid: 1, redlimit.OutcomeSkipped: 1})
	checkCounts(t, got, "shadow", map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 1, redlimit.OutcomeDryRun: 1})
	checkCounts(t, got, "fragile", map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 1, redlimit.OutcomeError: 1})
	for _, name := range []string{"main", "fragile"} {
		if v, ok := got[breakerOpen(name)]; !ok || v != 0 {
			t.Errorf("%s = %v (exported: %v), want 0", breakerOpen(name), v, ok)
		}
		if v, ok := got[breakerOpens(name)]; !ok || v != 0 {
			t.Errorf("%s = %v (exported: %v), want 0", breakerOpens(name), v, ok)
		}
	}

	// Keep deciding while Redis is down: the breaker opens after 10 ms and
	// BreakerMinFailures failures. Every answer is a fail-open pass.
	fragileWant := map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 1, redlimit.OutcomeError: 1}
	poll := func(what string, until float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for scrape(t, srv.URL)[breakerOpen("fragile")] != until {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s still not %v after 10 s", what, breakerOpen("fragile"), until)
			}
			w := send(fragile, "/", "")
			switch {
			case w.Code != http.StatusOK:
				t.Fatalf("%s: %d, want 200", what, w.Code)
			case w.Header().Get("X-RateLimit-Limit") != "": // Redis decided
				fragileWant[redlimit.OutcomeAllowed]++
			default:
				fragileWant[redlimit.OutcomeError]++
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	poll("Redis down", 1)
	got = scrape(t, srv.URL)
	checkCounts(t, got, "fragile", fragileWant)
	if got[breakerOpen("main")] != 0 {
		t.Errorf("%s = %v, want 0: its Redis is up", breakerOpen("main"), got[breakerOpen("main")])
	}
	for name, want := range map[string]float64{"main": 0, "fragile": 1} {
		if got[breakerOpens(name)] != want {
			t.Errorf("%s = %v with the breaker open, want %v", breakerOpens(name), got[breakerOpens(name)], want)
		}
	}

	// Redis returns: the Limiter's next probe (BreakerProbeInterval, in
	// the background) closes it, and Redis decides again.
	if err := fragileRedis.Restart(); err != nil {
		t.Fatal(err)
	}
	poll("Redis back", 0)
	if w := send(fragile, "/", ""); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Limit") == "" {
		t.Fatalf("with the breaker closed: %d %v, want Redis's decision", w.Code, w.Header())
	}
	fragileWant[redlimit.OutcomeAllowed]++
	got = scrape(t, srv.URL)
	checkCounts(t, got, "fragile", fragileWant)
	if got[breakerOpens("fragile")] != 1 {
		t.Errorf("%s = %v with the breaker closed again, want 1: a counter keeps the opening", breakerOpens("fragile"), got[breakerOpens("fragile")])
	}
	// What happened before is kept.
	checkCounts(t, got, "api", map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 3, redlimit.OutcomeDenied: 1,
		redlimit.OutcomeCached: 1, redlimit.OutcomeInvalid: 1, redlimit.OutcomeSkipped: 1})
}

// TestRules: a rules table's decisions are counted under each rule's
// pattern, the bounded name of its policy, never the request's path.
func TestRules(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := limiter(t)
	mw, err := nethttp.Rules(lim, redlimit.Rules{"GET /users/{id}": "1/m"}, metrics.Observer())
	if err != nil {
		t.Fatal(err)
	}
	app := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, path := range []string{"/users/1", "/users/2", "/users/3"} {
		send(app, path, "")
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	got := scrape(t, srv.URL)
	checkCounts(t, got, "GET /users/{id}", map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 1,
		redlimit.OutcomeDenied: 1, redlimit.OutcomeCached: 1})
	for name := range got {
		if strings.Contains(name, "/users/1") {
			t.Errorf("a series names a request path: %s", name)
		}
	}
}

// TestObserversCompose: a policy's observers each see every decision, the
// metrics' and one's own alike.
func TestObserversCompose(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := limiter(t)
	mine := 0
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	both := nethttp.New(lim, core.PerMinute(10), redlimit.WithName("both"), metrics.Observer(),
		redlimit.WithObserver(func(*http.Request, redlimit.Decision) { mine++ }))(ok)
	send(both, "/", "")
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	if mine != 1 {
		t.Errorf("own observer called %d times, want 1", mine)
	}
	checkCounts(t, scrape(t, srv.URL), "both", map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 1})
}

// TestOtherProtocols: Observer counts the decisions of requests of every
// protocol: a gRPC call, decided through redlimit.ServeRequest, has no
// *http.Request, and is counted under its policy as an HTTP request is.
func TestOtherProtocols(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := limiter(t)
	p, err := redlimit.NewPolicy(lim, core.PerMinute(1), redlimit.WithName("calls"), metrics.Observer(),
		redlimit.WithRequestKey(func(q redlimit.Request) (string, error) { return q.Peer, nil }))
	if err != nil {
		t.Fatal(err)
	}
	call := redlimit.Request{Context: t.Context(), Method: http.MethodPost, Route: "/pkg.S/M", Path: "/pkg.S/M", Peer: "192.0.2.1:1234"}
	for range 2 {
		redlimit.ServeRequest(p, call, map[string][]string{}, func() int { return http.StatusOK })
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	checkCounts(t, scrape(t, srv.URL), "calls", map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 1, redlimit.OutcomeDenied: 1})
}

// TestObserveAllocs: once a policy has been seen, observing a decision
// allocates nothing.
func TestObserveAllocs(t *testing.T) {
	metrics, err := promlimit.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	d := redlimit.Decision{Policy: "api", Outcome: redlimit.OutcomeAllowed, Duration: 300 * time.Microsecond}
	metrics.Observe(nil, d)
	if n := testing.AllocsPerRun(1000, func() { metrics.Observe(nil, d) }); n != 0 {
		t.Errorf("Observe allocates %v times, want 0", n)
	}
}

// TestErrors: constructor and WatchLimiter errors.
func TestErrors(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := promlimit.New(reg); err == nil {
		t.Error("a second Metrics in one registry was registered")
	}
	apps := prometheus.NewRegistry()
	for _, app := range []string{"a", "b"} {
		if _, err := promlimit.New(apps, promlimit.WithConstLabels(prometheus.Labels{"app": app})); err != nil {
			t.Errorf("Metrics of app %q: %v", app, err)
		}
	}
	if _, err := promlimit.New(nil, promlimit.WithBuckets(0.1, 0.01)); err == nil {
		t.Error("decreasing buckets were accepted")
	}
	if _, err := promlimit.New(nil, promlimit.WithBuckets()); err == nil {
		t.Error("no buckets were accepted")
	}
	lim, _ := limiter(t)
	if err := metrics.WatchLimiter(lim, "a"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		lim  *core.Limiter
		name string
	}{{lim, "a"}, {lim, ""}, {nil, "b"}} {
		if err := metrics.WatchLimiter(tt.lim, tt.name); err == nil {
			t.Errorf("WatchLimiter(%p, %q) succeeded", tt.lim, tt.name)
		}
	}
	for _, zero := range []*core.Limiter{nil, {}} { // its Stats would read nothing, for ever
		if err := metrics.WatchLimiter(zero, "z"); err == nil || !strings.Contains(err.Error(), "core.New") {
			t.Errorf("WatchLimiter(%p): %v; want refused, saying core.New", zero, err)
		}
	}
	// A nil registerer registers nothing; the Metrics is a Collector.
	unregistered, err := promlimit.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := prometheus.NewRegistry().Register(unregistered); err != nil {
		t.Errorf("registering by hand: %v", err)
	}
}

// TestDefaultBuckets: the documented bounds, from 100 µs to 1 s, fresh on
// every call.
func TestDefaultBuckets(t *testing.T) {
	t.Parallel()
	b := promlimit.DefaultBuckets()
	if b[0] != 0.0001 || b[len(b)-1] != 1 {
		t.Fatalf("DefaultBuckets() = %v, want 100 µs to 1 s", b)
	}
	b[0] = 42
	if promlimit.DefaultBuckets()[0] != 0.0001 {
		t.Fatal("DefaultBuckets shares its slice")
	}
}

// TestSettlementCounters: a Release that fails while Redis is away counts
// as a failed settlement; once Redis is back, the Limiter frees the slot
// in the background and the retried releases counter shows it; none is
// abandoned. Every watched Limiter exports the three counters from 0.
func TestSettlementCounters(t *testing.T) {
	t.Parallel()
	lim, m := limiter(t, core.WithTimeout(time.Second))
	reg := prometheus.NewRegistry()
	metrics, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := metrics.WatchLimiter(lim, "jobs"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	failed := `redlimit_settlements_failed_total{limiter="jobs"}`
	retried := `redlimit_releases_retried_total{limiter="jobs"}`
	abandoned := `redlimit_releases_abandoned_total{limiter="jobs"}`
	got := scrape(t, srv.URL)
	for _, name := range []string{failed, retried, abandoned} {
		if v, ok := got[name]; !ok || v != 0 {
			t.Errorf("%s = %v (exported: %v), want 0", name, v, ok)
		}
	}

	ctx := t.Context()
	r, err := lim.Reserve(ctx, "k", []core.Limit{{Algorithm: core.Concurrency, Rate: 1, Period: time.Minute}}, 1)
	if err != nil || !r.Result().Allowed {
		t.Fatalf("%+v, %v", r, err)
	}
	m.Close()
	if err := r.Release(ctx); err == nil {
		t.Fatal("a Release with Redis closed succeeded")
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for got = scrape(t, srv.URL); got[retried] == 0 && time.Now().Before(deadline); got = scrape(t, srv.URL) {
		time.Sleep(20 * time.Millisecond)
	}
	if got[failed] != 1 || got[retried] != 1 || got[abandoned] != 0 {
		t.Fatalf("%s = %v, %s = %v, %s = %v; want 1, 1, 0", failed, got[failed], retried, got[retried], abandoned, got[abandoned])
	}
}

// TestStateLosses: a FLUSHALL of the Limiter's Redis, seen by its check
// while decisions flow, counts once in redlimit_state_losses_total,
// exported from 0.
func TestStateLosses(t *testing.T) {
	t.Parallel()
	lim, m := limiter(t, core.WithLossCheck(10*time.Millisecond))
	reg := prometheus.NewRegistry()
	metrics, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := metrics.WatchLimiter(lim, "api"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	losses := `redlimit_state_losses_total{limiter="api"}`
	if v, ok := scrape(t, srv.URL)[losses]; !ok || v != 0 {
		t.Fatalf("%s = %v (exported: %v), want 0", losses, v, ok)
	}
	ctx := t.Context()
	decideUntil := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; !done(); i++ {
			if _, err := lim.Allow(ctx, "k", core.PerHour(1_000_000)); err != nil {
				t.Fatal(err)
			}
			if i >= 100_000 || time.Now().After(deadline) {
				t.Fatalf("%s: not after %d decisions", what, i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	decideUntil("a marker placed", func() bool { return m.Exists("redlimit:{generation}") })
	m.FlushAll()
	decideUntil("the FLUSHALL seen", func() bool { return scrape(t, srv.URL)[losses] > 0 })
	if v := scrape(t, srv.URL)[losses]; v != 1 {
		t.Fatalf("%s = %v, want 1", losses, v)
	}
}
