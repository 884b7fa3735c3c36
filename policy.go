package redlimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// Policy is what an adapter enforces: one set of limits for every request
// (NewPolicy), or a rules table that picks one per request (NewRuleSet).
// Adapters take either, and so does Serve. A Policy is safe for concurrent
// use.
type Policy interface {
	// policyFor returns the policy that applies to q, or nil for none.
	policyFor(q Request) *policy
}

// NewPolicy checks the limit and options and returns the Policy that
// enforces them on every request. It does no I/O. Errors name what is
// wrong; a bad limit wraps core.ErrInvalidLimit; a nil or zero Limiter,
// which cannot decide anything, is refused (make one with core.New). The
// adapters' New functions call it, and panic on its error.
func NewPolicy(lim *core.Limiter, limit core.Limit, opts ...Option) (Policy, error) {
	c := newOptions(opts)
	if c.Rest.tier != nil {
		return nil, errors.New("redlimit: WithTier is for rules tables, whose rules name their tiers (NewRuleSet)")
	}
	p, err := newPolicy(&c, lim, append([]core.Limit{limit}, c.Rest.also...))
	if err != nil {
		return nil, err
	}
	return p, nil
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

// errNotHTTP is the key error of a request without an *http.Request under
// a keyfunc.Func.
var errNotHTTP = fmt.Errorf("%w: the key function (redlimit.WithKey) reads HTTP requests, and this request is of another protocol", keyfunc.ErrNoKey)

// policy is one or more limits with everything a request needs to be
// decided under them: its options, checked, and what they are worked out
// to. It is built once and only read afterwards.
type policy struct {
	RequestFuncs
	httpOnly httpOnly
	config
	lim      *core.Limiter
	quotas   []quota // what a request is decided under: a rules table's catch-all's, then its own, then its budgets'
	inherits int     // how many of quotas are the catch-all's
	budgets  []*budget
	spent    int         // how many quotas the budgets have, the last of a request's
	local    *core.Local // FailLocal's; nil otherwise
	log      *slog.Logger
	errLog   throttle
	dryLog   throttle
	keyLog   throttle // requests without a key
	confLog  throttle // requests whose limits or cost cannot decide them
	// after the handler: response costs out of bounds, failed settlements
	maxCostLog, invalidCostLog, settleLog throttle
}

func (p *policy) policyFor(Request) *policy { return p }

// Bounds of a policy.
const (
	maxNameLen   = 256 // names are part of every Redis key
	hashKeysOver = 128 // longer keys are replaced by their SHA-256, so a client cannot make Redis store long keys
)

// newOptions applies opts to the defaults: keyfunc.IP's key, a cost of 1.
func newOptions(opts []Option) options {
	var c options
	WithKey(keyfunc.IP())(&c)
	c.Rest.cost = 1
	for _, opt := range opts {
		opt(&c)
	}
	return c
}

// newPolicy checks o and builds a policy of limits with it.
func newPolicy(o *options, lim *core.Limiter, limits []core.Limit) (*policy, error) {
	c := &o.Rest
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("redlimit: NewPolicy: %w", err)
	}
	name := c.name
	if name == "" {
		name = formatLimits(limits)
	}
	budgets, spent, err := checkBudgets(o.Budgets, 0)
	if err != nil {
		return nil, err
	}
	all := append(limits[:len(limits):len(limits)], spent...)
	if err := core.CheckLimits(nil, all); err != nil {
		return nil, err
	}
	burst := smallestBurst(limits)
	switch {
	case o.Key == nil:
		return nil, errors.New("redlimit: WithKey(nil)")
	case c.cost < 1 || c.cost > burst:
		return nil, fmt.Errorf("redlimit: cost %d must be between 1 and the burst of %v (%d)", c.cost, formatLimits(limits), burst)
	case c.maxCost < 0 || c.maxCost > defaultMaxCost:
		return nil, fmt.Errorf("redlimit: WithMaxCost(%d): want 0 (the default, %d) to %d", c.maxCost, defaultMaxCost, defaultMaxCost)
	case c.maxCost > 0 && c.maxCost < c.cost:
		return nil, fmt.Errorf("redlimit: WithMaxCost(%d) is below the cost of a request, %d (WithCost)", c.maxCost, c.cost)
	case c.failure < FailOpen || c.failure > FailLocal:
		return nil, fmt.Errorf("redlimit: unknown failure policy %v", c.failure)
	case len(name) > maxNameLen:
		return nil, fmt.Errorf("redlimit: policy name of %d bytes is longer than %d (name the policy with WithName)", len(name), maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if b := name[i]; b < 0x20 || b > 0x7e {
			return nil, fmt.Errorf("redlimit: policy name %q: byte %d is not printable ASCII, which the RateLimit header fields cannot carry", name, i)
		}
	}
	if err := c.answer.check(); err != nil {
		return nil, err
	}
	p := &policy{RequestFuncs: o.RequestFuncs, httpOnly: o.httpOnly, config: *c, lim: lim, quotas: quotasOf(name, all),
		budgets: budgets, spent: len(spent)}
	p.name, p.also = name, nil
	if p.maxCost == 0 {
		p.maxCost = defaultMaxCost
	}
	p.log = p.lim.Logger()
	if p.failure == FailLocal {
		p.local = p.lim.Local(localKeys)
	}
	return p, nil
}

func smallestBurst(limits []core.Limit) int {
	burst := limits[0].Capacity()
	for _, l := range limits[1:] {
		burst = min(burst, l.Capacity())
	}
	return burst
}

// hold is an admitted request's reservation, to settle after its
// handler.
type hold struct {
	r     *core.Reservation
	costs []int // with budgets: each limit's reserved cost; else nil
}

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
	if err != nil {
		return p.invalid(q.Context, d, err), nil
	}
	ask := p.engineRequest(q, s, d.Key, quotas)
	dec, err := p.lim.Decide(q.Context, &ask)
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
	ask := core.Request{Key: key, Scopes: s.scopes[:n], Limits: s.limits[:n], N: p.cost, Each: s.each[:n]}
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
// Redis failure, reported, what the failure policy says: a 503 under
// FailClosed, a pass under FailOpen or in a dry run, or under FailLocal
// the in-process fallback's decision, which decided reports (it is then
// judged as Redis's would be).
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
	switch {
	case p.failure == FailLocal:
		dec := p.local.Decide(ask)
		d.Result, d.binding, d.Outcome = dec.Result, dec.Binding, OutcomeLocal
		return d, true
	case p.failure == FailClosed && !p.dryRun:
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

// requestQuotas returns what q is decided under: the policy's quotas, or,
// with WithRequestLimits (grpclimit.WithLimits for a call), the
// catch-all's and the limits q picked.
func (p *policy) requestQuotas(q *Request) ([]quota, error) {
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

// isInputError reports an error of the request's own making, which no
// failure policy may turn into a pass.
func isInputError(err error) bool {
	return errors.Is(err, core.ErrInvalidLimit) || errors.Is(err, core.ErrInvalidCost) || errors.Is(err, core.ErrInvalidKey)
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

// hashLong replaces keys longer than hashKeysOver bytes by "sha256:<hex>".
func hashLong(key string) string {
	if len(key) <= hashKeysOver {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// formatLimits writes limits as core.ParseLimits reads them.
func formatLimits(limits []core.Limit) string {
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = l.String()
	}
	return strings.Join(parts, ", ")
}
