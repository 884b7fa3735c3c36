// Command redlimit-rls is Envoy's rate limit service on redlimit's engine:
// it answers ShouldRateLimit (envoy.service.ratelimit.v3) over gRPC with
// the limits of a directory of YAML files in the format of the reference
// server, envoyproxy/ratelimit, on a Redis shared by any number of
// instances. It reads the reference's environment variables: each one is
// honoured, or refused at start with one line that says why, or read and
// said (in one line at start) to change nothing here.
//
//	redlimit-rls -config ./config -redis redis://localhost:6379
//
// Flags, each with the environment variable that sets it when the flag is
// not given (the reference server's name where it has one):
//
//	-compat MODE      REDLIMIT_COMPAT: redlimit (default: the answers of
//	                  redlimit's engine) or reference (answers as the
//	                  reference server's, docs/envoy.md)
//	-config DIR       RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
//	                  (default ./config); every file under it, as the
//	                  reference reads them (RUNTIME_IGNOREDOTFILES skips
//	                  dot files), reloaded when they change
//	-redis URL        REDIS_URL: redis://, rediss:// or unix:// URL, or the
//	                  reference's host:port (with REDIS_AUTH, REDIS_TLS,
//	                  REDIS_TYPE=SINGLE|CLUSTER|SENTINEL); empty (the
//	                  default) starts an embedded in-memory Redis
//	-grpc ADDR        GRPC_HOST and GRPC_PORT (default :8081), or GRPC_UDS
//	-http ADDR        HOST and PORT (default :8080): /healthcheck,
//	                  /metrics, /json
//	-debug ADDR       DEBUG_HOST and DEBUG_PORT (none unless set):
//	                  /debug/pprof/, /rlconfig, /stats
//	-merge            MERGE_DOMAIN_CONFIG: let several files configure one
//	                  domain
//	-shadow           SHADOW_MODE: answer OK overall, whatever the limits
//	-headers PROFILE  REDLIMIT_HEADERS: xratelimit (default), draft, both
//	                  or none; LIMIT_RESPONSE_HEADERS_ENABLED=true with
//	                  LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
//	                  LIMIT_RESET_HEADER names the X-RateLimit fields
//	-failure POLICY   REDLIMIT_FAILURE: open (default) or closed (the
//	                  default with -compat reference)
//	-prefix PREFIX    CACHE_KEY_PREFIX (default "redlimit:")
//	-timeout D        REDLIMIT_TIMEOUT: bound on one decision (default 100ms;
//	                  with -compat reference, REDIS_TIMEOUT's 10s)
//	-reload D         REDLIMIT_RELOAD: how often the config directory is
//	                  checked for changes (default 1s)
//	-charge-denied B  REDLIMIT_CHARGE_DENIED or the reference's
//	                  STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: keep a
//	                  denied request's charge on the descriptors that
//	                  allowed it (default false; true with -compat reference)
//	-log-level LEVEL  LOG_LEVEL: trace, debug, info (default), warn
//	                  (warning), error, fatal or panic; LOG_FORMAT=json
//
// docs/envoy.md lists every other setting of the reference's and what
// redlimit-rls does with it. It starts serving once Redis answers (as the
// reference, REDIS_STARTUP_*), with the configuration loaded or, if it
// does not load, answering every request "no rate limit configuration
// loaded" until it does. It stops cleanly on SIGINT or SIGTERM:
// /healthcheck fails at once, then the gRPC and HTTP servers finish the
// requests in flight (at most 10 s).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redlimit/redlimit/core"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Environ(), os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "redlimit-rls:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, with the flags args and the environment
// environ (NAME=VALUE), logging to stderr.
func run(ctx context.Context, args, environ []string, stderr io.Writer) error {
	e := envOf(environ)
	s, err := parse(args, e, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(&s, stderr)
	if err != nil {
		return err
	}
	for _, line := range notes(environ) {
		log.Info(line)
	}
	rdb, closeRedis, err := connect(&s, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	if err := waitForRedis(ctx, rdb, &s.redisOpts, log); err != nil {
		return err
	}
	opts := []core.Option{core.WithTimeout(s.timeout), core.WithPrefix(s.prefix), core.WithLogger(log)}
	if s.denyCacheKeys >= 0 {
		opts = append(opts, core.WithDenyCache(s.denyCacheKeys))
	}
	a, err := newApp(&s, core.New(rdb, opts...), rdb, log)
	if err != nil {
		return err
	}
	return a.serve(ctx)
}

// envOf returns the env of a list of NAME=VALUE; a variable set to ""
// is not set.
func envOf(environ []string) env {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return newEnv(func(k string) string { return m[k] })
}

// newLogger returns the program's logger: LOG_LEVEL's level (the
// reference's names: trace and fatal read as below debug and above
// error), in text or, with LOG_FORMAT=json, in JSON with the
// reference's field names (@timestamp, @message, level).
func newLogger(s *settings, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(s.level) {
	case "trace":
		level = slog.LevelDebug - 4
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	case "fatal", "panic":
		level = slog.LevelError + 4
	default:
		return nil, fmt.Errorf("LOG_LEVEL (-log-level) %q: trace, debug, info, warn (warning), error, fatal or panic", s.level)
	}
	if !s.logJSON {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), nil
	}
	rename := func(_ []string, a slog.Attr) slog.Attr {
		switch a.Key {
		case slog.TimeKey:
			a.Key = "@timestamp"
		case slog.MessageKey:
			a.Key = "@message"
		case slog.LevelKey:
			a.Value = slog.StringValue(strings.ReplaceAll(strings.ToLower(a.Value.String()), "warn", "warning"))
		}
		return a
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: rename})), nil
}
