package main

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// health is the program's health, over HTTP (/healthcheck) and over
// gRPC's health service (service "ratelimit", as the reference's, and
// ""), as the reference makes it of its parts: healthy until SIGTERM;
// with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, only while a
// configuration of at least one domain is loaded; with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, only while Redis answers (a
// PING every second).
type health struct {
	a        *app
	rdb      redis.UniversalClient
	grpc     *grpchealth.Server
	stopping atomic.Bool
	redisOK  atomic.Bool
}

func newHealth(a *app, rdb redis.UniversalClient) *health {
	h := &health{a: a, rdb: rdb, grpc: grpchealth.NewServer()}
	h.redisOK.Store(true) // it answered at start
	h.update()
	return h
}

// ok reports whether the program is healthy.
func (h *health) ok() bool {
	if h.stopping.Load() || !h.redisOK.Load() {
		return false
	}
	if h.a.s.requireConfig {
		c := h.a.srv.Config()
		return c != nil && len(c.Domains()) > 0
	}
	return true
}

// update sets the gRPC health service's status.
func (h *health) update() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.ok() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.grpc.SetServingStatus("ratelimit", st)
	h.grpc.SetServingStatus("", st)
}

// run checks Redis (when asked to) and updates the gRPC status every
// second until ctx ends.
func (h *health) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h.a.s.redisOpts.healthCheck {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			h.redisOK.Store(h.rdb.Ping(pctx).Err() == nil)
			cancel()
		}
		h.update()
	}
}

// ServeHTTP answers /healthcheck: 200 "OK" when healthy, else 500.
func (h *health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if !h.ok() {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "OK")
}
