package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redlimit/redlimit/core"
)

// settings are the program's flags and environment, read once at start.
type settings struct {
	config, redis, grpcAddr, httpAddr string
	grpcUDS, debugAddr                string
	merge, shadow, chargeDenied       bool
	quota, dynamicMetadata            bool
	headers, failure, prefix, level   string
	compat                            string // "redlimit" or "reference"
	timeout, reload                   time.Duration
	timeoutSet                        bool // by -timeout or REDLIMIT_TIMEOUT
	ignoreDotFiles                    bool
	requireConfig                     bool // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
	logJSON                           bool
	denyCacheKeys                     int // -1: the engine's default
	maxConnAge, maxConnAgeGrace       time.Duration
	headerNames                       [3]string // LIMIT_RESPONSE_HEADERS_ENABLED's names; empty when off
	metrics                           metricsSettings
	grpcTLS                           tlsFiles
	redisOpts                         redisSettings
}

// metricsSettings say where statistics are served.
type metricsSettings struct {
	disabled   bool              // DISABLE_STATS
	promAddr   string            // USE_PROMETHEUS's listener, "" for none
	promPath   string            // its path
	extraLabel map[string]string // EXTRA_TAGS, on every metric
}

// tlsFiles are the files of a TLS configuration.
type tlsFiles struct {
	on                   bool
	cert, key, ca, san   string
	skipHostVerification bool
}

// env reads the environment; lookup says whether a variable is set.
type env struct {
	get    func(string) string
	lookup func(string) (string, bool)
}

// newEnv returns the env of a getter: a variable is set when it is not
// empty.
func newEnv(get func(string) string) env {
	return env{get: get, lookup: func(k string) (string, bool) { v := get(k); return v, v != "" }}
}

// or returns the variable's value, or def when it is not set.
func (e env) or(name, def string) string {
	if v, ok := e.lookup(name); ok {
		return v
	}
	return def
}

// parse reads the flags, each defaulting to its environment variable (the
// reference server's where it has one), then the settings that have no
// flag. An error names the flag or variable at fault, on one line.
func parse(args []string, e env, stderr io.Writer) (settings, error) {
	s, err := parseFlags(args, e, stderr)
	if err != nil {
		return s, err
	}
	if err := checkReference(e); err != nil {
		return s, err
	}
	steps := []func(*settings, env) error{parseServing, parseCounting, parseMetrics, parseRedis}
	for _, step := range steps {
		if err := step(&s, e); err != nil {
			return s, err
		}
	}
	return s, nil
}

// parseFlags reads the command line.
func parseFlags(args []string, e env, stderr io.Writer) (settings, error) {
	s := settings{denyCacheKeys: -1}
	fs := flag.NewFlagSet("redlimit-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	compat := e.or("REDLIMIT_COMPAT", "redlimit")
	fs.StringVar(&s.compat, "compat", compat, "redlimit (answers of redlimit's engine) or reference (answers as envoyproxy/ratelimit)")
	fs.StringVar(&s.config, "config", configDir(e), "directory of the configuration files")
	fs.StringVar(&s.redis, "redis", e.get("REDIS_URL"), "Redis URL or host:port; empty: an embedded in-memory Redis")
	fs.StringVar(&s.grpcAddr, "grpc", hostPort(e, "GRPC_HOST", "GRPC_PORT", "8081"), "gRPC listen address")
	fs.StringVar(&s.httpAddr, "http", hostPort(e, "HOST", "PORT", "8080"), "HTTP listen address (/healthcheck, /metrics, /json)")
	fs.BoolVar(&s.merge, "merge", envBool(e, "MERGE_DOMAIN_CONFIG"), "let several files configure one domain")
	fs.BoolVar(&s.shadow, "shadow", envBool(e, "SHADOW_MODE"), "answer OK overall whatever the limits")
	fs.StringVar(&s.headers, "headers", e.get("REDLIMIT_HEADERS"), "rate-limit response fields: xratelimit (the default), draft, both or none")
	fs.StringVar(&s.failure, "failure", e.get("REDLIMIT_FAILURE"), "when Redis fails: open (the default) or closed (the default with -compat reference)")
	fs.StringVar(&s.prefix, "prefix", e.or("CACHE_KEY_PREFIX", "redlimit:"), "prefix of every Redis key")
	fs.StringVar(&s.level, "log-level", e.or("LOG_LEVEL", "info"), "trace, debug, info, warn (warning), error, fatal or panic")
	fs.StringVar(&s.debugAddr, "debug", debugAddr(e), "debug listen address (/debug/pprof/, /rlconfig, /stats); empty: none")
	var chargeDenied string
	fs.StringVar(&chargeDenied, "charge-denied", e.get("REDLIMIT_CHARGE_DENIED"), "keep a denied request's charge on the descriptors that allowed it (true or false)")
	var err error
	if s.timeout, err = envDuration(e, "REDLIMIT_TIMEOUT", core.DefaultTimeout); err != nil {
		return s, err
	}
	if s.reload, err = envDuration(e, "REDLIMIT_RELOAD", time.Second); err != nil {
		return s, err
	}
	fs.DurationVar(&s.timeout, "timeout", s.timeout, "bound on one decision")
	fs.DurationVar(&s.reload, "reload", s.reload, "how often the config directory is checked for changes")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	timeoutSet := false
	fs.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
	if _, ok := e.lookup("REDLIMIT_TIMEOUT"); ok || timeoutSet {
		s.timeoutSet = true
	}
	return s, s.resolveModes(e, chargeDenied)
}

// resolveModes checks -compat and works out the defaults that depend on
// it: the failure policy and who pays for a request denied overall.
func (s *settings) resolveModes(e env, chargeDenied string) error {
	ref := s.compat == "reference"
	if !ref && s.compat != "redlimit" {
		return fmt.Errorf("REDLIMIT_COMPAT (-compat) %q: redlimit or reference", s.compat)
	}
	if s.failure == "" {
		s.failure = map[bool]string{false: "open", true: "closed"}[ref]
	}
	if ref && !s.timeoutSet { // the reference waits for Redis as long as REDIS_TIMEOUT says
		d, err := envDuration(e, "REDIS_TIMEOUT", 10*time.Second)
		if err != nil {
			return err
		}
		s.timeout = d
	}
	if ref && s.headers != "" {
		return errors.New("REDLIMIT_HEADERS (-headers) with REDLIMIT_COMPAT=reference: the reference's fields are LIMIT_RESPONSE_HEADERS_ENABLED's; unset one")
	}
	s.headers = or(s.headers, "xratelimit")
	// The reference charges every descriptor of a denied request unless
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; redlimit refunds them.
	s.chargeDenied = ref
	if v, ok := e.lookup("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"); ok {
		stop, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT %q: true or false", v)
		}
		s.chargeDenied = !stop
	}
	if chargeDenied != "" {
		charge, err := strconv.ParseBool(chargeDenied)
		if err != nil {
			return fmt.Errorf("REDLIMIT_CHARGE_DENIED (-charge-denied) %q: true or false", chargeDenied)
		}
		if _, ok := e.lookup("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"); ok && charge != s.chargeDenied {
			return errors.New("REDLIMIT_CHARGE_DENIED (-charge-denied) contradicts STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: set one")
		}
		s.chargeDenied = charge
	}
	return nil
}

// configDir is the reference server's configuration directory,
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, when
// RUNTIME_ROOT is set; ./config otherwise.
func configDir(e env) string {
	root, ok := e.lookup("RUNTIME_ROOT")
	if !ok {
		return "config"
	}
	return filepath.Join(root, e.get("RUNTIME_SUBDIRECTORY"), e.or("RUNTIME_APPDIRECTORY", "config"))
}

// hostPort is the listen address of a host and a port variable, each
// defaulting as the reference's (all addresses; def).
func hostPort(e env, host, port, def string) string {
	return net.JoinHostPort(e.get(host), e.or(port, def))
}

// debugAddr is DEBUG_HOST:DEBUG_PORT when either is set (the reference
// listens on :6070 always); "" otherwise.
func debugAddr(e env) string {
	_, h := e.lookup("DEBUG_HOST")
	_, p := e.lookup("DEBUG_PORT")
	if !h && !p {
		return ""
	}
	return hostPort(e, "DEBUG_HOST", "DEBUG_PORT", "6070")
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// envBool reads a boolean variable: unset is false; a value
// strconv.ParseBool does not read is false too, as the reference's
// envconfig would refuse it at start (checkReference refuses it here).
func envBool(e env, name string) bool {
	b, _ := strconv.ParseBool(e.get(name))
	return b
}

func envDuration(e env, name string, def time.Duration) (time.Duration, error) {
	v, ok := e.lookup(name)
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: a duration such as 100ms or 1s", name, v)
	}
	return d, nil
}

func envInt(e env, name string, def int) (int, error) {
	v, ok := e.lookup(name)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: a whole number", name, v)
	}
	return n, nil
}
