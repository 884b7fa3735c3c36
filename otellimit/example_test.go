package otellimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
	"github.com/redlimit/redlimit/otellimit"
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

	// In production the reader is an exporter's (OTLP, Prometheus).
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	metrics, err := otellimit.New(mp)
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

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch data := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, o := range []redlimit.Outcome{redlimit.OutcomeAllowed, redlimit.OutcomeDenied, redlimit.OutcomeCached} {
					for _, dp := range data.DataPoints {
						if v, _ := dp.Attributes.Value(otellimit.OutcomeKey); v.AsString() == string(o) {
							fmt.Printf("%s [%s] %s: %d\n", mt.Name, mt.Unit, o, dp.Value)
						}
					}
				}
			case metricdata.Histogram[float64]:
				fmt.Printf("%s [%s]: %d decisions\n", mt.Name, mt.Unit, data.DataPoints[0].Count)
			case metricdata.Gauge[int64]:
				fmt.Printf("%s: %d\n", mt.Name, data.DataPoints[0].Value)
			}
		}
	}
	// Output:
	// redlimit.decisions [{decision}] allowed: 2
	// redlimit.decisions [{decision}] denied: 1
	// redlimit.decisions [{decision}] denied_cached: 1
	// redlimit.decision.duration [s]: 4 decisions
	// redlimit.breaker.open: 0
}
