package envoyrls_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/envoyrls"
	"github.com/redlimit/redlimit/internal/redistest"
)

// BenchmarkShouldRateLimit: the Server's own cost on a real redis-server,
// called in process (no gRPC), one descriptor per request on 10 000
// addresses, and two descriptors (a refundable pair):
//
//	go test -run X -bench ShouldRateLimit -benchmem -cpu 1,16
func BenchmarkShouldRateLimit(b *testing.B) {
	lim := core.New(redistest.Standalone(b).Client(b), core.WithTimeout(10*time.Second))
	c, err := envoyrls.LoadConfig("testdata/reference", envoyrls.ConfigOptions{})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := envoyrls.New(lim, c, envoyrls.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var reqs [10_000]*rlsv3.RateLimitRequest
	var pairs [10_000]*rlsv3.RateLimitRequest
	for i := range reqs {
		n := fmt.Sprint(2060000000 + i)
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", fmt.Sprintf("10.0.%d.%d", i/256, i%256))}}
		pairs[i] = &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", n), desc("to_number", n)}}
	}
	for _, bc := range []struct {
		name string
		reqs []*rlsv3.RateLimitRequest
	}{{"one descriptor", reqs[:]}, {"two descriptors", pairs[:]}} {
		b.Run(bc.name, func(b *testing.B) {
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := bc.reqs[next.Add(1)%int64(len(bc.reqs))]
					if _, err := srv.ShouldRateLimit(b.Context(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
