package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
)

// The model check's HTTP requests: reservations made and settled by the
// HTTP flow (redlimit.Serve, through nethttp), whose handler may panic.
// Two named policies on each Limiter, on the run's key ("k"), in scopes of
// their own (their state apart from the core calls'):
//
//   - "m": the primary limit and the case's Concurrency limit, a cost of
//     n per request and WithResponseCost (the request says the cost its
//     handler ends with). A handler that returns is settled at that cost;
//     one that panics (a plain panic, or http.ErrAbortHandler) has its
//     slots freed and its reserved cost stands (DESIGN.md: "A panicking
//     handler's slot is freed and its cost stands").
//   - "b": the primary limit and a budget of "tokens" (WithBudget: the
//     request says its estimate; no Cost function, so the handler's Usage
//     is the cost). Its handler reports a usage (or none) and may panic:
//     it is settled at the usage it reported, or its estimate if it
//     reported none, whether it panicked or not (issue 32, D2: what a
//     handler reported it used stands when it panics after reporting).
//
// The models log what the flow must settle: the admission at the decision
// (from inside the handler, which runs between the decision and the
// settlement), the settlement when the flow returns.

// httpOp is what an opHTTP request does.
type httpOp struct {
	budget bool // policy "b" (else "m")
	panics int  // 0: the handler returns; 1: it panics; 2: it panics with http.ErrAbortHandler
	est    int  // "b": the estimate
	usage  int  // "b": the usage the handler reports; -1: none
}

func genHTTP(rng *rand.Rand, mc modelCase) httpOp {
	h := httpOp{budget: rng.IntN(2) == 0, usage: -1}
	switch r := rng.IntN(10); {
	case r < 2:
		h.panics = 1
	case r < 4:
		h.panics = 2
	}
	if h.budget {
		tc := mc.tokens().Capacity()
		h.est = rng.IntN(tc/2 + 1)
		switch r := rng.IntN(4); {
		case r == 0: // none reported
		case r == 1 && h.est > 0:
			h.usage = rng.IntN(h.est)
		default: // more than estimated: a debt
			h.usage = h.est + 1 + rng.IntN(tc/3+1)
		}
	}
	return h
}

func (h httpOp) String() string {
	s := "cost policy"
	if h.budget {
		s = fmt.Sprintf("budget policy, estimate %d", h.est)
		if h.usage >= 0 {
			s += fmt.Sprintf(", reports %d used", h.usage)
		}
	}
	return s + [...]string{"", ", handler panics", ", handler panics with http.ErrAbortHandler"}[h.panics]
}

// tokens is the budget's limit: the primary's algorithm (policing, for
// a shaping bucket, whose delays the flow would wait out; GCRA for a
// Concurrency case) counting tokens, three times as many.
func (mc modelCase) tokens() core.Limit {
	l := mc.httpPrimary()
	if l.Algorithm == core.Concurrency {
		return core.Limit{Algorithm: core.GCRA, Rate: 30, Period: modelPeriod, Burst: 30, Unit: "tokens"}
	}
	l.Rate *= 3
	if l.Burst > 0 {
		l.Burst *= 3
	}
	l.Unit = "tokens"
	return l
}

// httpPrimary is the primary limit as the policies take it: policing for
// a shaping bucket.
func (mc modelCase) httpPrimary() core.Limit {
	l := mc.primary
	l.Shape, l.MaxDelay = false, 0
	return l
}

// httpFlow is a run's policies and their models.
type httpFlow struct {
	mc       modelCase
	env      *menv
	primary  core.Limit // as the policies take it now
	handlers map[[2]int]http.Handler
	models   map[string]*model // "m:p", "m:k", "b:p", "b:t"
}

func newHTTPFlow(env *menv, mc modelCase, start int64) *httpFlow {
	f := &httpFlow{mc: mc, env: env, primary: mc.httpPrimary(), handlers: map[[2]int]http.Handler{}, models: map[string]*model{}}
	at := func(scope string, l core.Limit) *model {
		return newModelAt(l, stateKey(env.prefix+scope+":", "k", l), start)
	}
	f.models["m:p"], f.models["b:p"], f.models["b:t"] = at("m", f.primary), at("b", f.primary), at("b", mc.tokens())
	if mc.conc.Rate > 0 {
		f.models["m:k"] = at("m", mc.conc)
	}
	for name, m := range f.models {
		m.name = name
	}
	return f
}

// change changes the policies' primary limit (the same name: the state
// kept, as a named policy or RuleSet.Update keeps it).
func (f *httpFlow) change(l core.Limit) {
	l.Shape, l.MaxDelay = false, 0
	f.primary = l
	clear(f.handlers)
	f.models["m:p"].change(l)
	f.models["b:p"].change(l)
}

// cost is the cost of a request under policy "m": at most every limit's burst.
func (f *httpFlow) cost() int {
	n := min(2, f.primary.Capacity())
	if f.mc.conc.Rate > 0 {
		n = min(n, f.mc.conc.Capacity())
	}
	return n
}

type httpCtxKey struct{}

// httpCall is what a request's handler tells the run, through its context.
type httpCall struct {
	called bool
	admit  func(r *http.Request) // logs the admission, from inside the handler
}

func (f *httpFlow) handler(lim int, budget bool) http.Handler {
	if h, ok := f.handlers[[2]int{lim, boolInt(budget)}]; ok {
		return h
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call := r.Context().Value(httpCtxKey{}).(*httpCall)
		call.called = true
		call.admit(r)
		if u, err := strconv.Atoi(r.Header.Get("X-Model-Usage")); err == nil && u >= 0 {
			redlimit.UsageFrom(r.Context()).Add("tokens", u)
		}
		switch r.Header.Get("X-Model-Panic") {
		case "1":
			panic("model: the handler panics")
		case "2":
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusOK)
	})
	opts := []redlimit.Option{
		redlimit.WithRequestKey(func(redlimit.Request) (string, error) { return "k", nil }),
		redlimit.WithFailure(redlimit.FailClosed),
		redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
			if d.Err != nil {
				panic(fmt.Sprintf("model: the HTTP policy's decision failed: %v", d.Err))
			}
		}),
	}
	if budget {
		opts = append(opts, redlimit.WithName("b"), redlimit.WithBudget(redlimit.Budget{
			Limits: []core.Limit{f.mc.tokens()},
			Estimate: func(r *http.Request) int {
				n, _ := strconv.Atoi(r.Header.Get("X-Model-Estimate"))
				return n
			},
		}))
	} else {
		opts = append(opts, redlimit.WithName("m"), redlimit.WithCost(f.cost()),
			redlimit.WithResponseCost(func(r *http.Request, status int, header http.Header) int {
				n, _ := strconv.Atoi(r.Header.Get("X-Model-Cost"))
				return n
			}))
		if f.mc.conc.Rate > 0 {
			opts = append(opts, redlimit.WithAlso(f.mc.conc))
		}
	}
	h := nethttp.New(f.env.lims[lim], f.primary, opts...)(inner)
	f.handlers[[2]int{lim, boolInt(budget)}] = h
	return h
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// httpLimit is one limit of a request: its model, what the request
// reserves of it and what the flow must settle it at.
type httpLimit struct {
	m                *model
	l                core.Limit
	reserved, settle int
}

// limits returns the limits of request h under its policy: reserved, and
// to settle at (cost: "m"'s cost when its handler returns).
func (f *httpFlow) limits(h httpOp, cost int) []httpLimit {
	if h.budget {
		settle := h.est // the estimate stands unless the handler reported a usage
		if h.usage >= 0 {
			settle = h.usage
		}
		return []httpLimit{{f.models["b:p"], f.primary, 1, 1}, {f.models["b:t"], f.mc.tokens(), h.est, settle}}
	}
	n := f.cost()
	if h.panics > 0 {
		cost = n // the reserved cost stands
	}
	out := []httpLimit{{f.models["m:p"], f.primary, n, cost}}
	if m := f.models["m:k"]; m != nil {
		out = append(out, httpLimit{m, f.mc.conc, n, cost})
	}
	return out
}

// serve makes request h through Limiter lim's policy, at the clock
// (fake: it does not move meanwhile); observe and admit log it, and it
// returns whether it was served, and what failed the check and why ("" if
// nothing).
func (f *httpFlow) serve(ctx context.Context, lim int, h httpOp, cost int, observe func(*model) error,
	admit func(*model, int64) (*mentry, string)) (served bool, class, why string, err error) {
	ls := f.limits(h, cost)
	entries := make([]*mentry, len(ls))
	call := &httpCall{}
	call.admit = func(*http.Request) {
		for k, x := range ls {
			if err = observe(x.m); err != nil {
				return
			}
			var w string
			if entries[k], w = admit(x.m, int64(x.reserved)); w != "" && why == "" {
				class, why = "over "+x.m.name, "over the limit (HTTP flow): "+w
			}
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(context.WithValue(ctx, httpCtxKey{}, call))
	req.Header.Set("X-Model-Cost", strconv.Itoa(cost))
	req.Header.Set("X-Model-Estimate", strconv.Itoa(h.est))
	req.Header.Set("X-Model-Usage", strconv.Itoa(h.usage))
	req.Header.Set("X-Model-Panic", strconv.Itoa(h.panics))
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		f.handler(lim, h.budget).ServeHTTP(httptest.NewRecorder(), req)
	}()
	if s, ok := recovered.(string); ok && len(s) > 6 && s[:6] == "model:" && s != "model: the handler panics" {
		return false, "", "", fmt.Errorf("%s", s)
	}
	if err != nil || !call.called {
		return false, class, why, err
	}
	if (recovered != nil) != (h.panics > 0) {
		return true, "panic", fmt.Sprintf("the handler's panic (%d) came out of the flow as %v", h.panics, recovered), nil
	}
	for k, x := range ls {
		if err := observe(x.m); err != nil {
			return true, class, why, err
		}
		x.m.settle(entries[k], int64(x.reserved), int64(x.settle), entries[k].at, x.l)
	}
	return true, class, why, nil
}
