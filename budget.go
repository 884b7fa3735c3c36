package redlimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
)

// Budget is a policy's limits in a unit other than requests, such as the
// tokens of an AI API: each request reserves its Estimate before its
// handler and is charged its Cost after it, and both are decided with the
// policy's request limits in one atomic script: a request any limit (of
// requests or of the budget) denies is charged to none, and the
// settlement after the handler moves only the limits whose cost changed.
// docs/budgets.md shows the patterns and how to size the estimate.
type Budget struct {
	// Limits are the budget's: one or more, each of the same Unit, which
	// is not "" ("40000/m unit=tokens, 1000000/d unit=tokens").
	Limits []core.Limit
	// Estimate is what a request reserves before its handler runs. nil,
	// or 0, reserves nothing: the budget then denies a request only while
	// a key is in debt. A negative estimate reserves nothing and is
	// logged; one above MaxCost reserves MaxCost, one above the budget's
	// smallest burst reserves that burst, and both are logged: a request
	// is never denied for ever by its estimate.
	Estimate func(r *http.Request) int
	// Cost is a request's true cost after its handler: it gets the
	// request, the status written (200 if none) and the response header.
	// nil: what the handler reported with Usage (UsageFrom), or, if it
	// reported nothing, what the request reserved. A negative cost is
	// logged and the reserved one stands; one above MaxCost is charged
	// MaxCost and logged. Above the reserved it charges the rest without
	// denying (the key goes into debt), below it refunds the difference.
	// A handler that panics (http.ErrAbortHandler included, which
	// httputil.ReverseProxy panics with when its client leaves) is
	// settled without calling Cost: at what it reported to its Usage, or
	// at what it reserved if it reported nothing.
	Cost func(r *http.Request, status int, header http.Header) int
	// MaxCost caps what one request may reserve or be charged of the
	// budget's unit: above it, MaxCost is charged and the excess logged
	// at warn level, at most once a second per policy. 0, the default,
	// means 4294967295, the most a settlement takes.
	MaxCost int
	// TakeRest admits a request whose estimate exceeds what is left of
	// the budget against what is left, when some is: the last tokens of a
	// window can be used. It reserves the smaller of the two, in the same
	// atomic decision (a "take up to" cost, lua/decide.lua), and the
	// settlement still charges the true cost (a debt if it is more). The
	// default, false, denies such a request until its estimate fits.
	TakeRest bool
}

// WithBudget adds a budget to the policy: limits in another unit than
// requests, decided with the policy's own in one decision (see Budget).
// Several budgets may be given, of different units. A policy with a
// budget reserves every request and settles it after its handler (one
// more round trip, none when no cost changed). In a rules table, the
// catch-all's budget is every rule's, kept under the catch-all's name, so
// all routes share one budget per key; a table without a catch-all keeps
// a budget per rule. The draft profile's RateLimit-Policy announces each
// budget limit with its unit (qu). Budget's functions read HTTP requests:
// grpclimit refuses the option (its WithBudget reads calls). An invalid
// budget (no limits, a limit without a unit, two units) is an error when
// the policy is built.
func WithBudget(b Budget) Option {
	conf := RequestBudget{Limits: b.Limits, MaxCost: b.MaxCost, TakeRest: b.TakeRest}
	if b.Estimate != nil {
		conf.Estimate = func(q Request) int {
			if q.HTTP == nil {
				return 0
			}
			return b.Estimate(q.HTTP)
		}
	}
	if b.Cost != nil {
		conf.Cost = func(q Request, status int, header http.Header) int {
			if q.HTTP == nil {
				return -1
			}
			return b.Cost(q.HTTP, status, header)
		}
	}
	add := WithRequestFuncs(RequestFuncs{Budgets: []RequestBudget{conf}})
	return func(c *options) { add(c); c.httpOnly.budget = "redlimit.WithBudget" }
}

// RequestBudget is Budget for requests of any protocol, by their
// description (Request): its Estimate and Cost get the Request (Cost also
// the status, HTTP's or a gRPC code mapped to it, and the response header,
// nil for another protocol), with Budget's rules otherwise. Adapters of
// other protocols (grpclimit's WithBudget) add one with WithRequestFuncs.
type RequestBudget struct {
	Limits   []core.Limit
	Estimate func(q Request) int
	Cost     func(q Request, status int, header http.Header) int
	MaxCost  int
	TakeRest bool
}

// budget is a RequestBudget of a policy, checked: its quotas are those of
// the policy's quotas from at to at+n.
type budget struct {
	RequestBudget
	unit      string
	at, n     int
	smallest  int // the smallest burst of its limits
	costLog   throttle
	invalidAt throttle
}

// checkBudgets checks the budgets of a policy and returns them worked
// out, their quotas starting at index at of the policy's.
func checkBudgets(bs []RequestBudget, at int) ([]*budget, []core.Limit, error) {
	var out []*budget
	var limits []core.Limit
	for _, b := range bs {
		if len(b.Limits) == 0 {
			return nil, nil, errors.New("redlimit: WithBudget: a budget without limits")
		}
		unit := b.Limits[0].Unit
		for _, l := range b.Limits {
			switch {
			case l.Unit == "":
				return nil, nil, fmt.Errorf("%w: WithBudget: limit %v counts requests: a budget's limits count another unit (unit=tokens)", core.ErrInvalidLimit, l)
			case l.Unit != unit:
				return nil, nil, fmt.Errorf("%w: WithBudget: limits of units %q and %q in one budget: give each unit a budget of its own", core.ErrInvalidLimit, unit, l.Unit)
			case l.Algorithm == core.Concurrency:
				return nil, nil, fmt.Errorf("%w: WithBudget: a budget's limits count units used, not requests in flight (%v)", core.ErrInvalidLimit, l)
			}
		}
		for _, o := range out {
			if o.unit == unit {
				return nil, nil, fmt.Errorf("redlimit: WithBudget: two budgets of unit %q: give one budget every limit of a unit", unit)
			}
		}
		if b.MaxCost < 0 || b.MaxCost > defaultMaxCost {
			return nil, nil, fmt.Errorf("redlimit: WithBudget: MaxCost %d: want 0 (the default, %d) to %d", b.MaxCost, defaultMaxCost, defaultMaxCost)
		}
		if b.MaxCost == 0 {
			b.MaxCost = defaultMaxCost
		}
		out = append(out, &budget{RequestBudget: b, unit: unit, at: at + len(limits), n: len(b.Limits), smallest: smallestBurst(b.Limits)})
		limits = append(limits, b.Limits...)
	}
	return out, limits, nil
}

// estimate returns what q reserves of b: its Estimate, bounded (see
// Budget.Estimate).
func (p *policy) estimate(q *Request, b *budget) int {
	for _, e := range p.estimates { // a rule's, checked when it was loaded
		if e.unit == b.unit {
			return e.n
		}
	}
	if b.Estimate == nil {
		return 0
	}
	n := b.Estimate(*q)
	switch {
	case n < 0:
		if skipped, ok := b.invalidAt.allow(time.Now()); ok {
			p.log.ErrorContext(q.Context, "redlimit: invalid estimate: a budget's Estimate returned a negative cost; reserved nothing",
				"policy", p.name, "unit", b.unit, "estimate", n, "estimates_not_logged", skipped)
		}
		return 0
	case n > b.MaxCost || (n > b.smallest && !b.TakeRest):
		capped := min(b.MaxCost, b.smallest)
		if b.TakeRest {
			capped = b.MaxCost
		}
		if skipped, ok := b.costLog.allow(time.Now()); ok {
			p.log.WarnContext(q.Context, "redlimit: estimate above the most a request may reserve (Budget.MaxCost, or the budget's burst); reserved the most",
				"policy", p.name, "unit", b.unit, "estimate", n, "reserved", capped, "costs_not_logged", skipped)
		}
		return capped
	}
	return n
}

// budgetCost returns what q is settled at under b after its handler
// returned: Cost's, bounded, or what the handler reported (Usage), or -1:
// what it reserved.
func (p *policy) budgetCost(q *Request, b *budget, status int, header http.Header) int {
	if b.Cost == nil {
		return p.reported(q, b)
	}
	n := b.Cost(*q, status, header)
	if n < 0 {
		if skipped, ok := b.invalidAt.allow(time.Now()); ok {
			p.log.ErrorContext(q.Context, "redlimit: invalid response cost: a budget's Cost returned a negative cost; the reserved cost stands",
				"policy", p.name, "unit", b.unit, "cost", n, "costs_not_logged", skipped)
		}
		return -1
	}
	return p.capBudget(q, b, n)
}

// reported returns what q's handler reported to its Usage of b's unit,
// bounded, or -1 if it reported none: what it reserved.
func (p *policy) reported(q *Request, b *budget) int {
	used, ok := UsageFrom(q.Context).Used(b.unit)
	if !ok {
		return -1
	}
	return p.capBudget(q, b, used)
}

// capBudget returns n, or b's MaxCost if n is above it, which it logs.
func (p *policy) capBudget(q *Request, b *budget, n int) int {
	if n > b.MaxCost {
		if skipped, ok := b.costLog.allow(time.Now()); ok {
			p.log.WarnContext(q.Context, "redlimit: response cost above the maximum a request may be charged (Budget.MaxCost); charged the maximum",
				"policy", p.name, "unit", b.unit, "cost", n, "charged", b.MaxCost, "costs_not_logged", skipped)
		}
		return b.MaxCost
	}
	return n
}

// Usage is what a request's handler reports it has used of each budget's
// unit, as it goes: a streaming handler adds to it as it produces, so a
// request whose client leaves mid-stream is charged what was produced. A
// policy with a budget without Cost settles the request at the sum
// reported for the budget's unit when its handler ends, however it ends
// (it returns, or panics: http.ErrAbortHandler from a reverse proxy whose
// client left, or any other panic), or at the reserved estimate if
// nothing was reported; a budget with Cost too when its handler panics.
// Find it with UsageFrom. Its methods are safe for concurrent use, and do
// nothing on a nil *Usage.
type Usage struct {
	mu   sync.Mutex
	used map[string]int
}

// Add reports n more units used (n below 0 is ignored): Add("tokens", 12).
// The sum saturates above the most a request is ever charged (1e9): it
// never wraps, however large n is.
func (u *Usage) Add(unit string, n int) {
	if u == nil || n < 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.used == nil {
		u.used = make(map[string]int, 1)
	}
	u.used[unit] += min(n, maxUsed-u.used[unit])
}

// maxUsed bounds what a Usage counts: one above the most a request is
// charged, so that an excess is seen (and logged), never wrapped.
const maxUsed = min(defaultMaxCost, math.MaxInt-1) + 1

// Used returns the units of unit reported so far, and whether any Add
// reported that unit. A sum above 1e9 reads 1e9+1, more than any request
// is charged (Budget.MaxCost).
func (u *Usage) Used(unit string) (int, bool) {
	if u == nil {
		return 0, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	n, ok := u.used[unit]
	return n, ok
}

type usageKey struct{}

// UsageFrom returns the Usage of the request whose context ctx is (an
// HTTP handler's r.Context(), a gRPC handler's ctx), nil when no policy
// with a budget decided it; Add on nil does nothing, so a handler may
// always call UsageFrom(ctx).Add(unit, n).
func UsageFrom(ctx context.Context) *Usage {
	u, _ := ctx.Value(usageKey{}).(*Usage)
	return u
}

// ContextWithUsage returns ctx carrying u, where UsageFrom finds it. A nil
// u is ctx's own Usage if it has one (nested policies share it), else a
// new one. Serve does it for an HTTP request under a policy with a
// budget, and the adapters hand the handler a request whose context
// carries it; an adapter of another protocol calls it before ServeRequest
// and gives its handler the context (grpclimit does).
func ContextWithUsage(ctx context.Context, u *Usage) context.Context {
	if had := UsageFrom(ctx); had != nil && (u == nil || u == had) {
		return ctx
	}
	if u == nil {
		u = new(Usage)
	}
	return context.WithValue(ctx, usageKey{}, u)
}
