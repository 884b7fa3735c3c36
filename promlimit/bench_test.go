package promlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
	"github.com/redlimit/redlimit/promlimit"
)

// BenchmarkMiddleware measures the nethttp middleware without an observer
// (none), with Metrics (prometheus), and with an observer that looks its
// series up with WithLabelValues on every decision (withlabelvalues),
// which Metrics' per-policy cache replaces. Every request is allowed, so
// every one runs the script on miniredis, whose Lua interpreter dominates
// the time and allocations.
func BenchmarkMiddleware(b *testing.B) {
	benchmarkMiddleware(b, core.PerSecond(1_000_000_000)) // never denies
}

// BenchmarkMiddlewareDenyCache is BenchmarkMiddleware on a denied key, which
// the Limiter's deny cache answers without Redis: the middleware's own
// cost, and the observer's share of it.
func BenchmarkMiddlewareDenyCache(b *testing.B) {
	benchmarkMiddleware(b, core.PerHour(1), core.WithDenyCacheMaxAge(time.Hour))
}

func benchmarkMiddleware(b *testing.B, limit core.Limit, opts ...core.Option) {
	m := miniredis.RunT(b)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	b.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, opts...)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	metrics, err := promlimit.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	naive := newNaive()
	for _, bm := range []struct {
		name string
		opts []redlimit.Option
	}{
		{"none", nil},
		{"prometheus", []redlimit.Option{metrics.Observer()}},
		{"withlabelvalues", []redlimit.Option{redlimit.WithObserver(naive.observe)}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			h := nethttp.New(lim, limit, append(bm.opts, redlimit.WithName("bench-"+bm.name))...)(ok)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r) // spends a 1/h allowance, so the next is denied
			want := w.Code
			if limit.Rate == 1 {
				h.ServeHTTP(w, r) // denied by Redis, and cached
				want = http.StatusTooManyRequests
			}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.Header())
				w.Body.Reset()
				h.ServeHTTP(w, r)
			}
			if w.Code != want {
				b.Fatalf("status %d, want %d", w.Code, want)
			}
		})
	}
}

// BenchmarkObserve measures the observer alone: Metrics.Observe and the
// WithLabelValues look-up it avoids.
func BenchmarkObserve(b *testing.B) {
	metrics, err := promlimit.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	naive := newNaive()
	d := redlimit.Decision{Policy: "api", Outcome: redlimit.OutcomeAllowed, Duration: 300 * time.Microsecond}
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			metrics.Observe(nil, d)
		}
	})
	b.Run("withlabelvalues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			naive.observe(nil, d)
		}
	})
}

// naive is the straightforward observer: the same metrics, each decision
// looked up by its label values.
type naive struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

func newNaive() *naive {
	return &naive{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "naive_decisions_total"}, []string{"policy", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "naive_decision_duration_seconds",
			Buckets: promlimit.DefaultBuckets()}, []string{"policy"}),
	}
}

func (n *naive) observe(_ *http.Request, d redlimit.Decision) {
	n.decisions.WithLabelValues(d.Policy, string(d.Outcome)).Inc()
	if d.Outcome != redlimit.OutcomeSkipped {
		n.duration.WithLabelValues(d.Policy).Observe(d.Duration.Seconds())
	}
}
