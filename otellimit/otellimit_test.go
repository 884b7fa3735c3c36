package otellimit_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttp"
	"github.com/redlimit/redlimit/otellimit"
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

// collected is what one collection held, by instrument.
type collected struct {
	decisions map[[2]string]int64 // {policy, outcome} -> count
	durations map[string]metricdata.HistogramDataPoint[float64]
	breakers  map[string]int64            // limiter -> 0 or 1
	opens     map[string]int64            // limiter -> openings
	settled   map[string]map[string]int64 // instrument -> limiter -> count: the settlement and state loss counters
	units     map[string]string
}

// collect reads reader and checks the instruments' kinds and scope.
func collect(t *testing.T, reader *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	c := collected{decisions: map[[2]string]int64{}, durations: map[string]metricdata.HistogramDataPoint[float64]{},
		breakers: map[string]int64{}, opens: map[string]int64{}, settled: map[string]map[string]int64{}, units: map[string]string{}}
	str := func(set attribute.Set, k attribute.Key) string {
		v, _ := set.Value(k)
		return v.AsString()
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otellimit.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otellimit.ScopeName)
		}
		for _, m := range sm.Metrics {
			c.units[m.Name] = m.Unit
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !data.IsMonotonic {
					t.Errorf("%s: a monotonic sum?", m.Name)
				}
				switch m.Name {
				case otellimit.DecisionsName:
					for _, dp := range data.DataPoints {
						c.decisions[[2]string{str(dp.Attributes, otellimit.PolicyKey), str(dp.Attributes, otellimit.OutcomeKey)}] = dp.Value
					}
				case otellimit.BreakerOpensName:
					for _, dp := range data.DataPoints {
						c.opens[str(dp.Attributes, otellimit.LimiterKey)] = dp.Value
					}
				case otellimit.SettlementsFailedName, otellimit.ReleasesRetriedName, otellimit.ReleasesAbandonedName, otellimit.StateLossesName:
					c.settled[m.Name] = map[string]int64{}
					for _, dp := range data.DataPoints {
						c.settled[m.Name][str(dp.Attributes, otellimit.LimiterKey)] = dp.Value
					}
				default:
					t.Errorf("unexpected sum %s", m.Name)
				}
			case metricdata.Histogram[float64]:
				if m.Name != otellimit.DurationName {
					t.Errorf("unexpected histogram %s", m.Name)
				}
				for _, dp := range data.DataPoints {
					c.durations[str(dp.Attributes, otellimit.PolicyKey)] = dp
				}
			case metricdata.Gauge[int64]:
				if m.Name != otellimit.BreakerName {
					t.Errorf("unexpected gauge %s", m.Name)
				}
				for _, dp := range data.DataPoints {
					c.breakers[str(dp.Attributes, otellimit.LimiterKey)] = dp.Value
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return c
}

var allOutcomes = []redlimit.Outcome{
	redlimit.OutcomeAllowed, redlimit.OutcomeDenied, redlimit.OutcomeCached, redlimit.OutcomeDryRun,
	redlimit.OutcomeLocal, redlimit.OutcomeError, redlimit.OutcomeInvalid, redlimit.OutcomeSkipped,
}

// checkCounts checks every outcome of policy (those not in want are absent
// or 0) and its histogram's count: every decision but the skipped ones.
func checkCounts(t *testing.T, c collected, policy string, want map[redlimit.Outcome]int) {
	t.Helper()
	timed := 0
	for _, o := range allOutcomes {
		if got, w := c.decisions[[2]string{policy, string(o)}], int64(want[o]); got != w {
			t.Errorf("%s{%s, %s} = %d, want %d", otellimit.DecisionsName, policy, o, got, w)
		}
		if o != redlimit.OutcomeSkipped {
			timed += want[o]
		}
	}
	if got := c.durations[policy].Count; got != uint64(timed) {
		t.Errorf("%s{%s} count = %d, want %d", otellimit.DurationName, policy, got, timed)
	}
}

func send(h http.Handler, path, client string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestCollect sends a known sequence of requests through three policies on
// two Limiters and collects with a ManualReader: the counts by policy and
// outcome are exact, the histogram counts every decision but the skipped
// one with the documented units and bucket boundaries, and the breaker
// gauge of the Limiter whose Redis dies turns 1 once the breaker opens and
// back to 0 once Redis answers again, while its openings counter goes from
// 0 to 1 and stays there.
func TestCollect(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(t.Context()) })
	metrics, err := otellimit.New(mp)
	if err != nil {
		t.Fatal(err)
	}

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

	c := collect(t, reader)
	apiWant := map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 3, redlimit.OutcomeDenied: 1,
		redlimit.OutcomeCached: 1, redlimit.OutcomeInvalid: 1, redlimit.OutcomeSkipped: 1}
	checkCounts(t, c, "api", apiWant)
	checkCounts(t, c, "shadow", map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 1, redlimit.OutcomeDryRun: 1})
	fragileWant := map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 1, redlimit.OutcomeError: 1}
	checkCounts(t, c, "fragile", fragileWant)
	if got := len(c.decisions); got != 9 {
		t.Errorf("%d attribute sets of %s, want the 9 that happened: %v", got, otellimit.DecisionsName, c.decisions)
	}
	for name, want := range map[string]string{otellimit.DecisionsName: "{decision}", otellimit.DurationName: "s", otellimit.BreakerName: "",
		otellimit.BreakerOpensName: "{opening}"} {
		if got := c.units[name]; got != want {
			t.Errorf("unit of %s: %q, want %q", name, got, want)
		}
	}
	if dp := c.durations["api"]; !slices.Equal(dp.Bounds, otellimit.DefaultBuckets()) || dp.Sum <= 0 {
		t.Errorf("%s{api}: bounds %v, sum %v; want DefaultBuckets and a positive sum", otellimit.DurationName, dp.Bounds, dp.Sum)
	}
	for _, name := range []string{"main", "fragile"} {
		if v, ok := c.breakers[name]; !ok || v != 0 {
			t.Errorf("%s{%s} = %v (reported: %v), want 0", otellimit.BreakerName, name, v, ok)
		}
		if v, ok := c.opens[name]; !ok || v != 0 {
			t.Errorf("%s{%s} = %v (reported: %v), want 0", otellimit.BreakerOpensName, name, v, ok)
		}
	}

	poll := func(what string, until int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for collect(t, reader).breakers["fragile"] != until {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s{fragile} still not %d after 10 s", what, otellimit.BreakerName, until)
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
	// Keep deciding while Redis is down: the breaker opens after 10 ms and
	// BreakerMinFailures failures.
	poll("Redis down", 1)
	c = collect(t, reader)
	checkCounts(t, c, "fragile", fragileWant)
	if c.breakers["main"] != 0 {
		t.Errorf("%s{main} = 1, want 0: its Redis is up", otellimit.BreakerName)
	}
	for name, want := range map[string]int64{"main": 0, "fragile": 1} {
		if c.opens[name] != want {
			t.Errorf("%s{%s} = %d with the breaker open, want %d", otellimit.BreakerOpensName, name, c.opens[name], want)
		}
	}
	// Redis returns: the next probe (BreakerProbeInterval) closes it.
	if err := fragileRedis.Restart(); err != nil {
		t.Fatal(err)
	}
	poll("Redis back", 0)
	c = collect(t, reader)
	checkCounts(t, c, "fragile", fragileWant)
	checkCounts(t, c, "api", apiWant)
	if c.opens["fragile"] != 1 {
		t.Errorf("%s{fragile} = %d with the breaker closed again, want 1: a counter keeps the opening", otellimit.BreakerOpensName, c.opens["fragile"])
	}
}

// TestObserveAllocs: once a policy has been seen, observing a decision
// allocates nothing, on the SDK as on the no-op provider.
func TestObserveAllocs(t *testing.T) {
	sdk := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() { sdk.Shutdown(t.Context()) })
	for name, mp := range map[string]metric.MeterProvider{"sdk": sdk, "noop": noop.NewMeterProvider()} {
		metrics, err := otellimit.New(mp)
		if err != nil {
			t.Fatal(err)
		}
		d := redlimit.Decision{Policy: "api", Outcome: redlimit.OutcomeAllowed, Duration: 300 * time.Microsecond}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		metrics.Observe(r, d)
		if n := testing.AllocsPerRun(1000, func() { metrics.Observe(r, d) }); n != 0 {
			t.Errorf("%s: Observe allocates %v times, want 0", name, n)
		}
	}
}

// TestErrors: constructor and WatchLimiter errors; a nil MeterProvider is
// the global one.
func TestErrors(t *testing.T) {
	t.Parallel()
	metrics, err := otellimit.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otellimit.New(nil, otellimit.WithBuckets(0.1, 0.01)); err == nil {
		t.Error("decreasing buckets were accepted")
	}
	if _, err := otellimit.New(nil, otellimit.WithBuckets()); err == nil {
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
}

// TestBuckets: WithBuckets reaches the histogram.
func TestBuckets(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(t.Context()) })
	metrics, err := otellimit.New(mp, otellimit.WithBuckets(0.001, 0.01))
	if err != nil {
		t.Fatal(err)
	}
	metrics.Observe(nil, redlimit.Decision{Policy: "p", Outcome: redlimit.OutcomeAllowed, Duration: 5 * time.Millisecond})
	dp := collect(t, reader).durations["p"]
	if !slices.Equal(dp.Bounds, []float64{0.001, 0.01}) || !slices.Equal(dp.BucketCounts, []uint64{0, 1, 0}) {
		t.Errorf("bounds %v, counts %v; want [0.001 0.01], [0 1 0]", dp.Bounds, dp.BucketCounts)
	}
}

// TestSettlementCounters: a Release that fails while Redis is away counts
// as a failed settlement; once Redis is back, the Limiter frees the slot
// in the background and the retried releases counter shows it; none is
// abandoned. A watched Limiter reports the three counters from 0, with
// their units.
func TestSettlementCounters(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(t.Context()) })
	metrics, err := otellimit.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	lim, m := limiter(t, core.WithTimeout(time.Second))
	if err := metrics.WatchLimiter(lim, "jobs"); err != nil {
		t.Fatal(err)
	}
	names := []string{otellimit.SettlementsFailedName, otellimit.ReleasesRetriedName, otellimit.ReleasesAbandonedName}
	c := collect(t, reader)
	for _, name := range names {
		if v, ok := c.settled[name]["jobs"]; !ok || v != 0 {
			t.Errorf("%s{jobs} = %v (reported: %v), want 0", name, v, ok)
		}
	}
	if c.units[otellimit.SettlementsFailedName] != "{settlement}" || c.units[otellimit.ReleasesRetriedName] != "{release}" {
		t.Errorf("units %v", c.units)
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
	for c = collect(t, reader); c.settled[otellimit.ReleasesRetriedName]["jobs"] == 0 && time.Now().Before(deadline); c = collect(t, reader) {
		time.Sleep(20 * time.Millisecond)
	}
	for i, want := range []int64{1, 1, 0} {
		if got := c.settled[names[i]]["jobs"]; got != want {
			t.Errorf("%s{jobs} = %d, want %d", names[i], got, want)
		}
	}
}

// TestOtherProtocols: Observer counts the decisions of requests of every
// protocol (a gRPC call, through redlimit.ServeRequest, has no
// *http.Request), in the request's context: the span of the call's
// context is the duration's exemplar.
func TestOtherProtocols(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(t.Context()) })
	metrics, err := otellimit.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := limiter(t)
	p, err := redlimit.NewPolicy(lim, core.PerMinute(1), redlimit.WithName("calls"), metrics.Observer(),
		redlimit.WithRequestKey(func(q redlimit.Request) (string, error) { return q.Peer, nil }))
	if err != nil {
		t.Fatal(err)
	}
	span := trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled}
	ctx := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(span))
	call := redlimit.Request{Context: ctx, Method: http.MethodPost, Route: "/pkg.S/M", Path: "/pkg.S/M", Peer: "192.0.2.1:1234"}
	for range 2 {
		redlimit.ServeRequest(p, call, map[string][]string{}, func() int { return http.StatusOK })
	}
	c := collect(t, reader)
	checkCounts(t, c, "calls", map[redlimit.Outcome]int{redlimit.OutcomeAllowed: 1, redlimit.OutcomeDenied: 1})
	ex := c.durations["calls"].Exemplars
	if len(ex) == 0 || !slices.Equal(ex[0].TraceID, span.TraceID[:]) {
		t.Errorf("exemplars %+v, want the call's trace", ex)
	}
}

// TestStateLosses: a FLUSHALL of the Limiter's Redis, seen by its check
// while decisions flow, counts once in redlimit.state.losses, reported
// from 0 with its unit.
func TestStateLosses(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(t.Context()) })
	metrics, err := otellimit.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	lim, m := limiter(t, core.WithLossCheck(10*time.Millisecond))
	if err := metrics.WatchLimiter(lim, "api"); err != nil {
		t.Fatal(err)
	}
	losses := func() (int64, bool) {
		v, ok := collect(t, reader).settled[otellimit.StateLossesName]["api"]
		return v, ok
	}
	if v, ok := losses(); !ok || v != 0 {
		t.Fatalf("%s{api} = %v (reported: %v), want 0", otellimit.StateLossesName, v, ok)
	}
	if u := collect(t, reader).units[otellimit.StateLossesName]; u != "{loss}" {
		t.Errorf("unit %q, want {loss}", u)
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
	decideUntil("the FLUSHALL seen", func() bool { v, _ := losses(); return v > 0 })
	if v, _ := losses(); v != 1 {
		t.Fatalf("%s{api} = %d, want 1", otellimit.StateLossesName, v)
	}
}
