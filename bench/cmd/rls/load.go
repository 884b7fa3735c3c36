package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit/bench/internal/harness"
)

// load is the outcome of driving one server.
type load struct {
	calls, ok, over, errs int64
	okHits                int64 // the hits_addend of the OK answers' requests
	firstErr              error
	elapsed               time.Duration
	lat                   harness.Hist
}

func (l *load) rate() float64 {
	if l.elapsed <= 0 {
		return 0
	}
	return float64(l.calls) / l.elapsed.Seconds()
}

// drive calls ShouldRateLimit from callers goroutines, each with one call
// in flight, until d has passed or maxCalls calls were sent. Caller i uses
// connection i mod len(clients) and walks reqs from its own offset, so that
// with many values the callers spread over them. Calls in flight when d
// passes are waited for and counted.
func drive(ctx context.Context, clients []pb.RateLimitServiceClient, reqs []*pb.RateLimitRequest,
	callers int, d time.Duration, maxCalls int64) *load {
	var (
		stop   atomic.Bool
		issued atomic.Int64
		wg     sync.WaitGroup
		mu     sync.Mutex
		total  = new(load)
	)
	// Every call gets at most this long: a server that hangs fails the
	// cell instead of the run.
	cctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l := new(load)
			client := clients[i%len(clients)]
			j := i * len(reqs) / callers
			for !stop.Load() && issued.Add(1) <= maxCalls {
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(cctx, reqs[j])
				l.lat.Add(time.Since(t0))
				l.calls++
				switch {
				case err != nil:
					l.errs++
					if l.firstErr == nil {
						l.firstErr = err
					}
					if cctx.Err() != nil {
						stop.Store(true)
					}
				case resp.GetOverallCode() == pb.RateLimitResponse_OK:
					l.ok++
					l.okHits += int64(max(reqs[j].GetHitsAddend(), 1))
				case resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT:
					l.over++
				default:
					l.errs++
					if l.firstErr == nil {
						l.firstErr = fmt.Errorf("overall code %v", resp.GetOverallCode())
					}
				}
				if j++; j == len(reqs) {
					j = 0
				}
			}
			mu.Lock()
			total.calls += l.calls
			total.ok += l.ok
			total.okHits += l.okHits
			total.over += l.over
			total.errs += l.errs
			if total.firstErr == nil {
				total.firstErr = l.firstErr
			}
			total.lat.Merge(&l.lat)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	if total.firstErr == nil && ctx.Err() != nil {
		total.firstErr = ctx.Err()
	}
	return total
}

// requests returns one request per descriptor value u0, u1, … of userKey.
func requests(values int) []*pb.RateLimitRequest {
	reqs := make([]*pb.RateLimitRequest, values)
	for i := range reqs {
		reqs[i] = request(userKey, fmt.Sprintf("u%d", i), 1)
	}
	return reqs
}
