package promlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
	"github.com/redlimit/redlimit/promlimit"
)

func ExampleNew() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	lim := core.New(rdb)

	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	metrics, err := promlimit.New(reg)
	if err != nil {
		panic(err)
	}
	if err := metrics.WatchLimiter(lim, "default"); err != nil {
		panic(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	api := nethttp.New(lim, core.PerMinute(2), redlimit.WithName("api"), metrics.Observer())(ok)
	for i := 0; i < 4; i++ {
		api.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}

	// What Prometheus scrapes, less the outcomes that did not happen and
	// the histogram's buckets.
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "redlimit_breaker_open"),
			strings.HasPrefix(line, "redlimit_decision_duration_seconds_count"),
			strings.HasPrefix(line, "redlimit_decisions_total{") && !strings.HasSuffix(line, " 0"):
			fmt.Println(line)
		}
	}
	// Output:
	// redlimit_breaker_open{limiter="default"} 0
	// redlimit_breaker_opens_total{limiter="default"} 0
	// redlimit_decision_duration_seconds_count{policy="api"} 4
	// redlimit_decisions_total{outcome="allowed",policy="api"} 2
	// redlimit_decisions_total{outcome="denied",policy="api"} 1
	// redlimit_decisions_total{outcome="denied_cached",policy="api"} 1
}

func ExampleMetrics_Observe() {
	reg := prometheus.NewRegistry()
	metrics, err := promlimit.New(reg)
	if err != nil {
		panic(err)
	}
	// Observe is the observer that Observer plugs in, for callers that
	// dispatch decisions themselves.
	denied := 0
	observe := func(r *http.Request, d redlimit.Decision) {
		metrics.Observe(r, d)
		if !d.Allowed() {
			denied++
		}
	}
	_ = redlimit.WithObserver(observe) // give this to nethttp.New and the like

	// Decisions as the middleware would report them.
	observe(nil, redlimit.Decision{Policy: "login", Outcome: redlimit.OutcomeAllowed})
	observe(nil, redlimit.Decision{Policy: "login", Outcome: redlimit.OutcomeDenied, Status: http.StatusTooManyRequests})

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == promlimit.DecisionsName && m.GetCounter().GetValue() > 0 {
				fmt.Println(f.GetName(), m.GetLabel()[0].GetValue(), m.GetLabel()[1].GetValue(), m.GetCounter().GetValue())
			}
		}
	}
	fmt.Println("denied, by my own count:", denied)
	// Output:
	// redlimit_decisions_total allowed login 1
	// redlimit_decisions_total denied login 1
	// denied, by my own count: 1
}
