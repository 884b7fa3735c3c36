package redlimit

import (
	"fmt"
	"sort"

	"github.com/redlimit/redlimit/core"
	rulepattern "github.com/redlimit/redlimit/internal/pattern"
)

// Where the HTTP layer keeps state, for tools that read or reset it
// (cmd/redlimit, an admin endpoint of your own): a policy decides a
// request's key, as StateKey writes it, under each of its limits in its
// scope, the policy's name (WithName, by default its limits, or a rules
// table's pattern). core.Limiter.Look reads such state and
// core.Limiter.ResetRequest forgets it.

// StateKey returns the key a policy keeps a request's state under, given
// the key its key function found: the key itself, or for a key longer
// than 128 bytes "sha256:" and its SHA-256 in hex, so that a client
// cannot make Redis store long keys. Decision.Key shows the same.
func StateKey(key string) string { return hashLong(key) }

// RuleState is where a RuleSet keeps the state of one rule of a rules
// table for one key (Rules.States).
type RuleState struct {
	// Rule is the rule as the table writes it: "POST /login",
	// "GET /api/* tier=pro", "*".
	Rule string
	// Tier is the rule's tier; "" for a rule of every tier.
	Tier string
	// Request holds the key as requests carry it (StateKey), the rule's
	// limits, and each limit's scope: the rule's pattern in one spelling
	// ("POST /login", its host in lower case), "*" for the catch-all. A
	// tier's rule keeps its state in its pattern's scope, so it shares
	// the state of the pattern's other tiers where the limits' algorithm,
	// period and unit are the same.
	Request core.Request
}

// States returns where a RuleSet built from r keeps the state of
// requests whose key function found key: one RuleState per rule, in the
// order of the rules as written ("*" sorts first, "* tier=pro" next, and
// each pattern's rule of every tier before its tiers'). A rule of a table with a catch-all is
// decided together with the catch-all's limits, whose state is the
// catch-all's RuleState; the limits of a budget given by WithBudget, not
// written in the table, are not listed, nor is a rule of settings only
// ("cost=5"), which keeps no state of its own. It does no I/O. An error names
// the rule whose pattern or limits are invalid (ErrInvalidRules,
// core.ErrInvalidLimit); NewRuleSet checks more, across rules.
func (r Rules) States(key string) ([]RuleState, error) {
	key = StateKey(key)
	states := make([]RuleState, 0, len(r))
	for rule, spec := range r {
		pattern, tier, err := checkKey(rule)
		if err != nil {
			return nil, err
		}
		rs, err := parseRuleSpec(spec)
		if err != nil {
			return nil, fmt.Errorf("redlimit: rule %q: %w", rule, err)
		}
		limits := rs.limits
		if len(limits) == 0 { // settings only ("cost=5"): decided under the catch-all's limits, in its state
			continue
		}
		scope := pattern
		if pattern != catchAll {
			pat, _ := rulepattern.Parse(pattern) // checked by checkKey
			scope = pat.Name                     // as RuleSet names the rule's policy
		}
		scopes := make([]string, len(limits))
		for i := range scopes {
			scopes[i] = scope
		}
		states = append(states, RuleState{Rule: rule, Tier: tier,
			Request: core.Request{Key: key, Limits: limits, Scopes: scopes}})
	}
	sort.Slice(states, func(i, j int) bool { return states[i].Rule < states[j].Rule }) // "*" sorts first
	return states, nil
}
