package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// reset forgets the key's state under every rule, or under the rule the
// second argument names, and writes what it was.
func (c *command) reset(ctx context.Context) error {
	key := c.args[0]
	gs, err := c.groups(key)
	if err != nil {
		return err
	}
	if len(c.args) > 1 {
		if gs, err = only(gs, c.args[1]); err != nil {
			return err
		}
	}
	rdb, err := c.connect()
	if err != nil {
		return err
	}
	defer rdb.Close()
	lim := c.limiter(rdb)
	rows, err := look(ctx, lim, gs)
	if err != nil {
		return err
	}
	for i := range gs {
		if err := lim.ResetRequest(ctx, &gs[i].req); err != nil {
			return fmt.Errorf("rule %q: %w", gs[i].rule, err)
		}
	}
	return c.write(c.newReport(key, rows, true))
}

// only returns the groups of the rule named rule: as the rules file
// writes it, by its pattern (every tier's rule of it) or a -policy's name.
func only(gs []group, rule string) ([]group, error) {
	var out []group
	var names []string
	for _, g := range gs {
		if g.rule == rule || g.req.Scopes[0] == rule {
			out = append(out, g)
		}
		names = append(names, fmt.Sprintf("%q", g.rule))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no rule %q; the rules are %s", rule, strings.Join(names, ", "))
	}
	return out, nil
}

// check checks a rules file as the service loads it: redlimit.ParseRules
// and redlimit.NewRuleSet, with a tier function when it names tiers and a
// budget for each unit other than requests it names (the service must
// give them: redlimit.WithTier, redlimit.WithBudget).
func (c *command) check() error {
	file := c.args[0]
	rules, err := readRules(file) // its errors name the file
	if err == nil {
		if err = buildRules(rules); err != nil {
			err = fmt.Errorf("%s: %w", file, err)
		}
	}
	if err != nil {
		if c.json {
			return c.writeCheck(checkReport{File: file, Error: err.Error()}, err)
		}
		return err
	}
	states, err := rules.States("key")
	if err != nil { // not reached: NewRuleSet checked the rules
		return err
	}
	r := checkReport{File: file, Valid: true}
	for _, s := range states {
		var limits []string
		for _, l := range s.Request.Limits {
			limits = append(limits, l.String())
		}
		r.Rules = append(r.Rules, checkedRule{Rule: s.Rule, Tier: s.Tier, Policy: s.Request.Scopes[0], Limits: limits})
	}
	return c.writeCheck(r, nil)
}

// buildRules builds a RuleSet of rules, on a Limiter that makes no call,
// with what the rules need of the service's options: a tier function, and
// a budget for each unit the rules' limits or estimates name. A budget
// only an estimate names ("estimate=500 unit=tokens") has its limits in
// the service's code: here it is a stand-in that takes any estimate.
func buildRules(rules redlimit.Rules) error {
	rdb := redis.NewClient(&redis.Options{Addr: "check.invalid:0"}) // never dialled: NewRuleSet does no I/O
	defer rdb.Close()
	opts := []redlimit.Option{redlimit.WithTier(func(redlimit.Request) (string, error) { return "", nil })}
	units := map[string]bool{}
	budget := func(l core.Limit) {
		if !units[l.Unit] {
			units[l.Unit] = true
			opts = append(opts, redlimit.WithBudget(redlimit.Budget{Limits: []core.Limit{l}}))
		}
	}
	states, _ := rules.States("key") // a rule it cannot read: NewRuleSet says which
	for _, s := range states {
		for _, l := range s.Request.Limits {
			if l.Unit != "" {
				budget(l)
			}
		}
	}
	named, alone := estimateUnits(rules)
	if alone && len(units) == 0 && len(named) == 0 {
		named = []string{"tokens"} // estimate=N alone: the rule's only budget, whatever its unit
	}
	for _, unit := range named {
		budget(core.Limit{Algorithm: core.FixedWindow, Rate: core.MaxCount, Period: time.Hour, Unit: unit})
	}
	_, err := redlimit.NewRuleSet(core.New(rdb), rules, opts...)
	return err
}

// estimateUnits returns the units the rules' estimates name
// ("estimate=500 unit=tokens"), and whether an estimate names none
// ("estimate=500": the rule's only budget).
func estimateUnits(rules redlimit.Rules) (units []string, alone bool) {
	for _, spec := range rules {
		for _, item := range strings.Split(spec, ",") {
			fields := strings.Fields(item)
			if len(fields) == 0 || !strings.HasPrefix(fields[0], "estimate=") {
				continue
			}
			alone = alone || len(fields) == 1
			for _, f := range fields[1:] {
				if unit, ok := strings.CutPrefix(f, "unit="); ok && !slices.Contains(units, unit) {
					units = append(units, unit)
				}
			}
		}
	}
	return units, alone
}

// checkReport is what check writes.
type checkReport struct {
	File  string        `json:"file"`
	Valid bool          `json:"valid"`
	Error string        `json:"error,omitempty"`
	Rules []checkedRule `json:"rules,omitempty"`
}

// checkedRule is one rule as the service reads it.
type checkedRule struct {
	Rule   string   `json:"rule"`
	Tier   string   `json:"tier,omitempty"`
	Policy string   `json:"policy"` // the scope its state is kept in
	Limits []string `json:"limits"` // as core.ParseLimit reads them back
}

// writeCheck writes r and returns err (the file's error, or nil).
func (c *command) writeCheck(r checkReport, err error) error {
	if c.json {
		if werr := c.writeJSON(r); werr != nil {
			return werr
		}
		return err
	}
	fmt.Fprintf(c.out, "%s: valid, %d rules, as the service reads them:\n", r.File, len(r.Rules))
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tLIMITS\tSTATE KEPT UNDER")
	for _, rule := range r.Rules {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", rule.Rule, strings.Join(rule.Limits, ", "), rule.Policy)
	}
	return tw.Flush()
}
