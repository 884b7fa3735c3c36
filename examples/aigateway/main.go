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
// The same keys, plans and limits serve one gRPC method,
// aigateway.Gateway/Chat (on -grpc, default localhost:9090), decided by
// the very rules table the HTTP routes are: a key's requests and tokens
// are counted once, whichever protocol they come by. GET /metrics is the
// Prometheus exposition of every decision (promlimit). ADDR sets the
// address to listen on, REDIS_URL a real Redis; -h says so. It is a
// module of its own, so that the main module never requires grpc or
// Prometheus.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/run"
	"github.com/redlimit/redlimit/nethttp"
	"github.com/redlimit/redlimit/promlimit"
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
// replaced at once by Reload, deciding HTTP requests and gRPC calls alike.
type Gateway struct {
	keys  atomic.Pointer[map[string]string]
	rules *redlimit.RuleSet
	app   http.Handler
}

// apiKey is the API key of a request or call, from "Authorization:
// Bearer KEY": an HTTP header, or the call's metadata.
func apiKey(q redlimit.Request) string {
	v := q.Values("Authorization")
	if len(v) == 0 {
		return ""
	}
	key, _ := strings.CutPrefix(v[0], "Bearer ")
	return key
}

// New builds the gateway of a configuration on lim, its decisions counted
// in metrics registered with reg and served at GET /metrics.
func New(lim *core.Limiter, data []byte, reg *prometheus.Registry) (*Gateway, error) {
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
	metrics, err := promlimit.New(reg)
	if err != nil {
		return nil, err
	}
	if err := metrics.WatchLimiter(lim, "gateway"); err != nil {
		return nil, err
	}
	g.rules, err = redlimit.NewRuleSet(lim, rules,
		// Known keys only reach the limit (authenticate and limitCall run
		// first). Requests and calls alike: the key reads the request's
		// description, a header or metadata.
		redlimit.WithRequestKey(func(q redlimit.Request) (string, error) { return "key:" + apiKey(q), nil }),
		// A request's tier is its key's plan.
		redlimit.WithTier(func(q redlimit.Request) (string, error) {
			return (*g.keys.Load())[apiKey(q)], nil
		}),
		// Tokens: the rules' limits of unit tokens are each plan's; these
		// are for a table that writes none.
		redlimit.WithBudget(redlimit.Budget{
			Limits:   tokens,
			Estimate: func(r *http.Request) int { return estimate },
			TakeRest: true,
		}),
		redlimit.WithHeaders(redlimit.HeadersBoth),
		// Every decision, HTTP and gRPC, in redlimit_decisions_total by
		// policy (the rule's pattern) and outcome.
		metrics.Observer())
	if err != nil {
		return nil, err
	}
	api := http.NewServeMux()
	api.HandleFunc("POST /v1/chat", chat)
	api.HandleFunc("POST /v1/batches", batch)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/", g.authenticate(nethttp.Middleware(g.rules)(api)))
	g.app = mux
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
		if _, ok := (*g.keys.Load())[apiKey(redlimit.Request{HTTP: r})]; !ok {
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

// ChatMethod is the gRPC method the gateway serves: chat's, its request
// the max_tokens and its reply the tokens used.
const ChatMethod = "/aigateway.Gateway/Chat"

// chatService describes aigateway.Gateway by hand, with
// google.protobuf.Int64Value for request and reply: no .proto to compile.
var chatService = grpc.ServiceDesc{
	ServiceName: "aigateway.Gateway",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Chat",
		Handler: func(_ any, ctx context.Context, dec func(any) error, limit grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.Int64Value)
			if err := dec(in); err != nil {
				return nil, err
			}
			return limit(ctx, in, &grpc.UnaryServerInfo{FullMethod: ChatMethod}, chatCall)
		},
	}},
	Streams: []grpc.StreamDesc{},
}

// chatCall is chat for gRPC: it "uses" the max_tokens it is sent and
// reports them, which is what the call is charged.
func chatCall(ctx context.Context, req any) (any, error) {
	maxTokens := req.(*wrapperspb.Int64Value).GetValue()
	redlimit.UsageFrom(ctx).Add("tokens", int(maxTokens))
	return wrapperspb.Int64(maxTokens), nil
}

// GRPCServer returns a gRPC server of aigateway.Gateway/Chat, each call
// decided by the gateway's rules as its HTTP requests are.
func (g *Gateway) GRPCServer() *grpc.Server {
	srv := grpc.NewServer(grpc.UnaryInterceptor(g.limitCall))
	srv.RegisterService(&chatService, nil)
	return srv
}

// limitCall is authenticate and nethttp.Middleware for a call: a known API
// key in the metadata, then a decision of the gateway's own rules table
// (redlimit.ServeRequest), under the same key, tier and budget as HTTP.
// The call is a POST of its full method, which only the catch-all "*"
// matches. The rate-limit fields go in the header metadata.
func (g *Gateway) limitCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	ctx = redlimit.ContextWithUsage(ctx, nil) // the handler reports its tokens here
	q := redlimit.Request{Context: ctx, Method: http.MethodPost, Route: info.FullMethod, Path: info.FullMethod, Metadata: md}
	if _, ok := (*g.keys.Load())[apiKey(q)]; !ok {
		return nil, status.Error(codes.Unauthenticated, "unknown API key")
	}
	fields := metadata.MD{}
	d := redlimit.ServeRequest(g.rules, q, fields, func() int {
		_ = grpc.SetHeader(ctx, fields)
		resp, err = handler(ctx, req)
		return http.StatusOK
	})
	if d.Allowed() {
		return resp, err
	}
	_ = grpc.SetHeader(ctx, fields) // retry-after, x-ratelimit-*
	switch d.Status {
	case http.StatusTooManyRequests:
		return nil, status.Error(codes.ResourceExhausted, "rate limit exceeded")
	case http.StatusServiceUnavailable:
		return nil, status.Error(codes.Unavailable, "rate limiter unavailable")
	default:
		return nil, status.Error(codes.InvalidArgument, "request could not be rate limited")
	}
}

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
	grpcAddr := flag.String("grpc", "localhost:9090", "the `address` the gRPC service listens on")
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
	lim := core.New(rdb)
	g, err := New(lim, data, prometheus.NewRegistry())
	if err != nil {
		log.Fatalf("%s: %v", path, err)
	}
	lis, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatal(err)
	}
	go func() { log.Fatal(g.GRPCServer().Serve(lis)) }()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go watch(hup, g, path, slog.Default())
	addr := os.Getenv(run.Addr)
	if addr == "" {
		addr = run.DefaultAddr
	}
	fmt.Printf("aigateway on http://%s (metrics at /metrics) and gRPC %s %s, limits kept in %s\nconfiguration %s; after editing it:\n  kill -HUP %d\n",
		addr, lis.Addr(), ChatMethod, where, path, os.Getpid())
	log.Fatal(http.ListenAndServe(addr, g))
}
