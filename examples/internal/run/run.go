// Package run holds what the example programs share: their command line
// (-h documents the environment variables each reads), a Redis to talk to
// (REDIS_URL, else an embedded miniredis, so every example runs with no
// setup), serving an example app, and the checks their tests run.
package run

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// The environment variables the examples read.
const (
	// Addr is the address the servers (nethttp, gin, echo) listen on.
	Addr = "ADDR"
	// RedisURL is the Redis that keeps the limits, redis://host:port/db;
	// when it is unset or empty, an embedded miniredis does.
	RedisURL = "REDIS_URL"
)

// DefaultAddr is where the servers listen when ADDR is unset or empty.
const DefaultAddr = "localhost:8080"

// envHelp documents each variable for -h: what it is, then its default.
var envHelp = map[string][2]string{
	Addr:     {"the address to listen on, host:port", "default " + DefaultAddr},
	RedisURL: {"the Redis that keeps the limits, redis://[[user]:password@]host:port[/db]", "default: an embedded miniredis, nothing to set up"},
}

// Command describes an example program for its -h.
type Command struct {
	Path string   // how to run it: "go run ./examples/nethttp"
	Doc  string   // what it does, in a sentence or two
	Env  []string // the environment variables it reads: Addr, RedisURL
}

// Parse parses the program's command line (flag.CommandLine, with the
// flags the program defined). -h and -help print c's usage to stdout and
// exit 0; a bad flag or an argument prints the error and the usage to
// stderr and exits 2.
func (c Command) Parse() {
	if code, exit := c.parse(flag.CommandLine, os.Args[1:], os.Stdout); exit {
		os.Exit(code)
	}
}

// parse parses args with fs, writing -h's usage to stdout and errors to
// fs.Output(). It returns the exit status and whether to exit.
func (c Command) parse(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, exit bool) {
	fs.Init(fs.Name(), flag.ContinueOnError)
	fs.Usage = func() {} // printed below, to the right place
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.Usage(stdout, fs)
		return 0, true
	case err != nil: // fs printed it
	case fs.NArg() > 0:
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
	default:
		return 0, false
	}
	c.Usage(fs.Output(), fs)
	return 2, true
}

// Usage writes how to run the program, what it does, the environment
// variables it reads with their defaults, and fs's flags.
func (c Command) Usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n", c.Path, c.Doc)
	if len(c.Env) > 0 {
		fmt.Fprintf(w, "\nEnvironment:\n")
		width := 0
		for _, name := range c.Env {
			width = max(width, len(name))
		}
		for _, name := range c.Env {
			help := envHelp[name]
			fmt.Fprintf(w, "  %-*s  %s\n  %-*s  (%s)\n", width, name, help[0], width, "", help[1])
		}
	}
	fmt.Fprintf(w, "\nFlags:\n")
	out := fs.Output()
	defer fs.SetOutput(out)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, "  -h\tprint this help\n")
}

// Redis returns a client of the server at REDIS_URL (redis://host:port/db)
// when it is set, else of an embedded miniredis; a description of where it
// points; and a function that closes both.
func Redis() (rdb *redis.Client, where string, stop func(), err error) {
	if url := os.Getenv(RedisURL); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		opts.ContextTimeoutEnabled = true // a caller alone sends its own decision (docs/engine.md)
		rdb = redis.NewClient(opts)
		return rdb, "Redis at " + opts.Addr, func() { rdb.Close() }, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, err
	}
	rdb = redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	return rdb, "embedded miniredis (set REDIS_URL to use a real Redis)", func() {
		rdb.Close()
		m.Close()
	}, nil
}

// Serve runs an example app on ADDR (default localhost:8080) until killed,
// after printing how to try it.
func Serve(framework string, newApp func(*core.Limiter) http.Handler) {
	rdb, where, stop, err := Redis()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	addr := os.Getenv(Addr)
	if addr == "" {
		addr = DefaultAddr
	}
	fmt.Printf("%s example on http://%s, limits kept in %s\n", framework, addr, where)
	fmt.Printf("try:\n  curl -i http://%s/hello\n  for i in 1 2 3 4 5 6; do curl -i -X POST http://%s/login; done\n"+
		"  curl -i -H 'Authorization: Bearer alice' http://%s/api/orders\n", addr, addr, addr)
	log.Fatal(http.ListenAndServe(addr, newApp(core.New(rdb))))
}

// mainEnv, set to "1", makes an example's test binary run the example's
// main instead of its tests (see TestMain).
const mainEnv = "REDLIMIT_EXAMPLE_MAIN"

// TestMain is an example's TestMain: it runs the tests, or, in the test
// binary CheckHelp starts, the example's main, on a command line of its
// own (without the test flags).
func TestMain(m *testing.M, main func()) {
	if os.Getenv(mainEnv) == "1" {
		flag.CommandLine = flag.NewFlagSet(os.Args[0], flag.ExitOnError)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// CheckHelp runs the example with -h, as `go run ./examples/NAME -h` does
// (its own test binary, through TestMain, so nothing is built), and checks
// that it exits 0 and prints each of want.
func CheckHelp(t *testing.T, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-h")
	// Were -h ignored, a server would start: on a port of its own.
	cmd.Env = append(os.Environ(), mainEnv+"=1", Addr+"=127.0.0.1:0", RedisURL+"=")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("-h: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	for _, w := range want {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("-h does not print %q:\n%s", w, &stdout)
		}
	}
}

// Check is the examples' test, on an embedded Redis and on a real one
// (internal/redistest): what the README's quick start promises of the app
// every example builds. The clock stands still, so that a slow run under
// -race refills nothing.
func Check(t *testing.T, newApp func(*core.Limiter) http.Handler) { onBoth(t, newApp, check) }

// onBoth runs f as parallel subtests on an embedded Redis and on a real one.
func onBoth(t *testing.T, newApp func(*core.Limiter) http.Handler, f func(*testing.T, func(*core.Limiter) http.Handler, *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		f(t, newApp, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		f(t, newApp, redistest.Standalone(t).Client(t))
	})
}

func check(t *testing.T, newApp func(*core.Limiter) http.Handler, rdb *redis.Client) {
	t.Cleanup(func() { rdb.Close() })
	still := time.Now()
	a := &app{t, newApp(core.New(rdb, core.WithTimeout(10*time.Second), core.WithClock(func() time.Time { return still })))}
	a.checkEveryRequest()
	a.checkLogin()
	a.checkAPI()
}

// app is an example app under test.
type app struct {
	t *testing.T
	http.Handler
}

// send sends a request from the address from, with header's name and
// value pairs set.
func (a *app) send(method, path, from string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = from + ":4000"
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	a.ServeHTTP(w, r)
	return w
}

// want fails the test unless w has status and header's name and value
// pairs.
func (a *app) want(what string, w *httptest.ResponseRecorder, status int, header ...string) {
	a.t.Helper()
	if w.Code != status {
		a.t.Fatalf("%s: %d %q, want %d", what, w.Code, w.Body, status)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if got := w.Header().Get(header[i]); got != header[i+1] {
			a.t.Fatalf("%s: %s %q, want %q (headers %v)", what, header[i], got, header[i+1], w.Header())
		}
	}
}

// checkEveryRequest: every request, 20 a second per client address;
// behind the load balancer (10.0.0.0/8), the forwarded address is the
// client, and anyone else's X-Forwarded-For is not believed.
func (a *app) checkEveryRequest() {
	a.want("GET /hello", a.send("GET", "/hello", "198.51.100.9"), http.StatusOK,
		"X-RateLimit-Limit", "20", "X-RateLimit-Remaining", "19", "X-RateLimit-Reset", "1")
	for i := 0; i < 19; i++ {
		a.send("GET", "/hello", "198.51.100.9")
	}
	a.want("the 21st GET /hello in a second", a.send("GET", "/hello", "198.51.100.9"), http.StatusTooManyRequests,
		"Retry-After", "1")

	a.want("the same client through the balancer", a.send("GET", "/hello", "10.0.0.5", "X-Forwarded-For", "198.51.100.9"),
		http.StatusTooManyRequests)
	a.want("another client through the balancer", a.send("GET", "/hello", "10.0.0.5", "X-Forwarded-For", "203.0.113.50"),
		http.StatusOK, "X-RateLimit-Remaining", "19")
	a.want("a forged X-Forwarded-For", a.send("GET", "/hello", "192.0.2.77", "X-Forwarded-For", "198.51.100.9"),
		http.StatusOK, "X-RateLimit-Remaining", "19")
}

// checkLogin: password guessing, 5 attempts a minute per client.
func (a *app) checkLogin() {
	for i := 1; i <= 5; i++ {
		a.want("login", a.send("POST", "/login", "203.0.113.8"), http.StatusOK)
	}
	a.want("the sixth login in a minute", a.send("POST", "/login", "203.0.113.8"), http.StatusTooManyRequests,
		"Retry-After", "60")
}

// checkAPI: the API, signed in, 10 a second and 5000 a day per user, both
// announced.
func (a *app) checkAPI() {
	a.want("the API signed out", a.send("GET", "/api/orders", "203.0.113.9"), http.StatusUnauthorized)
	alice := []string{"Authorization", "Bearer alice"}
	a.want("the API as alice", a.send("GET", "/api/orders", "203.0.113.9", alice...), http.StatusOK,
		"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "9",
		"RateLimit", `"api";r=9;t=1, "api-24h";r=4999;t=86400`)
	for i := 0; i < 9; i++ {
		a.send("GET", "/api/orders", "203.0.113.10", alice...) // another address: the limit is alice's
	}
	a.want("alice's 11th in a second", a.send("GET", "/api/orders", "203.0.113.11", alice...), http.StatusTooManyRequests,
		"Retry-After", "1", "X-RateLimit-Remaining", "0")
	a.want("bob", a.send("GET", "/api/orders", "203.0.113.11", "Authorization", "Bearer bob"), http.StatusOK,
		"X-RateLimit-Remaining", "9")
}

// CheckPartners is the gin and echo examples' test of their partner API,
// on an embedded Redis and on a real one: GET /partner/stock takes a
// known X-Api-Key, whose partner a handler stores with c.Set, and allows
// 100 calls a minute per partner, from whichever address, keyed by the
// adapter's Key.
func CheckPartners(t *testing.T, newApp func(*core.Limiter) http.Handler) {
	onBoth(t, newApp, checkPartners)
}

func checkPartners(t *testing.T, newApp func(*core.Limiter) http.Handler, rdb *redis.Client) {
	t.Cleanup(func() { rdb.Close() })
	still := time.Now()
	app := newApp(core.New(rdb, core.WithTimeout(10*time.Second), core.WithClock(func() time.Time { return still })))
	send := func(i int, apiKey string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/partner/stock", nil)
		r.RemoteAddr = fmt.Sprintf("198.51.100.%d:4000", i%100+1) // under the global limit per address
		if apiKey != "" {
			r.Header.Set("X-Api-Key", apiKey)
		}
		w := httptest.NewRecorder()
		app.ServeHTTP(w, r)
		return w
	}
	if w := send(0, ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("without an API key: %d, want 401", w.Code)
	}
	if w := send(0, "key-nobody"); w.Code != http.StatusUnauthorized {
		t.Fatalf("an unknown API key: %d, want 401", w.Code)
	}
	// Each address makes at most two calls, far under the global limit per
	// address: a denial is the partner's limit.
	for i := 0; i < 100; i++ {
		if w := send(i, "key-acme"); w.Code != http.StatusOK {
			t.Fatalf("acme's call %d: %d", i+1, w.Code)
		}
	}
	if w := send(100, "key-acme"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("acme's 101st call in a minute: %d, Retry-After %q; want 429", w.Code, w.Header().Get("Retry-After"))
	}
	if w := send(100, "key-globex"); w.Code != http.StatusOK {
		t.Fatalf("globex from the same address: %d, want 200", w.Code)
	}
}
