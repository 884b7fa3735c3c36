package redlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

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

	// estimates are a rule's "estimate=N": what its requests reserve of
	// a budget, in place of the budget's Estimate; nil for none.
	estimates []fixedEstimate
	// sets are WithLimitSets' sets, each set's quotas (its limits, then
	// the budgets'), built once; setLog throttles the log of pick's errors.
	sets   map[string][]quota
	setLog throttle
	// alsoQuotas are WithAlsoKey's keys' quotas, which every request's
	// quotas hold before the budgets'; nil without.
	alsoQuotas []quota
}

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
	if p.fallsBack() {
		p.local = p.lim.Local(localKeys)
	}
	if err := p.buildKeysAndSets(o, spent); err != nil {
		return nil, err
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

// formatLimits writes limits as core.ParseLimits reads them.
func formatLimits(limits []core.Limit) string {
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = l.String()
	}
	return strings.Join(parts, ", ")
}
