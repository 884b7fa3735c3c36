package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulstdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
)

// row is one limiter, set up one way.
type row struct {
	name  string // for -only and the table
	group string // the table it is printed in
	// describe says what the row runs, with which options, for the legend.
	describe func(cfg config) string
	// setup makes the row's limiter on a fresh client, loads its scripts
	// with a first decision, and returns the decision to measure.
	setup func(e *env) (op, error)
	// want is the answer every measured decision must give.
	want bool
	// hotOnly rows run only in cells with one key.
	hotOnly bool
	// contextTimeouts gives the row's client go-redis's
	// ContextTimeoutEnabled.
	contextTimeouts bool
}

// group is one table of the report.
type group struct {
	name, title string
}

var groups = []group{
	{"decide", "One decision (limits never deny)"},
	{"http", "One request through net/http middleware, ServeHTTP on a reused writer that discards the body, no sockets (limits never deny)"},
	{"denied", "A flood on one key that is already denied (limit 1/h, the first decision took it)"},
}

func groupNames() []string {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.name
	}
	return names
}

func rowNames() []string {
	names := make([]string, len(allRows))
	for i, r := range allRows {
		names[i] = r.name
	}
	return names
}

// defaultRate is the throughput rows' limit: a million events per second
// per key, with a burst of as many, never denies at the rates one
// redis-server reaches, and GCRA's emission interval is a whole
// microsecond, as every limit a service sets has (100 a second is
// 10 000 µs). A billion a second (-rate=1000000000, the rate of the runs
// before 2026-11-27) is an interval of a nanosecond: redlimit's GCRA then
// keeps an exact fraction of a microsecond in its state, a longer string
// to parse and write (74 000 instructions a call against 67 000;
// bench/scriptcost.sh), while redis_rate's float state gets cheaper
// (49 000 against 70 000).
const defaultRate = 1_000_000

func (c config) rate() int {
	if c.Rate > 0 {
		return c.Rate
	}
	return defaultRate
}

// The limits of the throughput rows, of e.rate events per second.
func (e *env) limit() core.Limit { return core.Limit{Rate: e.rate, Period: time.Second} }
func (e *env) limitRR() redis_rate.Limit {
	return redis_rate.Limit{Rate: e.rate, Burst: e.rate, Period: time.Second}
}
func (e *env) limitUlule() limiter.Rate {
	return limiter.Rate{Limit: int64(e.rate), Period: time.Second}
}

// deniedLimit is the denied rows' limit: one event an hour.
var deniedLimit = core.PerHour(1)

// evalshaRow is the reference: one round trip and nothing else.
var evalshaRow = &row{
	name: "evalsha", group: "decide", want: true,
	describe: func(config) string {
		return "bare EVALSHA of `return 1` with one key (go-redis EvalSha): the floor of one round trip; the ratio column is to it"
	},
	setup: func(e *env) (op, error) {
		sha, err := e.rdb.ScriptLoad(e.ctx, "return 1").Result()
		if err != nil {
			return nil, err
		}
		o := func(ctx context.Context, key int) (bool, error) {
			return true, e.rdb.EvalSha(ctx, sha, e.keys.evalKeys[key]).Err()
		}
		return o, warm(e.ctx, o, true)
	},
}

// allRows lists every row in table order.
var allRows = []*row{
	evalshaRow,
	{
		name: "core", group: "decide", want: true,
		describe: func(config) string {
			return "redlimit core.New(rdb).Allow, GCRA; defaults: batching on (up to 128 decisions a round trip, 4 in flight, a batch as one script call), deny cache on"
		},
		setup: func(e *env) (op, error) { return coreOp(e, e.limit(), true) },
	},
	{
		name: "core-prefetch", group: "decide", want: true,
		describe: func(config) string {
			return "redlimit core.New(rdb).Allow, GCRA with Prefetch 1000: a Limiter takes up to 1000 events of a key at a time and admits them in process"
		},
		setup: func(e *env) (op, error) {
			l := e.limit()
			l.Prefetch = 1000
			return coreOp(e, l, true)
		},
	},
	{
		name: "core-pipeline", group: "decide", want: true,
		describe: func(config) string {
			return "redlimit core.New(rdb, WithBatchScript(false)).Allow, GCRA: a batch goes as a pipeline of one script call per decision"
		},
		setup: func(e *env) (op, error) { return coreOp(e, e.limit(), true, core.WithBatchScript(false)) },
	},
	{
		name: "core-ctxtimeout", group: "decide", want: true, contextTimeouts: true,
		describe: func(config) string {
			return "redlimit core.New(rdb).Allow, GCRA, defaults, on a client with ContextTimeoutEnabled: an idle Limiter sends from the caller"
		},
		setup: func(e *env) (op, error) { return coreOp(e, e.limit(), true) },
	},
	{
		name: "evalsha-gcra", group: "decide", want: true, contextTimeouts: true,
		describe: func(config) string {
			return "the EVALSHA a core-ctxtimeout decision sends (its arguments taken from a first decision by a go-redis hook), sent bare with go-redis Do: the same script, arguments and server time as core-ctxtimeout without redlimit's middle"
		},
		setup: capturedOp,
	},
	{
		name: "redis_rate", group: "decide", want: true,
		describe: func(config) string { return "go-redis/redis_rate v10 Allow, GCRA" },
		setup: func(e *env) (op, error) {
			rl := redis_rate.NewLimiter(e.rdb)
			o := func(ctx context.Context, key int) (bool, error) {
				res, err := rl.Allow(ctx, e.keys.names[key], e.limitRR())
				if err != nil {
					return false, err
				}
				return res.Allowed > 0, nil
			}
			return o, warm(e.ctx, o, true)
		},
	},
	{
		name: "ulule", group: "decide", want: true,
		describe: func(config) string { return "ulule/limiter v3 Get with its redis store, fixed window" },
		setup: func(e *env) (op, error) {
			ul, err := ululeLimiter(e)
			if err != nil {
				return nil, err
			}
			o := func(ctx context.Context, key int) (bool, error) {
				c, err := ul.Get(ctx, e.keys.names[key])
				return !c.Reached, err
			}
			return o, warm(e.ctx, o, true)
		},
	},
	{
		name: "http-redlimit", group: "http", want: true,
		describe: func(config) string {
			return "redlimit nethttp.New(core.New(rdb), limit): defaults (key: RemoteAddr; fail open, errors counted here)"
		},
		setup: func(e *env) (op, error) { return httpCostOp(e, -1) },
	},
	{
		name: "http-ctxtimeout", group: "http", want: true, contextTimeouts: true,
		describe: func(config) string {
			return "http-redlimit on a client with ContextTimeoutEnabled, as the README's quick start makes it"
		},
		setup: func(e *env) (op, error) { return httpCostOp(e, -1) },
	},
	{
		name: "http-cost-stands", group: "http", want: true,
		describe: func(config) string {
			return "redlimit nethttp.New(core.New(rdb), limit, WithResponseCost(1)): settled at the reserved cost, so no second round trip"
		},
		setup: func(e *env) (op, error) { return httpCostOp(e, 1) },
	},
	{
		name: "http-cost-refund", group: "http", want: true,
		describe: func(config) string {
			return "redlimit nethttp.New(core.New(rdb), limit, WithResponseCost(0)): every request refunded after its handler, one more round trip"
		},
		setup: func(e *env) (op, error) { return httpCostOp(e, 0) },
	},
	{
		name: "http-ulule", group: "http", want: true,
		describe: func(config) string {
			return "ulule/limiter v3 stdlib.NewMiddleware with its redis store: defaults (key: RemoteAddr)"
		},
		setup: func(e *env) (op, error) {
			ul, err := ululeLimiter(e)
			if err != nil {
				return nil, err
			}
			return httpOp(e, ulstdlib.NewMiddleware(ul).Handler(okHandler))
		},
	},
	{
		name: "deny-cache", group: "denied", want: false, hotOnly: true,
		describe: func(config) string {
			return fmt.Sprintf("redlimit core.New(rdb).Allow: deny cache on (default: %d keys, answers for at most 1s)",
				core.DefaultDenyCacheKeys)
		},
		setup: func(e *env) (op, error) { return coreOp(e, deniedLimit, false) },
	},
	{
		name: "deny-nocache", group: "denied", want: false, hotOnly: true,
		describe: func(config) string {
			return "redlimit core.New(rdb, WithDenyCache(0)).Allow: every denial asks Redis"
		},
		setup: func(e *env) (op, error) { return coreOp(e, deniedLimit, false, core.WithDenyCache(0)) },
	},
}

// httpCostOp is the http-redlimit row, with WithResponseCost returning
// cost unless it is negative.
func httpCostOp(e *env, cost int) (op, error) {
	opts := []redlimit.Option{redlimit.WithObserver(func(_ *http.Request, d redlimit.Decision) {
		if d.Err != nil {
			e.errs.add(d.Err)
		}
	})}
	if cost >= 0 {
		opts = append(opts, redlimit.WithResponseCost(func(*http.Request, int, http.Header) int { return cost }))
	}
	mw := nethttp.New(core.New(e.rdb), e.limit(), opts...)
	return httpOp(e, mw(okHandler))
}

// coreOp makes a core Limiter with opts and returns its decision under
// limit. For a limit that must deny, the first decision takes the key's
// only event.
func coreOp(e *env, limit core.Limit, want bool, opts ...core.Option) (op, error) {
	lim := core.New(e.rdb, opts...)
	o := func(ctx context.Context, key int) (bool, error) {
		res, err := lim.Allow(ctx, e.keys.names[key], limit)
		return res.Allowed, err
	}
	if !want {
		if err := warm(e.ctx, o, true); err != nil {
			return nil, err
		}
	}
	return o, warm(e.ctx, o, want)
}

// capturedOp returns a bare EVALSHA of the script and arguments a core
// decision of e's limit sends for each key: a go-redis hook takes them from
// one decision of the first key, on a client of its own, and the other keys' are the same with
// that key's name in place of the first's. It is the cost of one decision
// with nothing of redlimit around it.
func capturedOp(e *env) (op, error) {
	var captured []any
	spy := redis.NewClient(e.rdb.Options()) // the hook on a client of its own: the row's runs without it
	defer spy.Close()
	spy.AddHook(captureHook{into: &captured})
	if _, err := core.New(spy).Allow(e.ctx, e.keys.names[0], e.limit()); err != nil {
		return nil, err
	}
	if len(captured) == 0 {
		return nil, errors.New("evalsha-gcra: no EVALSHA seen in a core decision")
	}
	args := make([][]any, len(e.keys.names))
	for i, name := range e.keys.names {
		args[i] = make([]any, len(captured))
		for j, a := range captured {
			if s, ok := a.(string); ok {
				a = strings.ReplaceAll(s, "{"+e.keys.names[0]+"}", "{"+name+"}")
			}
			args[i][j] = a
		}
	}
	o := func(ctx context.Context, key int) (bool, error) {
		reply, err := e.rdb.Do(ctx, args[key]...).Slice()
		if err != nil {
			return false, err
		}
		allowed, _ := reply[0].(int64)
		return allowed == 1, nil
	}
	return o, warm(e.ctx, o, true)
}

// captureHook keeps the arguments of the first EVALSHA its client sends.
type captureHook struct{ into *[]any }

func (h captureHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h captureHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h captureHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if *h.into == nil && cmd.Name() == "evalsha" {
			*h.into = slices.Clone(cmd.Args())
		}
		return next(ctx, cmd)
	}
}

// ululeLimiter makes a ulule limiter that never denies, on a redis store of
// e's client (which loads its scripts).
func ululeLimiter(e *env) (*limiter.Limiter, error) {
	store, err := ulredis.NewStoreWithOptions(e.rdb, limiter.StoreOptions{Prefix: "ulule"})
	if err != nil {
		return nil, err
	}
	return limiter.New(store, e.limitUlule()), nil
}

// okHandler is the application behind the middleware.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })

// httpOp returns a decision through h: one request, answered 200 (allowed)
// or 429 (denied); any other status is an error. The ResponseWriter is
// reused from a pool and discards the body, as a server reuses its
// buffers; an httptest.ResponseRecorder would clone the header map on
// every answer and cost about as much as a middleware.
func httpOp(e *env, h http.Handler) (op, error) {
	writers := sync.Pool{New: func() any { return &discardWriter{header: http.Header{}} }}
	o := func(_ context.Context, key int) (bool, error) {
		w := writers.Get().(*discardWriter)
		defer writers.Put(w)
		clear(w.header)
		w.status = 0
		h.ServeHTTP(w, e.keys.requests[key])
		switch w.status {
		case http.StatusOK:
			return true, nil
		case http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("status %d", w.status)
	}
	return o, warm(e.ctx, o, true)
}

// discardWriter is an http.ResponseWriter that keeps only the status.
type discardWriter struct {
	header http.Header
	status int
}

// Header returns the header map, cleared for each request.
func (w *discardWriter) Header() http.Header { return w.header }

// WriteHeader records the status.
func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

// Write discards p, recording 200 if no status was written.
func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

// warm makes one decision on the first key, which loads the row's scripts,
// and checks its answer.
func warm(ctx context.Context, o op, want bool) error {
	allowed, err := o(ctx, 0)
	if err != nil {
		return err
	}
	if allowed != want {
		return fmt.Errorf("first decision: allowed = %v, want %v", allowed, want)
	}
	return nil
}
