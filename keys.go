package redlimit

import (
	"errors"
	"fmt"
	"slices"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// WithAlsoKey decides each request for a second key too, with limits of
// its own, all or nothing with the policy's own key: a login limited per
// address (the policy's key) and per user name (key) at once, where a
// user name's 429 is charged to neither, nor to the address. name (1 to
// 64 letters, digits, '_', '-' or '.') names the key's limits: their
// state is kept under "<policy name>/<name>", and their header fields'
// list members are so named. A request whose key function fails is
// answered as by WithKey (400; keyfunc.First falls back). The limits are
// checked with the policy's (a burst below WithCost's n, limits that
// would share state, more than core.MaxLimits in all are errors); they are
// charged WithCost's n, settled with WithResponseCost's, and not replaced
// by WithLimitSets' sets. Several WithAlsoKey options add several keys.
//
// On one Redis server the keys are decided in one script, one round trip,
// as one key's limits are. On a Cluster (where the keys are in different
// slots) or behind a proxy (core.WithBatchScript(false)), each key's
// limits are reserved in turn, one round trip each, and refunded if
// another key denies, so a denied request ends charged to none, exactly;
// a key the Limiter saw denied moments ago is asked first, from its deny
// cache. docs/keys.md says what it costs. key reads HTTP requests:
// grpclimit refuses the option. Not for rules tables, nor with
// WithRequestLimits.
func WithAlsoKey(name string, key keyfunc.Func, limits ...core.Limit) Option {
	a := alsoKey{name: name, limits: slices.Clone(limits)}
	if key != nil {
		a.key = httpKey(key)
	}
	return func(c *options) {
		c.Rest.alsoKeys = append(c.Rest.alsoKeys, a)
		c.httpOnly.alsoKey = "redlimit.WithAlsoKey"
	}
}

// alsoKey is a WithAlsoKey's key: its name, its key function and its
// limits.
type alsoKey struct {
	name   string
	key    func(q Request) (string, error)
	limits []core.Limit
}

// maxKeyName bounds the name of a WithAlsoKey key.
const maxKeyName = 64

// buildAlsoKeys checks the policy's WithAlsoKey keys and enters their
// quotas among its own, before the budgets'.
func (p *policy) buildAlsoKeys(o *options) error {
	if o.Limits != nil {
		return errors.New("redlimit: WithAlsoKey is not for WithRequestLimits: pick plans with WithLimitSets")
	}
	var quotas []quota
	for i, a := range p.alsoKeys {
		if err := p.checkAlsoKey(a, i); err != nil {
			return fmt.Errorf("redlimit: WithAlsoKey(%q): %w", a.name, err)
		}
		for _, q := range quotasOf(p.name+"/"+a.name, a.limits) {
			q.key = i + 1
			quotas = append(quotas, q)
		}
	}
	if n := len(p.quotas) + len(quotas); n > core.MaxLimits {
		return fmt.Errorf("%w: WithAlsoKey: %d limits in all; at most %d", core.ErrInvalidLimit, n, core.MaxLimits)
	}
	p.alsoQuotas = quotas
	p.quotas = p.withAlso(p.quotas)
	return nil
}

// checkAlsoKey checks the i-th WithAlsoKey key of the policy.
func (p *policy) checkAlsoKey(a alsoKey, i int) error {
	switch {
	case a.key == nil:
		return errors.New("a nil key function")
	case len(a.limits) == 0:
		return fmt.Errorf("%w: no limits for the key", core.ErrInvalidLimit)
	case a.name == "" || len(a.name) > maxKeyName:
		return fmt.Errorf("want a name of 1 to %d bytes", maxKeyName)
	case len(p.name)+1+len(a.name) > maxNameLen:
		return fmt.Errorf("the policy's name and the key's are longer than %d bytes", maxNameLen)
	case slices.ContainsFunc(p.alsoKeys[:i], func(o alsoKey) bool { return o.name == a.name }):
		return errors.New("the name is given twice")
	}
	for j := 0; j < len(a.name); j++ {
		if b := a.name[j]; !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-' || b == '.') {
			return fmt.Errorf("byte %q of the name: want letters, digits, '_', '-' and '.'", b)
		}
	}
	for _, l := range a.limits {
		if l.Unit != "" {
			return fmt.Errorf("%w: %v counts %q: a key's limits count requests", core.ErrInvalidLimit, l, l.Unit)
		}
	}
	if err := core.CheckLimits(nil, a.limits); err != nil {
		return err
	}
	if burst := smallestBurst(a.limits); burst < p.cost {
		return fmt.Errorf("%w: WithCost(%d) is above the burst %d of %s: no request could ever be admitted", core.ErrInvalidCost, p.cost, burst, formatLimits(a.limits))
	}
	return nil
}

// withAlso returns quotas, a request's (its limits, then its budgets'),
// with the WithAlsoKey keys' quotas before the budgets'.
func (p *policy) withAlso(quotas []quota) []quota {
	if p.alsoQuotas == nil {
		return quotas
	}
	tail := len(quotas) - p.spent
	out := make([]quota, 0, len(quotas)+len(p.alsoQuotas))
	out = append(append(append(out, quotas[:tail]...), p.alsoQuotas...), quotas[tail:]...)
	return out
}

// requestKeys returns the key of each of quotas for q, whose own key is
// key: the policy's, or a WithAlsoKey key's, hashed when long. An error
// is the key function's, a request without a key.
func (p *policy) requestKeys(q *Request, key string, quotas []quota) ([]string, error) {
	var values [core.MaxLimits]string
	for i, a := range p.alsoKeys {
		v, err := a.key(*q)
		if err != nil {
			return nil, fmt.Errorf("WithAlsoKey(%q): %w", a.name, err)
		}
		values[i] = hashLong(v)
	}
	keys := make([]string, len(quotas))
	for i, qu := range quotas {
		keys[i] = key
		if qu.key > 0 {
			keys[i] = values[qu.key-1]
		}
	}
	return keys, nil
}
