// Command redlimit-rls is Envoy's rate limit service on redlimit's engine:
// it answers ShouldRateLimit (envoy.service.ratelimit.v3) over gRPC with
// the limits of a directory of YAML files in the format of the reference
// server, envoyproxy/ratelimit, on a Redis shared by any number of
// instances.
//
//	redlimit-rls -config ./config -redis redis://localhost:6379
//
// Flags, each with the environment variable that sets it when the flag is
// not given (the reference server's name where it has one):
//
//	-config DIR       RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
//	                  (default ./config); *.yaml and *.yml files, reloaded
//	                  when they change
//	-redis URL        REDIS_URL: redis://, rediss:// or unix:// URL, or the
//	                  reference's host:port (with REDIS_AUTH, REDIS_TLS,
//	                  REDIS_TYPE=SINGLE|CLUSTER|SENTINEL); empty (the
//	                  default) starts an embedded in-memory Redis
//	-grpc ADDR        GRPC_HOST and GRPC_PORT (default :8081)
//	-http ADDR        HOST and PORT (default :8080): /healthcheck,
//	                  /metrics, /json
//	-merge            MERGE_DOMAIN_CONFIG: let several files configure one
//	                  domain
//	-shadow           SHADOW_MODE: answer OK overall, whatever the limits
//	-headers PROFILE  REDLIMIT_HEADERS: xratelimit (default), draft, both
//	                  or none; LIMIT_RESPONSE_HEADERS_ENABLED=true with
//	                  LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
//	                  LIMIT_RESET_HEADER names the X-RateLimit fields
//	-failure POLICY   REDLIMIT_FAILURE: open (default) or closed
//	-prefix PREFIX    CACHE_KEY_PREFIX (default "redlimit:")
//	-timeout D        REDLIMIT_TIMEOUT: bound on one decision (default 100ms)
//	-reload D         REDLIMIT_RELOAD: how often the config directory is
//	                  checked for changes (default 1s)
//	-charge-denied    REDLIMIT_CHARGE_DENIED: keep a denied request's
//	                  charge on the descriptors that allowed it
//	-log-level LEVEL  LOG_LEVEL: debug, info (default), warn or error
//
// It stops cleanly on SIGINT or SIGTERM: /healthcheck fails at once, then
// the gRPC and HTTP servers finish the requests in flight (at most 10 s).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/envoyrls"
	"github.com/redlimit/redlimit/promlimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "redlimit-rls:", err)
		os.Exit(1)
	}
}

// settings are the program's flags.
type settings struct {
	config, redis, grpcAddr, httpAddr string
	merge, shadow, chargeDenied       bool
	headers, failure, prefix, level   string
	timeout, reload                   time.Duration
}

// parse reads the flags, each defaulting to its environment variable.
func parse(args []string, env func(string) string, stderr io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("redlimit-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.config, "config", configDir(env), "directory of the YAML configuration files")
	fs.StringVar(&s.redis, "redis", env("REDIS_URL"), "Redis URL or host:port; empty: an embedded in-memory Redis")
	fs.StringVar(&s.grpcAddr, "grpc", hostPort(env("GRPC_HOST"), env("GRPC_PORT"), ":8081"), "gRPC listen address")
	fs.StringVar(&s.httpAddr, "http", hostPort(env("HOST"), env("PORT"), ":8080"), "HTTP listen address (/healthcheck, /metrics, /json)")
	fs.BoolVar(&s.merge, "merge", envBool(env, "MERGE_DOMAIN_CONFIG"), "let several files configure one domain")
	fs.BoolVar(&s.shadow, "shadow", envBool(env, "SHADOW_MODE"), "answer OK overall whatever the limits")
	fs.BoolVar(&s.chargeDenied, "charge-denied", envBool(env, "REDLIMIT_CHARGE_DENIED"), "keep a denied request's charge on the descriptors that allowed it")
	fs.StringVar(&s.headers, "headers", orDefault(env("REDLIMIT_HEADERS"), "xratelimit"), "rate-limit response fields: xratelimit, draft, both or none")
	fs.StringVar(&s.failure, "failure", orDefault(env("REDLIMIT_FAILURE"), "open"), "when Redis fails: open or closed")
	fs.StringVar(&s.prefix, "prefix", orDefault(env("CACHE_KEY_PREFIX"), "redlimit:"), "prefix of every Redis key")
	fs.StringVar(&s.level, "log-level", orDefault(env("LOG_LEVEL"), "info"), "debug, info, warn or error")
	timeout, err := envDuration(env, "REDLIMIT_TIMEOUT", core.DefaultTimeout)
	if err != nil {
		return s, err
	}
	reload, err := envDuration(env, "REDLIMIT_RELOAD", time.Second)
	if err != nil {
		return s, err
	}
	fs.DurationVar(&s.timeout, "timeout", timeout, "bound on one decision")
	fs.DurationVar(&s.reload, "reload", reload, "how often the config directory is checked for changes")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return s, nil
}

// configDir is the reference server's configuration directory,
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, when
// RUNTIME_ROOT is set; ./config otherwise.
func configDir(env func(string) string) string {
	root := env("RUNTIME_ROOT")
	if root == "" {
		return "config"
	}
	return filepath.Join(root, env("RUNTIME_SUBDIRECTORY"), orDefault(env("RUNTIME_APPDIRECTORY"), "config"))
}

func hostPort(host, port, def string) string {
	if port == "" {
		return def
	}
	return net.JoinHostPort(host, port)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func envBool(env func(string) string, name string) bool {
	b, _ := strconv.ParseBool(env(name))
	return b
}

func envDuration(env func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := env(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", name, err)
	}
	return d, nil
}

// run serves until ctx ends.
func run(ctx context.Context, args []string, env func(string) string, stderr io.Writer) error {
	s, err := parse(args, env, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(s.level)); err != nil {
		return fmt.Errorf("-log-level: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	opts := envoyrls.Options{ShadowMode: s.shadow, ChargeDenied: s.chargeDenied, Logger: log}
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
		return fmt.Errorf("-headers %q: xratelimit, draft, both or none", s.headers)
	}
	if envBool(env, "LIMIT_RESPONSE_HEADERS_ENABLED") {
		opts.HeaderNames = envoyrls.HeaderNames{
			Limit:     orDefault(env("LIMIT_LIMIT_HEADER"), "RateLimit-Limit"),
			Remaining: orDefault(env("LIMIT_REMAINING_HEADER"), "RateLimit-Remaining"),
			Reset:     orDefault(env("LIMIT_RESET_HEADER"), "RateLimit-Reset"),
		}
	}
	switch s.failure {
	case "open":
		opts.Failure = redlimit.FailOpen
	case "closed":
		opts.Failure = redlimit.FailClosed
	default:
		return fmt.Errorf("-failure %q: open or closed", s.failure)
	}
	cfgOpts := envoyrls.ConfigOptions{MergeDomains: s.merge}
	cfg, err := envoyrls.LoadConfig(s.config, cfgOpts)
	if err != nil {
		return err
	}

	rdb, closeRedis, err := connect(s.redis, env, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	lim := core.New(rdb, core.WithTimeout(s.timeout), core.WithPrefix(s.prefix), core.WithLogger(log))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := promlimit.New(reg)
	if err != nil {
		return err
	}
	if err := metrics.WatchLimiter(lim, "rls"); err != nil {
		return err
	}
	opts.Observe = func(d redlimit.Decision) { metrics.Observe(nil, d) }

	srv, err := envoyrls.New(lim, cfg, opts)
	if err != nil {
		return err
	}

	grpcLn, err := net.Listen("tcp", s.grpcAddr)
	if err != nil {
		return err
	}
	httpLn, err := net.Listen("tcp", s.httpAddr)
	if err != nil {
		grpcLn.Close()
		return err
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	mux := http.NewServeMux()
	mux.Handle("/healthcheck", srv.HealthHandler())
	mux.Handle("/json", srv.JSONHandler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	errs := make(chan error, 3)
	go func() { errs <- gs.Serve(grpcLn) }()
	go func() { errs <- hs.Serve(httpLn) }()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() { _ = srv.WatchConfig(watchCtx, s.config, cfgOpts, s.reload) }()
	log.Info("redlimit-rls serving", "grpc", grpcLn.Addr().String(), "http", httpLn.Addr().String(),
		"config", s.config, "domains", strings.Join(cfg.Domains(), ","), "rules", cfg.Rules())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errs:
	}
	log.Info("redlimit-rls stopping")
	srv.SetHealthy(false)
	stopWatch()
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	if err := hs.Shutdown(shutdown); err != nil {
		log.Warn("HTTP shutdown", "err", err)
	}
	select {
	case <-stopped:
	case <-shutdown.Done():
		gs.Stop()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && !errors.Is(serveErr, grpc.ErrServerStopped) {
		return serveErr
	}
	return nil
}

// connect returns a client of the Redis the URL names, or of an
// embedded miniredis when it is empty, and the function that closes both.
func connect(url string, env func(string) string, log *slog.Logger) (redis.UniversalClient, func(), error) {
	if url == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return nil, nil, err
		}
		log.Warn("NO REDIS GIVEN (-redis or REDIS_URL): rate-limit state is IN MEMORY, in an embedded miniredis: " +
			"lost when this process stops and NOT SHARED with other instances. Give -redis for production.")
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		return rdb, func() { rdb.Close(); mr.Close() }, nil
	}
	if strings.Contains(url, "://") {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("-redis: %v", err)
		}
		opts.ContextTimeoutEnabled = true
		rdb := redis.NewClient(opts)
		return rdb, func() { rdb.Close() }, nil
	}
	// The reference server's form: host:port (a socket path with
	// REDIS_SOCKET_TYPE=unix), a comma-separated list of nodes for a
	// cluster, or the master's name and the sentinels for Sentinel.
	uo := &redis.UniversalOptions{Password: env("REDIS_AUTH"), ContextTimeoutEnabled: true}
	if envBool(env, "REDIS_TLS") {
		return nil, nil, errors.New("REDIS_TLS: give a rediss:// URL instead")
	}
	parts := strings.Split(url, ",")
	switch strings.ToUpper(orDefault(env("REDIS_TYPE"), "SINGLE")) {
	case "SINGLE":
		network := "tcp"
		if strings.EqualFold(env("REDIS_SOCKET_TYPE"), "unix") {
			network = "unix"
		}
		o := uo.Simple()
		o.Network, o.Addr = network, url
		rdb := redis.NewClient(o)
		return rdb, func() { rdb.Close() }, nil
	case "CLUSTER":
		uo.Addrs = parts
		rdb := redis.NewClusterClient(uo.Cluster())
		return rdb, func() { rdb.Close() }, nil
	case "SENTINEL":
		if len(parts) < 2 {
			return nil, nil, errors.New("REDIS_TYPE=SENTINEL: REDIS_URL is the master's name, then the sentinels (mymaster,host:26379,host:26379)")
		}
		uo.MasterName, uo.Addrs = parts[0], parts[1:]
		rdb := redis.NewFailoverClient(uo.Failover())
		return rdb, func() { rdb.Close() }, nil
	}
	return nil, nil, fmt.Errorf("REDIS_TYPE %q: SINGLE, CLUSTER or SENTINEL", env("REDIS_TYPE"))
}
