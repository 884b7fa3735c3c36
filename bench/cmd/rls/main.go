// Command rls runs Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on two
// servers side by side, on one real redis-server: the reference server,
// envoyproxy/ratelimit, and redlimit's envoyrls/cmd/redlimit-rls.
//
//	cd bench && go run ./cmd/rls                      # 3 rounds of 1/16/128 callers × 1/10 000 values
//	go run ./cmd/rls -rounds=1 -duration=2s -callers=16 -values=1
//	go run ./cmd/rls -redlimit=ref                    # both sides the reference: the harness's own noise
//	go run ./cmd/rls -profile=/tmp/rlsprof            # then one CPU profile of each server in each cell
//
// Both servers run as separate processes, built by this program with
// `go build` (the reference from the Go module proxy, at -ref-version, into
// a temporary directory; redlimit-rls from its module's source at
// -redlimit), each with its own gRPC listener on loopback, both on the same
// redis-server, which this program starts on a free port and flushes before
// every measurement. The load comes from this process through the
// generated client of go-control-plane, like Envoy's: -callers goroutines,
// each with one call in flight, over -conns HTTP/2 connections per server.
//
// For every cell (callers × descriptor values) and round, each server is
// warmed up, then measured for -duration (and at most -max-calls calls);
// the order of the two alternates from cell to cell and round to round, so
// that the shared machine's noise hits both alike. Then the exactness
// check: -exact-callers goroutines send -exact-requests requests for one
// descriptor value limited to -exact-limit a minute, and the OK answers of
// each server are counted; then as many with hits_addend 1 to
// -exact-max-hits; with -exact-edge, then for one second across the start
// of a minute of the wall clock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/redlimit/redlimit/bench/internal/harness"
)

func main() { harness.Main("rls", mainErr) }

// refModule is the reference server's Go module, and refVersion the
// version built when -ref is not given.
const (
	refModule  = "github.com/envoyproxy/ratelimit"
	refVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

// config is one run's parameters.
type config struct {
	Rounds        int
	Duration      time.Duration
	Warmup        time.Duration
	MaxCalls      int64
	Callers       []int
	Values        []int
	Conns         int
	ExactLimit    int
	ExactRequests int
	ExactCallers  int
	ExactMaxHits  int
	ExactEdge     bool
	ProfileDir    string

	RefBin       string // a built reference server
	RefEnv       []string
	RedlimitBin  string // a built redlimit-rls, or "ref": a second reference server
	RedlimitArgs []string
	RedisServer  string
	Progress     io.Writer
}

func defaultConfig() config {
	return config{
		Rounds:        3,
		Duration:      3 * time.Second,
		Warmup:        time.Second,
		MaxCalls:      2_000_000,
		Callers:       []int{1, 16, 128},
		Values:        []int{1, 10_000},
		Conns:         2,
		ExactLimit:    1000,
		ExactRequests: 3000,
		ExactCallers:  16,
		ExactMaxHits:  10,
		RedisServer:   "redis-server",
	}
}

func (c config) validate() error {
	switch {
	case c.Rounds < 1:
		return errors.New("-rounds must be at least 1")
	case c.Duration <= 0:
		return errors.New("-duration must be positive")
	case c.Warmup < 0:
		return errors.New("-warmup must not be negative")
	case c.MaxCalls < 1:
		return errors.New("-max-calls must be positive")
	case c.Conns < 1:
		return errors.New("-conns must be positive")
	case c.ExactRequests > 0 && (c.ExactLimit < 1 || c.ExactCallers < 1):
		return errors.New("-exact-limit and -exact-callers must be positive")
	}
	return nil
}

// cliOptions are the flags that are not part of a config.
type cliOptions struct {
	ref, refVersion string
	redlimit        string
	markdown        bool
	quiet           bool
}

func parseFlags(args []string, stderr io.Writer) (config, cliOptions, error) {
	cfg := defaultConfig()
	var opts cliOptions
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: rls [flags]\n\n"+
			"ShouldRateLimit calls per second of envoyproxy/ratelimit and redlimit-rls on one redis-server, side by side.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "repeat the matrix this many times (the servers alternate) and print medians")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time of each server in each cell")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured calls before each measurement")
	fs.Int64Var(&cfg.MaxCalls, "max-calls", cfg.MaxCalls, "at most this many calls in one measurement")
	callers := fs.String("callers", "1,16,128", "comma-separated counts of concurrent callers")
	values := fs.String("values", "1,10000", "comma-separated counts of distinct descriptor values (1: one hot key)")
	fs.IntVar(&cfg.Conns, "conns", cfg.Conns, "gRPC connections (HTTP/2) to each server; callers share them round-robin")
	fs.IntVar(&cfg.ExactLimit, "exact-limit", cfg.ExactLimit, "exactness check: requests per minute of its descriptor")
	fs.IntVar(&cfg.ExactRequests, "exact-requests", cfg.ExactRequests, "exactness check: requests sent for one value in each round (0: no check)")
	fs.IntVar(&cfg.ExactCallers, "exact-callers", cfg.ExactCallers, "exactness check: concurrent callers")
	fs.BoolVar(&cfg.ExactEdge, "exact-edge", false, "exactness check, third burst: callers send for 1 s from half a second before a minute of the wall clock begins (waits for it: up to a minute per server and round)")
	fs.IntVar(&cfg.ExactMaxHits, "exact-max-hits", cfg.ExactMaxHits, "exactness check, second burst: hits_addend 1 to this in turn (1: no second burst)")
	fs.StringVar(&cfg.ProfileDir, "profile", "", "after the rounds, take a CPU profile (/debug/pprof/profile) of each server that serves one, cell by cell, into this directory")
	fs.StringVar(&opts.ref, "ref", "", "the reference server's binary (default: go build "+refModule+"/src/service_cmd at -ref-version)")
	fs.StringVar(&opts.refVersion, "ref-version", refVersion, "the version of "+refModule+" to build when -ref is not given")
	refEnv := fs.String("ref-env", "", "extra environment of the reference server, comma-separated NAME=VALUE (e.g. REDIS_POOL_SIZE=64)")
	fs.StringVar(&opts.redlimit, "redlimit", "../envoyrls/cmd/redlimit-rls", "redlimit-rls: its package directory (built with go build) or a binary; \"ref\" runs a second reference server instead")
	rlArgs := fs.String("redlimit-args", "", "extra flags of redlimit-rls, space-separated")
	fs.StringVar(&cfg.RedisServer, "redis-server", cfg.RedisServer, "the redis-server binary to start")
	fs.BoolVar(&opts.markdown, "markdown", false, "print Markdown tables")
	fs.BoolVar(&opts.quiet, "q", false, "do not report progress on stderr")
	if err := harness.Parse(fs, args); err != nil {
		return cfg, opts, err
	}
	var err error
	if cfg.Callers, err = harness.ParseInts(*callers); err != nil {
		return cfg, opts, fmt.Errorf("-callers: %w", err)
	}
	if cfg.Values, err = harness.ParseInts(*values); err != nil {
		return cfg, opts, fmt.Errorf("-values: %w", err)
	}
	if *refEnv != "" {
		for _, kv := range strings.Split(*refEnv, ",") {
			if !strings.Contains(kv, "=") {
				return cfg, opts, fmt.Errorf("-ref-env: %q is not NAME=VALUE", kv)
			}
			cfg.RefEnv = append(cfg.RefEnv, strings.TrimSpace(kv))
		}
	}
	cfg.RedlimitArgs = strings.Fields(*rlArgs)
	return cfg, opts, cfg.validate()
}

func mainErr(args []string, stdout, stderr io.Writer) error {
	cfg, opts, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if !opts.quiet {
		cfg.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	tmp, err := os.MkdirTemp("", "redlimit-rls-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	if cfg.RefBin = opts.ref; cfg.RefBin == "" {
		cfg.progress("building %s@%s", refModule, opts.refVersion)
		if cfg.RefBin, err = buildReference(ctx, opts.refVersion, tmp); err != nil {
			return err
		}
	}
	switch cfg.RedlimitBin = opts.redlimit; {
	case cfg.RedlimitBin == "ref":
	default:
		st, err := os.Stat(cfg.RedlimitBin)
		if err != nil {
			return fmt.Errorf("-redlimit: %w (build envoyrls/cmd/redlimit-rls, or pass its directory or binary; -redlimit=ref tests the harness on two reference servers)", err)
		}
		if st.IsDir() {
			cfg.progress("building redlimit-rls in %s", cfg.RedlimitBin)
			if cfg.RedlimitBin, err = buildRedlimit(ctx, cfg.RedlimitBin, tmp); err != nil {
				return err
			}
		}
	}

	rep, err := run(ctx, cfg, tmp)
	if err != nil {
		return err
	}
	if opts.markdown {
		rep.writeMarkdown(stdout)
	} else {
		rep.writeText(stdout)
	}
	if n := rep.errors(); n > 0 {
		return fmt.Errorf("%d calls failed or were denied in the throughput cells (see the errors column)", n)
	}
	return nil
}

func (c config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}
