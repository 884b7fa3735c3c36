package redlimit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redlimit/redlimit/core"
)

// A rule's value, read: its limits (core.ParseLimits' grammar) and, among
// them or alone, its settings: what a request under the rule costs
// ("cost=5") and what it reserves of a budget ("estimate=2000",
// "estimate=2000 unit=tokens"). Rules documents the grammar.

// ruleSpec is a rule's value, read.
type ruleSpec struct {
	limits    []core.Limit
	cost      int             // cost=N; 0: the set's (WithCost's)
	estimates []fixedEstimate // estimate=N [unit=NAME]
}

// fixedEstimate is what a rule's request reserves of a budget, whatever
// the budget's Estimate function says: estimate=N of the budget of unit
// ("": the rule's only budget).
type fixedEstimate struct {
	unit string
	n    int
}

// parseRuleSpec reads a rule's value: its limits and its settings. A value
// of settings only has no limits (a rule decided by the catch-all's); the
// table checks it has one. A cost above the smallest burst of the rule's
// own request limits is an error wrapping core.ErrInvalidCost: no request
// could ever be admitted.
func parseRuleSpec(spec string) (ruleSpec, error) {
	var rs ruleSpec
	var limits []string
	for _, item := range strings.Split(spec, ",") {
		word := strings.TrimSpace(item)
		name, _, _ := strings.Cut(word, "=")
		switch strings.TrimSpace(name) {
		case "cost":
			if err := rs.setCost(word); err != nil {
				return ruleSpec{}, err
			}
		case "estimate":
			if err := rs.addEstimate(word); err != nil {
				return ruleSpec{}, err
			}
		default:
			limits = append(limits, item)
		}
	}
	if len(limits) > 0 {
		var err error
		if rs.limits, err = core.ParseLimits(strings.Join(limits, ",")); err != nil {
			return ruleSpec{}, err
		}
	}
	return rs, rs.checkCost(rs.limits, "its limits")
}

// setCost reads "cost=N".
func (rs *ruleSpec) setCost(word string) error {
	n, err := settingCount(word, "cost=", 1)
	switch {
	case err != nil:
		return err
	case rs.cost != 0:
		return fmt.Errorf("%w: cost is given twice", core.ErrInvalidCost)
	}
	rs.cost = n
	return nil
}

// addEstimate reads "estimate=N" or "estimate=N unit=NAME".
func (rs *ruleSpec) addEstimate(word string) error {
	fields := strings.Fields(word)
	n, err := settingCount(fields[0], "estimate=", 0)
	if err != nil {
		return err
	}
	e := fixedEstimate{n: n}
	switch {
	case len(fields) == 2 && strings.HasPrefix(fields[1], "unit=") && len(fields[1]) > len("unit="):
		e.unit = strings.TrimPrefix(fields[1], "unit=")
	case len(fields) != 1:
		return fmt.Errorf("%w: %q: want estimate=N, or estimate=N unit=NAME for the budget of unit NAME", core.ErrInvalidCost, word)
	}
	if slices.ContainsFunc(rs.estimates, func(o fixedEstimate) bool { return o.unit == e.unit }) {
		return fmt.Errorf("%w: estimate %s is given twice", core.ErrInvalidCost, describeUnit(e.unit))
	}
	rs.estimates = append(rs.estimates, e)
	return nil
}

// settingCount reads the whole number of a setting "name=N", N from least
// to core.MaxCount.
func settingCount(word, name string, least int) (int, error) {
	v := strings.TrimPrefix(word, name)
	n, err := strconv.Atoi(v)
	if err != nil || n < least || n > core.MaxCount || v != strconv.Itoa(n) {
		return 0, fmt.Errorf("%w: %q: want %s followed by a whole number from %d to %d", core.ErrInvalidCost, word, name, least, core.MaxCount)
	}
	return n, nil
}

// checkCost reports a cost the request limits among limits (what) can
// never admit.
func (rs *ruleSpec) checkCost(limits []core.Limit, what string) error {
	if rs.cost == 0 {
		return nil
	}
	for _, l := range limits {
		if l.Unit == "" && l.Capacity() < rs.cost {
			return fmt.Errorf("%w: cost=%d is above the burst %d of %s (%v): no request could ever be admitted",
				core.ErrInvalidCost, rs.cost, l.Capacity(), what, l)
		}
	}
	return nil
}

// describeUnit names a budget for errors: "of unit \"tokens\"", or "of
// the budget" for the only one.
func describeUnit(unit string) string {
	if unit == "" {
		return "of the budget"
	}
	return fmt.Sprintf("of unit %q", unit)
}

// checkEstimates checks the fixed estimates of a rule's policy against
// its budgets, and returns them with each one's unit named: an estimate
// must name a budget of the policy (estimate=N alone, its only one) and
// fit what a request may reserve of it (its MaxCost, and its smallest
// burst unless TakeRest): one that does not would be capped at every
// request.
func checkEstimates(estimates []fixedEstimate, budgets []*budget) ([]fixedEstimate, error) {
	out := make([]fixedEstimate, 0, len(estimates))
	for _, e := range estimates {
		i := slices.IndexFunc(budgets, func(b *budget) bool { return b.unit == e.unit })
		switch {
		case e.unit == "" && len(budgets) == 1:
			i = 0
		case e.unit == "" && len(budgets) > 1:
			return nil, fmt.Errorf("%w: estimate=%d: the rule has %d budgets; name one (estimate=%d unit=%s)",
				core.ErrInvalidCost, e.n, len(budgets), e.n, budgets[0].unit)
		}
		if i < 0 {
			return nil, fmt.Errorf("%w: estimate %s: no redlimit.WithBudget of that unit applies to the rule", core.ErrInvalidCost, describeUnit(e.unit))
		}
		b := budgets[i]
		switch {
		case e.n > b.MaxCost:
			return nil, fmt.Errorf("%w: estimate=%d is above the budget's MaxCost %d", core.ErrInvalidCost, e.n, b.MaxCost)
		case e.n > b.smallest && !b.TakeRest:
			return nil, fmt.Errorf("%w: estimate=%d is above the burst %d of the budget of unit %q: no request could ever be admitted (or set Budget.TakeRest)",
				core.ErrInvalidCost, e.n, b.smallest, b.unit)
		}
		if slices.ContainsFunc(out, func(o fixedEstimate) bool { return o.unit == b.unit }) {
			return nil, fmt.Errorf("%w: two estimates of the budget of unit %q", core.ErrInvalidCost, b.unit)
		}
		out = append(out, fixedEstimate{unit: b.unit, n: e.n})
	}
	return out, nil
}
