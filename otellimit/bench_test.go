package otellimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/otellimit"
)

// BenchmarkObserve measures Metrics.Observe on the SDK (cached attribute
// sets) and the straightforward observer it replaces, which builds the
// attributes of each decision (withattributes).
func BenchmarkObserve(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { mp.Shutdown(context.Background()) })
	metrics, err := otellimit.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	meter := mp.Meter("naive")
	counter, _ := meter.Int64Counter("naive.decisions")
	hist, _ := meter.Float64Histogram("naive.decision.duration", metric.WithExplicitBucketBoundaries(otellimit.DefaultBuckets()...))
	naive := func(r *http.Request, d redlimit.Decision) {
		ctx := r.Context()
		counter.Add(ctx, 1, metric.WithAttributes(otellimit.PolicyKey.String(d.Policy), otellimit.OutcomeKey.String(string(d.Outcome))))
		hist.Record(ctx, d.Duration.Seconds(), metric.WithAttributes(otellimit.PolicyKey.String(d.Policy)))
	}
	d := redlimit.Decision{Policy: "api", Outcome: redlimit.OutcomeAllowed, Duration: 300 * time.Microsecond}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			metrics.Observe(r, d)
		}
	})
	b.Run("withattributes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			naive(r, d)
		}
	})
}
