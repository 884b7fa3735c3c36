package grpclimit

import (
	"context"
	"net/http"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// The options of a call: what redlimit's options of an *http.Request
// (WithSkip, WithRequestLimits, WithObserver, WithResponseCost) are for
// HTTP requests, each a function of the call's context and full method
// ("/pkg.Service/Method"). They set the policy's functions in the form
// every protocol's requests are decided by (package policyconf), so no
// *http.Request is made up for them.

// WithSkip exempts the calls for which skip returns true (health checks,
// reflection, allow-listed peers): they proceed without a decision and
// without rate-limit metadata, and observers see them as
// redlimit.OutcomeSkipped. The default skips nothing. skip must be safe
// for concurrent use. Of WithSkip and a With(redlimit.WithSkip), which
// reads HTTP requests and is refused, the later wins.
func WithSkip(skip func(ctx context.Context, fullMethod string) bool) Option {
	if skip == nil {
		return With(redlimit.WithSkip(nil))
	}
	return With(redlimit.WithRequestFuncs(redlimit.RequestFuncs{Skip: func(q redlimit.Request) bool {
		return skip(q.Context, q.Route)
	}}))
}

// WithLimits picks the limits of each call, in place of the interceptor's
// limit and redlimit.WithAlso's: plan tiers, by a customer an
// authentication interceptor put in the context. pick returns one or more
// limits decided together, all or nothing; nil means the interceptor's
// own. As with redlimit.WithRequestLimits on HTTP, a limit keeps its state
// under the policy's name, its algorithm and its period, and a call is
// never let through nor denied for ever when pick fails: an error from
// pick ends the call codes.InvalidArgument ("request's rate limits could
// not be chosen"); limits that are invalid or would share state
// ("request's rate limits are invalid"), and limits whose smallest burst
// is below redlimit.WithCost's n ("request costs more than its rate limit
// allows", HTTP's 400) end it codes.InvalidArgument too, and are logged
// at error level as configuration errors. The status never carries the
// error's details; observers get it in Decision.Err. pick must be safe
// for concurrent use. Not for WithRules, whose rules say their limits.
func WithLimits(pick func(ctx context.Context, fullMethod string) ([]core.Limit, error)) Option {
	if pick == nil {
		set := With(redlimit.WithRequestLimits(nil))
		return func(c *config) { set(c); c.limits = false }
	}
	set := With(redlimit.WithRequestFuncs(redlimit.RequestFuncs{Limits: func(q redlimit.Request) ([]core.Limit, error) {
		return pick(q.Context, q.Route)
	}}))
	return func(c *config) { set(c); c.limits = true }
}

// WithObserver calls observe with the decision of every call, with the
// call's context and full method, after the decision is made and before
// the call is handed to its handler or refused: for metrics, traces and
// Redis errors (Decision.Err). Decision.Policy is the policy's name (a
// rule's pattern with WithRules). Several observers, this one's and
// redlimit.WithObserver's (promlimit's and otellimit's Observer) alike,
// each see every decision, in the order given. observe must be fast and
// safe for concurrent use.
func WithObserver(observe func(ctx context.Context, fullMethod string, d redlimit.Decision)) Option {
	if observe == nil {
		return func(*config) {}
	}
	return With(redlimit.WithRequestFuncs(redlimit.RequestFuncs{Observe: func(q redlimit.Request, d redlimit.Decision) {
		observe(q.Context, q.Route, d)
	}}))
}

// WithResponseCost settles every admitted call after its handler returns:
// cost gets the call's context and full method, the reply of a unary
// handler (nil for a stream) and the handler's error, and returns the
// call's true cost. 0 refunds it (count only failed logins: return 0 when
// err is nil); more than redlimit.WithCost's n charges the rest without
// denying (tokens a reply reports as used), and the key goes into debt.
// Without it the cost stands. It costs one more round trip per call, and
// none when cost returns WithCost's n for a policy without Concurrency
// limits; a cost above redlimit.WithMaxCost's n is charged that n, a
// negative one is logged and the reserved cost stands; a handler that
// panics is settled at WithCost's n; either way the call's slots are
// freed. A Limiter (NewLimiter) settles a call when it is admitted, before
// its handler runs: cost gets a nil reply and a nil error. cost must be
// safe for concurrent use. Of WithResponseCost and
// With(redlimit.WithResponseCost), the later wins.
func WithResponseCost(cost func(ctx context.Context, fullMethod string, reply any, err error) int) Option {
	if cost == nil {
		return With(redlimit.WithResponseCost(nil))
	}
	set := With(redlimit.WithRequestFuncs(redlimit.RequestFuncs{ResponseCost: func(q redlimit.Request, _ int, _ http.Header) int {
		var reply any
		var err error
		if out, ok := q.Context.Value(outcomeKey{}).(*outcome); ok {
			reply, err = out.reply, out.err
		}
		return cost(q.Context, q.Route, reply, err)
	}}))
	return func(c *config) { set(c); c.outcomes = true }
}

// outcome is what an admitted call's handler returned, for
// WithResponseCost's function, which finds it in the context of the call's
// redlimit.Request under outcomeKey{}.
type outcome struct {
	req   any // a unary call's request, for a budget's Estimate
	reply any
	err   error
}

type outcomeKey struct{}

// Budget is redlimit.Budget for calls: limits in a unit other than
// requests (tokens), each call reserving Estimate before its handler and
// charged Cost after it, decided with the interceptor's request limits in
// one atomic script (a call any limit denies is charged to none) and
// settled moving only the limits whose cost changed. MaxCost and TakeRest
// are redlimit.Budget's.
type Budget struct {
	// Limits are the budget's, each of the same Unit, not "".
	Limits []core.Limit
	// Estimate is what a call reserves before its handler: it gets the
	// call's context, full method and request (nil for a stream, whose
	// messages come after the decision). nil or 0 reserves nothing.
	Estimate func(ctx context.Context, fullMethod string, req any) int
	// Cost is a call's true cost after its handler: it gets the call's
	// context, full method, the unary handler's reply (nil for a stream)
	// and error. nil: what the handler reported to its context's Usage
	// (redlimit.UsageFrom(ctx).Add), or, if it reported nothing, what the
	// call reserved. A server stream's handler adds as it sends, so a
	// client that leaves mid-stream, or cancels the call, is charged what
	// was sent. A handler that panics is settled without calling Cost: at
	// what it reported to its Usage, or at what it reserved.
	Cost func(ctx context.Context, fullMethod string, reply any, err error) int
	// MaxCost caps one call's reservation and charge; 0 means
	// 4294967295, the most a settlement takes.
	MaxCost int
	// TakeRest admits a call whose estimate exceeds what is left against
	// what is left, when some is (redlimit.Budget.TakeRest).
	TakeRest bool
}

// WithBudget adds a budget to the interceptor's policy, as
// redlimit.WithBudget does to an HTTP policy; the budget's limits are
// announced in the response metadata with their unit (ratelimit-policy's
// qu). The handler's context carries a redlimit.Usage. Of WithBudget and
// With(redlimit.WithBudget), whose functions read HTTP requests, the
// latter is refused.
func WithBudget(b Budget) Option {
	conf := redlimit.RequestBudget{Limits: b.Limits, MaxCost: b.MaxCost, TakeRest: b.TakeRest}
	if b.Estimate != nil {
		conf.Estimate = func(q redlimit.Request) int {
			var req any
			if out, ok := q.Context.Value(outcomeKey{}).(*outcome); ok {
				req = out.req
			}
			return b.Estimate(q.Context, q.Route, req)
		}
	}
	if b.Cost != nil {
		conf.Cost = func(q redlimit.Request, _ int, _ http.Header) int {
			var reply any
			var err error
			if out, ok := q.Context.Value(outcomeKey{}).(*outcome); ok {
				reply, err = out.reply, out.err
			}
			return b.Cost(q.Context, q.Route, reply, err)
		}
	}
	add := With(redlimit.WithRequestFuncs(redlimit.RequestFuncs{Budgets: []redlimit.RequestBudget{conf}}))
	return func(c *config) { add(c); c.outcomes, c.budgets = true, true }
}
