package redlimit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/redlimit/redlimit/core"
)

// WithLimitSets picks each request's limits by name from sets, a plan's
// name to its limits ("free": "10/s, 1000/d", "pro": "100/s, 100000/d",
// core.ParseLimits' grammar), in place of the policy's own and WithAlso's:
// pick tells a request's set, as WithTier tells a tier, so ginlimit.Tier
// and echolimit.Tier, which read a value an earlier handler stored, and
// chilimit.Tier, which reads the request's context, pick it in one line.
// The policy's own limits are the default set: for a request pick names
// "" or a set sets does not hold. An error from pick is logged at warn
// level (at most once a second per policy) and the request decided by
// the default: never without a limit.
//
// Every set is checked when the policy is built, as its own limits are: a
// limit that does not parse or would share state, more than
// core.MaxLimits with the budgets', and a burst below WithCost's n are
// errors naming the set (a cost no request of the set could pay wraps
// core.ErrInvalidCost), never a 400 per request. A set's limits count
// requests: a budget's limits are WithBudget's. A set's limits keep their
// state under the policy's name, their algorithm and their period, so a
// key that moves from one set to another keeps what it used of every
// limit both have with the same algorithm and period. Each set's header
// fields are worked out once: picking a set costs a request nothing more
// than pick's own work.
//
// Not with WithRequestLimits (which picks limits of any shape per
// request), and not for rules tables, whose tiers are the same thing
// ("* tier=pro", with RuleSet.Update to reload them). pick reads the
// request's description, so it serves gRPC calls too; it must be safe for
// concurrent use.
func WithLimitSets(sets map[string]string, pick func(q Request) (string, error)) Option {
	copied := maps.Clone(sets)
	return func(c *options) { c.Rest.limitSets, c.Rest.pickSet = copied, pick }
}

// buildKeysAndSets checks and works out the policy's WithAlsoKey keys and
// WithLimitSets sets, if it has any; spent are its budgets' limits.
func (p *policy) buildKeysAndSets(o *options, spent []core.Limit) error {
	if o.Rest.alsoKeys != nil {
		if err := p.buildAlsoKeys(o); err != nil {
			return err
		}
	}
	if o.Rest.pickSet != nil || o.Rest.limitSets != nil {
		return p.buildSets(o, spent)
	}
	return nil
}

// buildSets checks the limit sets of o and works out each one's quotas:
// its limits, then the budgets' (spent).
func (p *policy) buildSets(o *options, spent []core.Limit) error {
	c := &o.Rest
	switch {
	case c.pickSet == nil:
		return errors.New("redlimit: WithLimitSets without a function to pick a request's set")
	case len(c.limitSets) == 0:
		return errors.New("redlimit: WithLimitSets without sets: give the sets a request may be decided by (the policy's own limits are the default)")
	case o.Limits != nil:
		return errors.New("redlimit: WithLimitSets and WithRequestLimits both pick a request's limits: use one")
	}
	p.sets = make(map[string][]quota, len(c.limitSets))
	for _, name := range slices.Sorted(maps.Keys(c.limitSets)) { // errors in the same order every time
		limits, err := p.checkSet(name, c.limitSets[name], spent)
		if err != nil {
			return fmt.Errorf("redlimit: WithLimitSets: set %q: %w", name, err)
		}
		p.sets[name] = p.withAlso(quotasOf(p.name, limits))
	}
	return nil
}

// checkSet checks the set name of limit string spec and returns its
// limits with the budgets' (spent) after them.
func (p *policy) checkSet(name, spec string, spent []core.Limit) ([]core.Limit, error) {
	if name == "" {
		return nil, errors.New(`the name "" is the default's, the policy's own limits: name the set`)
	}
	limits, err := core.ParseLimits(spec)
	if err != nil {
		return nil, err
	}
	for _, l := range limits {
		if l.Unit != "" {
			return nil, fmt.Errorf("%w: %v counts %q: a set's limits count requests, a budget's are WithBudget's (a rules table's tiers may write them)", core.ErrInvalidLimit, l, l.Unit)
		}
	}
	if burst := smallestBurst(limits); burst < p.cost {
		return nil, fmt.Errorf("%w: WithCost(%d) is above the burst %d of %s: no request of the set could ever be admitted",
			core.ErrInvalidCost, p.cost, burst, formatLimits(limits))
	}
	all := append(limits[:len(limits):len(limits)], spent...)
	if err := core.CheckLimits(nil, all); err != nil {
		return nil, err
	}
	if n := len(all) + len(p.alsoQuotas); n > core.MaxLimits {
		return nil, fmt.Errorf("%w: %d limits with WithAlsoKey's; at most %d", core.ErrInvalidLimit, n, core.MaxLimits)
	}
	return all, nil
}

// setQuotas returns what q is decided under with WithLimitSets: the
// quotas of the set pick names, or the policy's own for "", a name
// without a set, or pick's error, which is logged.
func (p *policy) setQuotas(q *Request) []quota {
	name, err := p.pickSet(*q)
	if err != nil {
		if skipped, ok := p.setLog.allow(time.Now()); ok {
			p.log.WarnContext(q.Context, "redlimit: the request's limit set could not be told; decided by the policy's own limits",
				"policy", p.name, "error", err, "requests_not_logged", skipped)
		}
		return p.quotas
	}
	if quotas, ok := p.sets[name]; ok {
		return quotas
	}
	return p.quotas
}
