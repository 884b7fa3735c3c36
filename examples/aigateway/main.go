// Command aigateway is the gateway in front of a model a new user would
// build: API keys with plans, read from a file reloaded on SIGHUP; per key,
// requests and tokens per minute and per calendar month (in a time zone),
// by plan; and at most 2 batch jobs in flight per key.
//
//	go run .                  # in examples/aigateway; writes a sample file and prints its path
//	go run . -config gateway.json
//	curl -H 'Authorization: Bearer sk-free-1' -d '{"max_tokens":300}' localhost:8080/v1/chat
//	kill -HUP <pid>                              # after editing the file
//
// Not here: gRPC (grpclimit is a nested module the main module does not
// import) and
// Prometheus metrics (promlimit, also a nested module). ADDR sets the
// address to listen on, REDIS_URL a real Redis; -h says so.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/run"
	"github.com/redlimit/redlimit/nethttp"
)

// sample is the configuration written when -config is not given: the
// API keys and their plans, and the limits of each plan. A rule without
// "tier=" is the default's: the free plan's here, and every plan's for
// the patterns its own rules do not name.
const sample = `{
  "keys": {"sk-free-1": "free", "sk-pro-1": "pro"},
  "rules": {
    "*": "20/m, 1000/month calendar=Europe/Berlin, 10000/m fixed_window unit=tokens, 200000/month calendar=Europe/Berlin unit=tokens",
    "* tier=pro": "600/m, 100000/month calendar=Europe/Berlin, 200000/m fixed_window unit=tokens, 20000000/month calendar=Europe/Berlin unit=tokens",
    "POST /v1/batches": "2 concurrent lease=10m"
  }
}
`

// Config is the gateway's file: API keys to plans, and the rules table,
// whose tiers are the plans.
type Config struct {
	Keys  map[string]string `json:"keys"`
	Rules json.RawMessage   `json:"rules"`
}

// parse reads a configuration: every key has a plan, and the rules are a
// valid table (redlimit.ParseRules).
func parse(data []byte) (map[string]string, redlimit.Rules, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, nil, err
	}
	for key, plan := range c.Keys {
		if key == "" || plan == "" {
			return nil, nil, fmt.Errorf("key %q: a key and its plan must not be empty", key)
		}
	}
	rules, err := redlimit.ParseRules(c.Rules)
	if err != nil {
		return nil, nil, err
	}
	return c.Keys, rules, nil
}

// Gateway is the limited API: the plans of its keys and its rules, both
// replaced at once by Reload.
type Gateway struct {
	keys  atomic.Pointer[map[string]string]
	rules *redlimit.RuleSet
	app   http.Handler
}

// apiKey is the request's API key, from "Authorization: Bearer KEY".
func apiKey(r *http.Request) string {
	key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return key
}

// New builds the gateway of a configuration on lim.
func New(lim *core.Limiter, data []byte) (*Gateway, error) {
	keys, rules, err := parse(data)
	if err != nil {
		return nil, err
	}
	g := &Gateway{}
	g.keys.Store(&keys)
	tokens, err := core.ParseLimits("200000/month calendar=Europe/Berlin unit=tokens")
	if err != nil {
		return nil, err
	}
	g.rules, err = redlimit.NewRuleSet(lim, rules,
		// Known keys only reach the limit (authenticate runs first).
		redlimit.WithKey(func(r *http.Request) (string, error) { return "key:" + apiKey(r), nil }),
		// A request's tier is its key's plan.
		redlimit.WithTier(func(q redlimit.Request) (string, error) {
			return (*g.keys.Load())[apiKey(q.HTTP)], nil
		}),
		// Tokens: the rules' limits of unit tokens are each plan's; these
		// are for a table that writes none.
		redlimit.WithBudget(redlimit.Budget{
			Limits:   tokens,
			Estimate: func(r *http.Request) int { return estimate },
			TakeRest: true,
		}),
		redlimit.WithHeaders(redlimit.HeadersBoth))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat", chat)
	mux.HandleFunc("POST /v1/batches", batch)
	g.app = g.authenticate(nethttp.Middleware(g.rules)(mux))
	return g, nil
}

// Reload puts a new configuration in place: keys and rules, or neither.
// The rules are checked first; on any error the gateway keeps what it has.
// A key keeps what it used of every limit whose algorithm and period stay,
// whatever its plan was and becomes.
func (g *Gateway) Reload(data []byte) error {
	keys, rules, err := parse(data)
	if err != nil {
		return err
	}
	if err := g.rules.Update(rules); err != nil {
		return err
	}
	g.keys.Store(&keys)
	return nil
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.app.ServeHTTP(w, r) }

// authenticate answers 401 to a request without a known API key.
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := (*g.keys.Load())[apiKey(r)]; !ok {
			http.Error(w, "unknown API key", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// estimate is what a request reserves of its key's tokens until the model
// says what it used: about a typical request's.
const estimate = 500

// chat stands for the model: it "uses" the request's max_tokens and
// reports them, which is what the request is charged.
func chat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MaxTokens int `json:"max_tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		http.Error(w, "bad request body", http.StatusBadRequest)
		return
	}
	redlimit.UsageFrom(r.Context()).Add("tokens", req.MaxTokens)
	fmt.Fprintf(w, `{"usage":{"total_tokens":%d}}`+"\n", req.MaxTokens)
}

// batch stands for a batch job: it holds one of its key's 2 slots while
// it runs (here, until the client or the test lets it go).
func batch(w http.ResponseWriter, r *http.Request) {
	if release, ok := r.Context().Value(holdKey{}).(chan struct{}); ok {
		<-release
	}
	io.WriteString(w, `{"status":"done"}`+"\n")
}

// holdKey is where a test puts a channel a batch job waits on.
type holdKey struct{}

// watch reloads the file on every signal until signals is closed.
func watch(signals <-chan os.Signal, g *Gateway, path string, log *slog.Logger) {
	for range signals {
		data, err := os.ReadFile(path)
		if err == nil {
			err = g.Reload(data)
		}
		if err != nil {
			log.Error("configuration not reloaded; the one in force stays", "file", path, "error", err)
			continue
		}
		log.Info("configuration reloaded", "file", path)
	}
}

var command = run.Command{
	Path: "cd examples/aigateway && go run .",
	Doc: `An AI API gateway: API keys with plans from a file (reloaded on SIGHUP);
requests and tokens per key per minute and per calendar month, by plan;
2 batch jobs in flight per key.`,
	Env: []string{run.Addr, run.RedisURL},
}

func main() {
	file := flag.String("config", "", "the configuration `file` (default: a sample, written to a temporary file)")
	command.Parse()
	rdb, where, stop, err := run.Redis()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	path := *file
	if path == "" {
		f, err := os.CreateTemp("", "aigateway-*.json")
		if err != nil {
			log.Fatal(err)
		}
		if _, err := f.WriteString(sample); err != nil {
			log.Fatal(err)
		}
		f.Close()
		path = f.Name()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	g, err := New(core.New(rdb), data)
	if err != nil {
		log.Fatalf("%s: %v", path, err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go watch(hup, g, path, slog.Default())
	addr := os.Getenv(run.Addr)
	if addr == "" {
		addr = run.DefaultAddr
	}
	fmt.Printf("aigateway on http://%s, limits kept in %s\nconfiguration %s; after editing it:\n  kill -HUP %d\n",
		addr, where, path, os.Getpid())
	log.Fatal(http.ListenAndServe(addr, g))
}
