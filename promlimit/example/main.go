// Command example serves a small API limited by redlimit and exposes its
// decisions, and the Go runtime's metrics, at /metrics for Prometheus.
//
//	go run ./example                      # from promlimit/
//	curl -i http://localhost:8080/hello
//	curl http://localhost:8080/metrics | grep redlimit_
//
// It listens on ADDR (default localhost:8080) and keeps its limits in the
// Redis at REDIS_URL, or in an embedded miniredis when REDIS_URL is unset;
// -h says so too.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
	"github.com/redlimit/redlimit/promlimit"
)

const defaultAddr = "localhost:8080"

const usage = `Usage: go run ./example [flags]    (in promlimit/)

Serves GET /hello (10 a second per client), POST /login (3 a minute per
client) and GET /metrics, the Prometheus exposition of redlimit's
decisions (redlimit_decisions_total, redlimit_decision_duration_seconds,
redlimit_breaker_open) and of the Go runtime.

Environment:
  ADDR       the address to listen on, host:port
             (default ` + defaultAddr + `)
  REDIS_URL  the Redis that keeps the limits, redis://[[user]:password@]host:port[/db]
             (default: an embedded miniredis, nothing to set up)

Flags:
  -h	print this help
`

func main() {
	if code, exit := parseArgs(os.Args[1:], os.Stdout, os.Stderr); exit {
		os.Exit(code)
	}
	rdb, where, stop, err := redisClient()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	lim := core.New(rdb)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	app, err := newApp(lim, reg)
	if err != nil {
		log.Fatal(err)
	}
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	fmt.Printf("API on http://%s, limits kept in %s\n", addr, where)
	fmt.Printf("try:\n  for i in 1 2 3 4; do curl -i -X POST http://%s/login; done\n  curl -s http://%s/metrics | grep redlimit_\n", addr, addr)
	log.Fatal(http.ListenAndServe(addr, app))
}

// parseArgs handles the command line: -h prints the usage to stdout (exit
// 0); anything else but no arguments prints it to stderr (exit 2).
func parseArgs(args []string, stdout, stderr io.Writer) (code int, exit bool) {
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0, true
	case err != nil:
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
	default:
		return 0, false
	}
	fmt.Fprint(stderr, usage)
	return 2, true
}

// newApp returns the API, its limits observed by metrics registered with
// reg, and /metrics serving reg.
func newApp(lim *core.Limiter, reg *prometheus.Registry) (http.Handler, error) {
	metrics, err := promlimit.New(reg)
	if err != nil {
		return nil, err
	}
	if err := metrics.WatchLimiter(lim, "default"); err != nil {
		return nil, err
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "welcome\n") })

	mux := http.NewServeMux()
	mux.Handle("GET /hello", nethttp.New(lim, core.PerSecond(10), redlimit.WithName("hello"), metrics.Observer())(hello))
	mux.Handle("POST /login", nethttp.New(lim, core.PerMinute(3), redlimit.WithName("login"), metrics.Observer())(login))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux, nil
}

// redisClient returns a client of the Redis at REDIS_URL, or of an embedded
// miniredis when it is unset; where it points; and a function closing both.
func redisClient() (rdb *redis.Client, where string, stop func(), err error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		rdb = redis.NewClient(opts)
		return rdb, "Redis at " + opts.Addr, func() { rdb.Close() }, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, err
	}
	rdb = redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, "embedded miniredis (set REDIS_URL to use a real Redis)", func() {
		rdb.Close()
		m.Close()
	}, nil
}
