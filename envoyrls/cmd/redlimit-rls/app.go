package main

import (
	"context"
	"errors"
	"expvar"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/envoyrls"
	"github.com/redlimit/redlimit/promlimit"
)

// app is the program's parts: the Server, its metrics and health.
type app struct {
	s       *settings
	log     *slog.Logger
	srv     *envoyrls.Server
	reg     *prometheus.Registry // nil with DISABLE_STATS
	health  *health
	cfgOpts envoyrls.ConfigOptions
}

// newApp builds the Server on lim with its configuration, or with none
// when it does not load (the reference keeps running then, and so does
// this), and its metrics.
func newApp(s *settings, lim *core.Limiter, rdb redis.UniversalClient, log *slog.Logger) (*app, error) {
	a := &app{s: s, log: log, cfgOpts: envoyrls.ConfigOptions{MergeDomains: s.merge, AllFiles: true, IgnoreDotFiles: s.ignoreDotFiles}}
	opts, err := serverOptions(s, log)
	if err != nil {
		return nil, err
	}
	if !s.metrics.disabled {
		if a.reg, opts.Observe, err = newMetrics(s, lim); err != nil {
			return nil, err
		}
	}
	cfg, err := envoyrls.LoadConfig(s.config, a.cfgOpts)
	if err != nil {
		log.Error("configuration not loaded: every request is answered \"no rate limit configuration loaded\" until it loads", "dir", s.config, "err", err)
		cfg = nil
	}
	if a.srv, err = envoyrls.New(lim, cfg, opts); err != nil {
		return nil, err
	}
	a.health = newHealth(a, rdb)
	return a, nil
}

// serverOptions are the Server's options of the settings.
func serverOptions(s *settings, log *slog.Logger) (envoyrls.Options, error) {
	opts := envoyrls.Options{ShadowMode: s.shadow, ChargeDenied: s.chargeDenied, Logger: log, Reference: s.compat == "reference",
		QuotaMode: s.quota, DynamicMetadata: s.dynamicMetadata}
	switch s.headers {
	case "xratelimit":
		opts.Headers = redlimit.HeadersXRateLimit
	case "draft":
		opts.Headers = redlimit.HeadersDraft
	case "both":
		opts.Headers = redlimit.HeadersBoth
	case "none":
		opts.Headers = redlimit.HeadersNone
	default:
		return opts, fmt.Errorf("REDLIMIT_HEADERS (-headers) %q: xratelimit, draft, both or none", s.headers)
	}
	if s.headerNames[0] != "" {
		opts.HeaderNames = envoyrls.HeaderNames{Limit: s.headerNames[0], Remaining: s.headerNames[1], Reset: s.headerNames[2]}
	}
	switch s.failure {
	case "open":
		opts.Failure = redlimit.FailOpen
	case "closed":
		opts.Failure = redlimit.FailClosed
	default:
		return opts, fmt.Errorf("REDLIMIT_FAILURE (-failure) %q: open or closed", s.failure)
	}
	return opts, nil
}

// newMetrics returns the registry of the program's metrics (Go, the
// process, promlimit's decisions and the Limiter's transport), each
// labelled with EXTRA_TAGS, and the Server's Observe.
func newMetrics(s *settings, lim *core.Limiter) (*prometheus.Registry, func(redlimit.Decision), error) {
	reg := prometheus.NewRegistry()
	var r prometheus.Registerer = reg
	if len(s.metrics.extraLabel) > 0 {
		r = prometheus.WrapRegistererWith(s.metrics.extraLabel, reg)
	}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := r.Register(c); err != nil {
			return nil, nil, fmt.Errorf("EXTRA_TAGS: %v", err)
		}
	}
	m, err := promlimit.New(r)
	if err != nil {
		return nil, nil, err
	}
	if err := m.WatchLimiter(lim, "rls"); err != nil {
		return nil, nil, err
	}
	return reg, func(d redlimit.Decision) { m.Observe(nil, d) }, nil
}

// listeners are the program's listeners; debug and prom may be nil.
type listeners struct{ grpc, http, debug, prom net.Listener }

func (l *listeners) close() {
	for _, ln := range []net.Listener{l.grpc, l.http, l.debug, l.prom} {
		if ln != nil {
			ln.Close()
		}
	}
}

// listen opens the listeners: gRPC on GRPC_UDS's Unix socket or its
// address, HTTP, and the debug and Prometheus ones when asked for.
func (a *app) listen() (*listeners, error) {
	l := &listeners{}
	var err error
	if a.s.grpcUDS != "" {
		l.grpc, err = net.Listen("unix", a.s.grpcUDS)
	} else {
		l.grpc, err = net.Listen("tcp", a.s.grpcAddr)
	}
	for _, open := range []struct {
		ln   *net.Listener
		addr string
	}{{&l.http, a.s.httpAddr}, {&l.debug, a.s.debugAddr}, {&l.prom, a.s.metrics.promAddr}} {
		if err == nil && open.addr != "" {
			*open.ln, err = net.Listen("tcp", open.addr)
		}
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// grpcServer is the gRPC server: the rate limit service and the gRPC
// health service, with the reference's connection ages, over TLS when
// GRPC_SERVER_USE_TLS.
func (a *app) grpcServer() (*grpc.Server, error) {
	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: a.s.maxConnAge, MaxConnectionAgeGrace: a.s.maxConnAgeGrace}),
		// Requests served by a pool of goroutines, not one started for each.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
	if a.s.grpcTLS.on {
		c, err := serverTLS(a.s.grpcTLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(c)))
	}
	gs := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(gs, a.srv)
	healthpb.RegisterHealthServer(gs, a.health.grpc)
	return gs, nil
}

// mux returns the HTTP port's handler: /healthcheck, /json, and /metrics
// unless DISABLE_STATS.
func (a *app) mux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthcheck", a.health)
	mux.Handle("/json", a.srv.JSONHandler())
	if a.reg != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	}
	return mux
}

// debugMux returns the debug port's handler, the reference's endpoints:
// /debug/pprof/, /rlconfig (the configuration in use), /stats (expvar).
func (a *app) debugMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		if c := a.srv.Config(); c != nil {
			_, _ = io.WriteString(w, c.String())
		}
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		expvar.Do(func(kv expvar.KeyValue) { fmt.Fprintf(w, "%s: %s\n", kv.Key, kv.Value) })
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "/debug/pprof/: root of various pprof endpoints. hit for help.\n/rlconfig: print out the currently loaded configuration for debugging\n/stats: print out stats\n")
	})
	return mux
}

// promMux returns the handler of USE_PROMETHEUS's listener: the metrics
// at PROMETHEUS_PATH.
func (a *app) promMux() http.Handler {
	mux := http.NewServeMux()
	if a.reg != nil && a.s.metrics.promPath != "" {
		mux.Handle(a.s.metrics.promPath, promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	}
	return mux
}

// serve serves until ctx ends or a server fails, then stops: health
// fails at once, requests in flight get at most 10 s.
func (a *app) serve(ctx context.Context) error {
	l, err := a.listen()
	if err != nil {
		return err
	}
	gs, err := a.grpcServer()
	if err != nil {
		l.close()
		return err
	}
	// Each HTTP listener and its handler.
	serve := []struct {
		ln net.Listener
		h  http.Handler
	}{{l.http, a.mux()}, {l.debug, a.debugMux()}, {l.prom, a.promMux()}}
	errs := make(chan error, len(serve)+1)
	go func() { errs <- gs.Serve(l.grpc) }()
	var servers []*http.Server
	for _, sv := range serve {
		if sv.ln != nil {
			hs := &http.Server{Handler: sv.h, ReadHeaderTimeout: 10 * time.Second}
			servers = append(servers, hs)
			go func() { errs <- hs.Serve(sv.ln) }()
		}
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() { _ = a.srv.WatchConfig(watchCtx, a.s.config, a.cfgOpts, a.s.reload) }()
	go a.health.run(watchCtx)
	a.logServing(l)
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errs:
	}
	a.stop(gs, servers)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && !errors.Is(serveErr, grpc.ErrServerStopped) {
		return serveErr
	}
	return nil
}

// logServing says where the program serves, and what, at level warn as
// the reference does, so that its default level (warn) shows it.
func (a *app) logServing(l *listeners) {
	attrs := []any{"grpc", l.grpc.Addr().String(), "http", l.http.Addr().String()}
	if l.debug != nil {
		attrs = append(attrs, "debug", l.debug.Addr().String())
	}
	if l.prom != nil {
		attrs = append(attrs, "prometheus", l.prom.Addr().String())
	}
	attrs = append(attrs, "tls", a.s.grpcTLS.on, "compat", a.s.compat, "config", a.s.config)
	if c := a.srv.Config(); c != nil {
		attrs = append(attrs, "domains", strings.Join(c.Domains(), ","), "rules", c.Rules())
	}
	a.log.Warn("redlimit-rls serving", attrs...) // at warn, as the reference says where it listens
}

// stop fails health, then stops the servers, waiting at most 10 s for
// requests in flight.
func (a *app) stop(gs *grpc.Server, servers []*http.Server) {
	a.log.Info("redlimit-rls stopping")
	a.health.stopping.Store(true)
	a.health.update()
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	for _, hs := range servers {
		if err := hs.Shutdown(shutdown); err != nil {
			a.log.Warn("HTTP shutdown", "err", err)
		}
	}
	select {
	case <-stopped:
	case <-shutdown.Done():
		gs.Stop()
	}
}
