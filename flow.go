package redlimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// The one request flow, for every protocol, top to bottom in this file: a
// protocol describes its request (Request), the policy that applies
// decides it (decide: skip, key, limits, one decision on Redis, the
// failure policy, the verdict), the verdict's rate-limit fields are
// written under the protocol's names and a request that may not proceed
// is answered (answer.go), and an admitted request's reservation is
// settled after its handler, however the handler ends (serveHeld). Serve
// is the flow of an *http.Request (nethttp, ginlimit, echolimit,
// chilimit); ServeRequest that of any other protocol (grpclimit). A
// policy is made once, at start-up (policy.go, options.go, rules.go).

// Serve runs one HTTP request through p, top to bottom: it finds the
// policy that applies (none: next serves it), decides (skip, key, limits,
// one decision on Redis, the failure policy), sets the rate-limit headers,
// and either answers a request that may not proceed (429, 503 or 400, with
// the deny handler, a problem or the JSON body) or hands it to next. next
// serves the request and returns the status it answered with, 0 if it
// cannot tell. It returns the Decision, the zero Decision when no policy
// applied. The request next gets carries, in its context, the record of
// the request's Decisions (DecisionsFrom), which nested policies share
// with their deadline. It is what the HTTP adapters call; gin's aborts
// the chain when the Decision is not Allowed.
func Serve(p Policy, w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request) int) Decision {
	q := Request{Context: r.Context(), Method: r.Method, Route: r.Pattern, Path: r.URL.Path, Host: r.Host, Peer: r.RemoteAddr, HTTP: r}
	pol := p.policyFor(q)
	if pol == nil {
		next(w, r)
		return Decision{}
	}
	var ctx context.Context
	ctx, q.rec = withRecord(q.Context) // the request's Decisions, and its one deadline
	if pol.budgets != nil {            // a Usage for the handler to report to
		ctx = ContextWithUsage(ctx, nil)
	}
	if ctx != q.Context {
		r = r.WithContext(ctx)
		q.Context, q.HTTP = ctx, r
	}
	d, held := pol.decide(&q, w.Header(), httpFields)
	switch {
	case !d.Allowed():
		pol.answer.deny(w, r, d)
	case held != nil:
		var sw *statusWriter
		if pol.ResponseCost != nil || pol.budgets != nil { // a cost function is told the status
			sw = &statusWriter{ResponseWriter: w}
			w = sw
		}
		pol.serveHeld(&q, held, func() (int, http.Header) {
			status := next(w, r)
			if status == 0 && sw != nil {
				status = sw.statusCode()
			}
			return status, w.Header()
		})
	default:
		next(w, r)
	}
	return d
}

// ServeRequest runs one request of a protocol other than HTTP through p,
// as Serve runs an HTTP request: it finds the policy that applies (none:
// next serves it), decides, and writes the verdict's rate-limit fields to
// md as gRPC metadata (lowercase keys: x-ratelimit-remaining,
// retry-after, ratelimit, ...). When the Decision is Allowed it calls
// next, which serves the request and returns its HTTP status (for
// WithResponseCost); otherwise the caller answers as its protocol does,
// after the Decision's Status. md must not be nil. The Decision is
// recorded in the record of q.Context (ContextWithDecisions), if it has
// one, whose deadline the decision shares with the request's others.
func ServeRequest(p Policy, q Request, md map[string][]string, next func() int) Decision {
	q.HTTP = nil // the flow of an HTTP request is Serve's
	pol := p.policyFor(q)
	if pol == nil {
		next()
		return Decision{}
	}
	q.rec = recordFrom(q.Context)
	d, held := pol.decide(&q, md, metadataFields)
	switch {
	case !d.Allowed():
	case held != nil:
		pol.serveHeld(&q, held, func() (int, http.Header) { return next(), nil })
	default:
		next()
	}
	return d
}

// policyFor: a policy of NewPolicy applies to every request.
func (p *policy) policyFor(Request) *policy { return p }

// decide decides q, writes the verdict's rate-limit fields to fields under
// the names n, waits a shaping limit's delay, and tells the observer. It
// returns the reservation to settle after the handler, if the decision
// made one.
func (p *policy) decide(q *Request, fields map[string][]string, n *fieldNames) (Decision, *hold) {
	var start time.Time
	if p.Observe != nil {
		start = time.Now()
	}
	var s scratch
	d, quotas := p.verdict(q, &s)
	if quotas != nil {
		p.answer.headers(fields, n, &d, quotas, s.each[:len(quotas)])
	}
	var held *hold
	if s.held != nil {
		held = &hold{r: s.held}
		if p.budgets != nil {
			held.costs = append([]int(nil), s.costs[:s.n]...)
		}
	}
	if d.Allowed() && d.Result.Delay > 0 {
		if err := sleep(q.Context, d.Result.Delay); err != nil {
			d.Outcome, d.Status, d.Err = OutcomeError, http.StatusServiceUnavailable, err
		}
	}
	if d.Status == http.StatusServiceUnavailable { // come back in a second
		d.RetryAfter = time.Second
		fields[n.retryAfter] = []string{"1"}
	}
	d.problem = p.answer.problem
	if held != nil && !d.Allowed() { // reserved, but not served after all
		p.settle(q.Context, held.r, -1)
		held = nil
	}
	q.rec.add(d)
	if p.Observe != nil {
		d.Duration = time.Since(start)
		p.Observe(*q, d)
	}
	return d, held
}

// scratch is what a decision of a request is worked out in, on the stack
// of policy.decide: the limits and their scopes as the engine takes them,
// and every limit's result, which the headers read after the decision.
type scratch struct {
	n      int // how many of each array are used
	scopes [core.MaxLimits]string
	limits [core.MaxLimits]core.Limit
	each   [core.MaxLimits]core.Result
	costs  [core.MaxLimits]int  // with budgets: each limit's cost
	rest   [core.MaxLimits]bool // with budgets: which limits take the rest (Budget.TakeRest)
	held   *core.Reservation    // an allowed decision's, when it was a reservation
	keys   []string             // with WithAlsoKey: each limit's key; nil otherwise
}

// verdict decides q: skip, key, limits, one decision on Redis (the
// fallback's when Redis fails under FailLocal), and what that means for
// the request. It leaves every limit's result in s.each, and in s.held the
// reservation to settle when the decision is one (WithResponseCost, or a
// Concurrency limit) and allowed it; it returns the quotas the headers
// describe, nil when they should say nothing.
func (p *policy) verdict(q *Request, s *scratch) (Decision, []quota) {
	d := Decision{Policy: p.name}
	if p.Skip != nil && p.Skip(*q) {
		d.Outcome = OutcomeSkipped
		return d, nil
	}
	key, err := p.Key(*q)
	var quotas []quota
	if err == nil {
		d.Key = hashLong(key)
		quotas, err = p.requestQuotas(q)
	}
	if err == nil && p.alsoKeys != nil {
		s.keys, err = p.requestKeys(q, d.Key, quotas)
	}
	if err != nil {
		return p.invalid(q.Context, d, err), nil
	}
	ask := p.engineRequest(q, s, d.Key, quotas)
	dec, err := p.askRedis(q, &ask)
	if err != nil {
		var decided bool
		if d, decided = p.failed(q.Context, d, err, &ask); !decided {
			return d, nil
		}
	} else {
		d.Result, d.binding, d.Outcome = dec.Result, dec.Binding, OutcomeAllowed
		if dec.Reservation != nil && dec.Allowed {
			s.held = dec.Reservation
		}
	}
	return p.judge(q.Context, d, quotas, ask.Each)
}

// engineRequest returns what the engine decides for q, keyed by key,
// under quotas: worked out in s, each limit with its scope and the cost
// it reserves, as a reservation when the request is settled after its
// handler (budgets, WithResponseCost) or holds slots.
func (p *policy) engineRequest(q *Request, s *scratch, key string, quotas []quota) core.Request {
	s.n = len(quotas)
	n := s.n
	ask := core.Request{Key: key, Scopes: s.scopes[:n], Limits: s.limits[:n], N: p.cost, Each: s.each[:n], Keys: s.keys}
	for i, quota := range quotas {
		ask.Scopes[i], ask.Limits[i] = quota.scope, quota.limit
	}
	if p.budgets != nil {
		ask.Costs, ask.TakeRest = p.reservedCosts(q, s.costs[:n], s.rest[:n])
	}
	ask.Reserve = p.budgets != nil || p.ResponseCost != nil || holdsSlots(ask.Limits)
	return ask
}

// failed is the verdict when the engine could not decide ask (err): 400
// for a key or limits it refuses, 503 when the client left, and for a
// Redis failure, reported, what the failure policy says (the limits' own
// with WithLimitFailure: failureOf): a 503 under FailClosed, a pass under
// FailOpen or in a dry run, or under FailLocal the in-process fallback's
// decision, which decided reports (it is then judged as Redis's would be).
func (p *policy) failed(ctx context.Context, d Decision, err error, ask *core.Request) (_ Decision, decided bool) {
	d.Err = err
	switch {
	case isInputError(err): // limits a request picked, or its key: never a pass
		return p.invalid(ctx, d, err), false
	case ctx.Err() != nil: // the client left: not Redis's fault
		d.Outcome, d.Status, d.Err = OutcomeError, http.StatusServiceUnavailable, ctx.Err()
		return d, false
	}
	p.reportError(ctx, err)
	switch f := p.failureOf(ask); {
	case f == FailLocal:
		dec := p.fallback(ask)
		d.Result, d.binding, d.Outcome = dec.Result, dec.Binding, OutcomeLocal
		return d, true
	case f == FailClosed && !p.dryRun:
		d.Outcome, d.Status = OutcomeError, http.StatusServiceUnavailable
	default: // fail open, or a dry run, which never blocks
		d.Outcome = OutcomeError
	}
	return d, false
}

// judge is what a decision (Redis's, or the fallback's) means for the
// request: in a dry run a pass, a denial reported; an admission passes
// with its quotas; a denial is a 429 with its Retry-After and, with
// problem details, the limits it violated (each holds every limit's
// result). It returns the quotas the headers describe.
func (p *policy) judge(ctx context.Context, d Decision, quotas []quota, each []core.Result) (Decision, []quota) {
	switch {
	case p.dryRun: // decides and reports, never blocks nor answers
		if !d.Result.Allowed {
			if d.Outcome != OutcomeLocal {
				d.Outcome = OutcomeDryRun
			}
			p.reportDryRun(ctx, d.Result)
		}
		return d, nil
	case d.Result.Allowed:
		return d, quotas
	case d.Outcome == OutcomeLocal:
	case d.Result.Cached:
		d.Outcome = OutcomeCached
	default:
		d.Outcome = OutcomeDenied
	}
	d.Status = http.StatusTooManyRequests
	d.RetryAfter = RetryAfter(d.Result, p.answer.jitter)
	if p.answer.problem {
		d.violated = violated(quotas, each)
	}
	return d, quotas
}

// invalid is the verdict on a request without a key, or whose limits are
// wrong: 400, or a pass in a dry run. A request without a key, or whose
// limits could not be picked, is logged at warn level, one whose limits or cost cannot decide it (a configuration
// error: core.ErrInvalidLimit, core.ErrInvalidCost) at error level; each
// at most once a second per policy, with the error and how many it left
// out: a key function that never finds its key answers every request 400.
func (p *policy) invalid(ctx context.Context, d Decision, err error) Decision {
	d.Outcome, d.Err = OutcomeInvalid, err
	if !p.dryRun {
		d.Status = http.StatusBadRequest
	}
	if isConfigError(err) {
		if skipped, ok := p.confLog.allow(time.Now()); ok {
			p.log.ErrorContext(ctx, "redlimit: configuration error: the request's limits cannot decide it", "policy", p.name,
				"status", d.Status, "error", err, "requests_not_logged", skipped)
		}
		return d
	}
	what := "redlimit: request without a rate limit key"
	if errors.As(err, new(pickError)) {
		what = "redlimit: the request's limits could not be picked"
	}
	if skipped, ok := p.keyLog.allow(time.Now()); ok {
		p.log.WarnContext(ctx, what, "policy", p.name,
			"status", d.Status, "error", err, "requests_not_logged", skipped)
	}
	return d
}

// requestQuotas returns what q is decided under: the policy's quotas, the
// quotas of the set WithLimitSets picks, or, with WithRequestLimits
// (grpclimit.WithLimits for a call), the catch-all's and the limits q
// picked.
func (p *policy) requestQuotas(q *Request) ([]quota, error) {
	if p.pickSet != nil { // WithLimitSets: checked when the policy was built
		return p.setQuotas(q), nil
	}
	if p.Limits == nil {
		return p.quotas, nil
	}
	limits, err := p.Limits(*q)
	switch {
	case err != nil:
		return nil, pickError{err}
	case limits == nil:
		return p.quotas, nil
	case len(limits)+p.inherits+p.spent > core.MaxLimits:
		return nil, fmt.Errorf("%w: the request picked %d limits; at most %d", core.ErrInvalidLimit, len(limits), core.MaxLimits-p.inherits-p.spent)
	}
	// The cost was checked against the policy's own limits; these are
	// others. An invalid limit (no capacity) is core's to report.
	for _, l := range limits {
		if c := l.Capacity(); c > 0 && c < p.cost {
			return nil, fmt.Errorf("%w: WithCost(%d) is above the burst %d of the limits the request is decided by (%s): no request could ever be admitted",
				core.ErrInvalidCost, p.cost, smallestBurst(limits), formatLimits(limits))
		}
	}
	if p.spent > 0 { // the budgets' last, named after the request's
		for _, b := range p.budgets {
			limits = append(limits[:len(limits):len(limits)], b.Limits...)
		}
	}
	return append(p.quotas[:p.inherits:p.inherits], quotasOf(p.name, limits)...), nil
}

// reservedCosts fills costs, one per limit of a request q whose last p.spent
// limits are its budgets', with what each limit reserves: WithCost's n,
// or the budget's estimate; and rest with which limits take up to their
// cost (Budget.TakeRest). It returns them, rest nil when none does.
func (p *policy) reservedCosts(q *Request, costs []int, rest []bool) ([]int, []bool) {
	tail := len(costs) - p.spent
	for i := range costs[:tail] {
		costs[i], rest[i] = p.cost, false
	}
	any := false
	for _, b := range p.budgets {
		n := p.estimate(q, b)
		for i := tail + b.at; i < tail+b.at+b.n; i++ {
			costs[i], rest[i] = n, b.TakeRest && n > 0
			any = any || rest[i]
		}
	}
	if !any {
		rest = nil
	}
	return costs, rest
}

// holdsSlots reports whether a limit holds slots in flight (Concurrency),
// which only a reservation may take.
func holdsSlots(limits []core.Limit) bool {
	for _, l := range limits {
		if l.Algorithm == core.Concurrency {
			return true
		}
	}
	return false
}

// hashLong replaces keys longer than hashKeysOver bytes by "sha256:<hex>".
func hashLong(key string) string {
	if len(key) <= hashKeysOver {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// httpKey is WithKey's key function: f's key of a request's
// *http.Request; a request of another protocol has none (errNotHTTP).
func httpKey(f keyfunc.Func) func(Request) (string, error) {
	return func(q Request) (string, error) {
		if q.HTTP == nil {
			return "", errNotHTTP
		}
		return f(q.HTTP)
	}
}

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hold is an admitted request's reservation, to settle after its
// handler.
type hold struct {
	r     *core.Reservation
	costs []int // with budgets: each limit's reserved cost; else nil
}

// serveHeld serves a request whose decision is a reservation (Concurrency
// limits, WithResponseCost, budgets) with next, then settles it, however
// the handler ends, and frees its slots.
//
// When next returns, a request is settled at the cost WithResponseCost
// reports for the status and header next returns, capped at the policy's
// maximum, and at each budget's cost (budgetCost); a limit without one
// (none given, or a negative one) at what it reserved.
//
// When the handler panics (http.ErrAbortHandler included: httputil.ReverseProxy
// ends a response whose client left with it), or a cost function does, no
// cost function is called: the request limits' reserved cost stands, each
// budget is settled at what the handler reported to its Usage (its
// reservation if it reported nothing), and the panic goes on up.
func (p *policy) serveHeld(q *Request, held *hold, next func() (status int, header http.Header)) {
	returned := false
	defer func() {
		if !returned { // a panic, on its way up
			p.settleHeld(q, held, -1, p.reportedCosts(q, held))
		}
	}()
	status, header := next()
	cost, costs := p.finalCosts(q, held, status, header)
	returned = true
	p.settleHeld(q, held, cost, costs)
}

// settleHeld settles held at costs, one per limit, when the policy has
// budgets; else at cost (-1: the reserved n).
func (p *policy) settleHeld(q *Request, held *hold, cost int, costs []int) {
	if costs != nil {
		p.settleEach(q.Context, held.r, costs)
		return
	}
	p.settle(q.Context, held.r, cost)
}

// finalCosts returns what a request whose handler returned status and
// header is settled at: with budgets, each limit's cost (costs), else the
// cost of every limit (-1: the reserved n). It calls the cost functions.
func (p *policy) finalCosts(q *Request, held *hold, status int, header http.Header) (cost int, costs []int) {
	c := -1
	if p.ResponseCost != nil {
		c = p.boundCost(q.Context, p.ResponseCost(*q, status, header))
	}
	if held.costs == nil {
		return c, nil
	}
	costs = slices.Clone(held.costs) // each limit's reserved cost: what a -1 leaves
	tail := len(costs) - p.spent
	if c >= 0 {
		for i := range costs[:tail] {
			costs[i] = c
		}
	}
	for _, b := range p.budgets {
		if n := p.budgetCost(q, b, status, header); n >= 0 {
			for i := tail + b.at; i < tail+b.at+b.n; i++ {
				costs[i] = n
			}
		}
	}
	return -1, costs
}

// reportedCosts returns what a request whose handler did not return (it
// panicked) is settled at, without calling a cost function: with
// budgets, each limit's reserved cost but a budget's, which is what the
// handler reported to its Usage if it reported any; nil without budgets
// (the reserved n).
func (p *policy) reportedCosts(q *Request, held *hold) []int {
	if held.costs == nil {
		return nil
	}
	costs := slices.Clone(held.costs)
	tail := len(costs) - p.spent
	for _, b := range p.budgets {
		if n := p.reported(q, b); n >= 0 {
			for i := tail + b.at; i < tail+b.at+b.n; i++ {
				costs[i] = n
			}
		}
	}
	return costs
}

// boundCost returns what a request whose WithResponseCost is cost is
// settled at: cost, the maximum if cost is above it, or -1 (the reserved
// n stands) if it is negative. Either bound is logged, each at most once
// a second per policy: neither is a failure of the decision, which stands.
func (p *policy) boundCost(ctx context.Context, cost int) int {
	switch {
	case cost < 0:
		if skipped, ok := p.invalidCostLog.allow(time.Now()); ok {
			p.log.ErrorContext(ctx, "redlimit: invalid response cost: WithResponseCost returned a negative cost; settled at the reserved cost, which stands, and its slots freed",
				"policy", p.name, "cost", cost, "reserved", p.cost, "costs_not_logged", skipped)
		}
		return -1
	case cost > p.maxCost:
		if skipped, ok := p.maxCostLog.allow(time.Now()); ok {
			p.log.WarnContext(ctx, "redlimit: response cost above the maximum a request may be charged (WithMaxCost); charged the maximum",
				"policy", p.name, "cost", cost, "charged", p.maxCost, "costs_not_logged", skipped)
		}
		return p.maxCost
	}
	return cost
}

// settle settles held at cost (-1: the reserved n), with a context the
// client's leaving does not cancel: the Limiter's timeout bounds it.
func (p *policy) settle(ctx context.Context, held *core.Reservation, cost int) {
	ctx = context.WithoutCancel(ctx)
	var err error
	if cost < 0 {
		err = held.Release(ctx)
	} else {
		err = held.Settle(ctx, cost)
	}
	if err != nil {
		p.reportSettleError(ctx, err)
	}
}

// settleEach settles held at costs, one per limit, with a context the
// client's leaving does not cancel.
func (p *policy) settleEach(ctx context.Context, held *core.Reservation, costs []int) {
	if err := held.SettleEach(context.WithoutCancel(ctx), costs); err != nil {
		p.reportSettleError(ctx, err)
	}
}

// reportSettleError logs an error settling a request's reservation after
// its handler, at error level, at most once a second per policy. The
// request was decided and served. The Limiter releases the slots the
// reservation held in the background, retrying until Redis answers or
// their lease ends (core.Stats counts RetriedReleases and
// AbandonedReleases); a refund or a charge the settlement carried is sent
// at most once, so it may or may not have been made.
func (p *policy) reportSettleError(ctx context.Context, err error) {
	if skipped, ok := p.settleLog.allow(time.Now()); ok {
		p.log.ErrorContext(ctx, "redlimit: settling a served request's reservation failed; any slot it held is released in the background, retried until Redis answers or its lease ends; a refund or charge it carried may or may not have been made",
			"policy", p.name, "error", err, "errors_not_logged", skipped)
	}
}

// reportError logs a Redis error at error level, at most once a
// second per policy, with how many it left out.
func (p *policy) reportError(ctx context.Context, err error) {
	if skipped, ok := p.errLog.allow(time.Now()); ok {
		p.log.ErrorContext(ctx, "redlimit: rate limit decision failed", "policy", p.name,
			"failure", p.failure.String(), "error", err, "errors_not_logged", skipped)
	}
}

// reportDryRun logs a request a dry run would have denied: at debug level
// each, and at info level at most once a second per policy, with how many
// there were since.
func (p *policy) reportDryRun(ctx context.Context, res core.Result) {
	p.log.DebugContext(ctx, "redlimit: dry run: would deny", "policy", p.name,
		"limit", res.Limit.String(), "retry_after", res.RetryAfter)
	if skipped, ok := p.dryLog.allow(time.Now()); ok {
		p.log.InfoContext(ctx, "redlimit: dry run: requests would have been denied", "policy", p.name,
			"limit", res.Limit.String(), "count", skipped+1)
	}
}

// pickError is an error of the function that picks a request's limits
// (WithRequestLimits, grpclimit.WithLimits).
type pickError struct{ err error }

func (e pickError) Error() string { return "redlimit: the request's limits: " + e.err.Error() }

func (e pickError) Unwrap() error { return e.err }

// isConfigError reports an error of the limits or cost a request is
// decided by, which the service's configuration, not the client, got
// wrong.
func isConfigError(err error) bool {
	return errors.Is(err, core.ErrInvalidLimit) || errors.Is(err, core.ErrInvalidCost)
}

// isInputError reports an error of the request's own making, which no
// failure policy may turn into a pass.
func isInputError(err error) bool {
	return errors.Is(err, core.ErrInvalidLimit) || errors.Is(err, core.ErrInvalidCost) || errors.Is(err, core.ErrInvalidKey)
}

// errNotHTTP is the key error of a request without an *http.Request under
// a keyfunc.Func.
var errNotHTTP = fmt.Errorf("%w: the key function (redlimit.WithKey) reads HTTP requests, and this request is of another protocol", keyfunc.ErrNoKey)

// One request's record: the Decision of every policy that decided it
// (DecisionsFrom), and its one deadline. Serve puts it in the context of
// the request the first policy decides, which the handlers get; an
// adapter of another protocol with ContextWithDecisions.

// record is one request's: every Decision made for it, in order, and
// what is left of the time its decisions may wait on Redis. Its methods
// are safe for concurrent use; add does nothing on a nil *record.
type record struct {
	mu        sync.Mutex
	decisions []Decision
	inline    [2]Decision   // decisions' first array: most requests cross one or two policies
	left      time.Duration // the time its decisions may still wait, once timed
	timed     bool          // a decision with a timeout started the deadline
}

type recordKey struct{}

// withRecord returns ctx carrying a record, and the record: ctx itself
// and its own when it has one (nested policies share it).
func withRecord(ctx context.Context) (context.Context, *record) {
	if rec := recordFrom(ctx); rec != nil {
		return ctx, rec
	}
	rec := new(record)
	rec.decisions = rec.inline[:0]
	return context.WithValue(ctx, recordKey{}, rec), rec
}

// recordFrom returns the record of ctx, nil when it has none.
func recordFrom(ctx context.Context) *record {
	rec, _ := ctx.Value(recordKey{}).(*record)
	return rec
}

// DecisionsFrom returns the Decision of every policy that has decided the
// request whose context ctx is, in the order they decided: the outermost
// middleware's first. A handler reads it from r.Context() (gin's
// c.Request, echo's c.Request(); a gRPC handler from its ctx), and so do
// an observer (WithObserver: its own Decision last) and a deny handler,
// from the request they are given: whether a decision was made in
// process while Redis failed (OutcomeLocal), which policy denied, what
// is left. It is nil for a context no policy decided, or that the
// request's policies never saw. Each Decision is recorded once made,
// before it is observed and before the request is served or answered;
// the slice is a copy, the caller's to keep or change. It is safe for
// concurrent use, with the request's policies too.
func DecisionsFrom(ctx context.Context) []Decision {
	rec := recordFrom(ctx)
	if rec == nil {
		return nil
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.decisions) == 0 {
		return nil
	}
	return append([]Decision(nil), rec.decisions...)
}

// ContextWithDecisions returns ctx carrying a record of the Decisions of
// the request whose context it is, where DecisionsFrom finds them, and
// its one deadline: its policies' decisions together wait on Redis at most
// the timeout of the first one's Limiter (core.WithTimeout), whatever
// Limiter each decides with, a decision that finds none left failing at
// once (as a timeout, under the policy's failure policy); the time its
// handlers take between the policies does not count, and an earlier
// deadline of ctx still bounds each. It
// returns ctx itself when ctx carries a record already (nested policies
// share it). Serve does it for every HTTP request a policy applies to,
// and the adapters hand the handler a request whose context carries it;
// an adapter of another protocol calls it before ServeRequest and gives
// its handler the context (grpclimit does). Without it ServeRequest
// records nothing and its decisions share no deadline.
func ContextWithDecisions(ctx context.Context) context.Context {
	ctx, _ = withRecord(ctx)
	return ctx
}

// add records d.
func (rec *record) add(d Decision) {
	if rec == nil {
		return
	}
	rec.mu.Lock()
	rec.decisions = append(rec.decisions, d)
	rec.mu.Unlock()
}

// timeLeft returns what is left of the request's deadline, and whether
// one is running (a decision with a timeout has waited).
func (rec *record) timeLeft() (time.Duration, bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.left, rec.timed
}

// spend takes waited from what is left of the request's deadline; the
// first decision with a timeout starts it at that timeout.
func (rec *record) spend(waited, timeout time.Duration) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !rec.timed {
		if timeout <= 0 {
			return
		}
		rec.timed, rec.left = true, timeout
	}
	rec.left -= waited
}

// askRedis has the Limiter decide ask for q within what is left of q's
// one deadline: the first of its decisions (with a timeout) starts it at
// its Limiter's timeout, and each takes the time it waits from it, so
// that a request's policies together wait at most one timeout, not one
// each (the time its handlers take between them does not count). With
// none left, it fails at once with errDeadlineUsed.
func (p *policy) askRedis(q *Request, ask *core.Request) (core.Decision, error) {
	rec := q.rec
	if rec == nil {
		return p.lim.Decide(q.Context, ask)
	}
	left, timed := rec.timeLeft()
	if timed && left <= 0 {
		return core.Decision{}, errDeadlineUsed
	}
	ask.Timeout = left
	start := time.Now()
	dec, err := p.lim.Decide(q.Context, ask)
	rec.spend(time.Since(start), p.lim.Timeout())
	return dec, err
}

// errDeadlineUsed is the error of a decision whose request's earlier
// decisions used up its deadline. It wraps core.ErrTimeout and
// context.DeadlineExceeded, as the Limiter's timeout does.
var errDeadlineUsed = fmt.Errorf("redlimit: not sent: the request's earlier decisions used up its deadline, the first one's timeout (core.WithTimeout): %w (%w)",
	core.ErrTimeout, context.DeadlineExceeded)
