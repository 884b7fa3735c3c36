package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// group is the limits of one rule of the rules file, or of one -policy,
// as the service decides them for the key.
type group struct {
	rule, tier string
	req        core.Request
}

// row is one limit of the service for the key: where its state is kept,
// and what a read of it found.
type row struct {
	Rule      string `json:"rule"`           // as the rules file writes it, or the -policy's name
	Tier      string `json:"tier,omitempty"` // the rule's tier
	Policy    string `json:"policy"`         // the scope its state is kept in: the pattern in one spelling, "*", or the policy's name
	Limit     string `json:"limit"`          // as core.ParseLimit reads it back
	RedisKey  string `json:"redis_key"`      // the Redis key of its state (absent at the full allowance)
	Capacity  int    `json:"capacity"`       // the most that can pass at once (its burst; slots of a concurrency limit)
	Remaining int    `json:"remaining"`      // what may pass now: events, or free slots
	Held      int    `json:"held"`           // slots held (concurrency limits)
	Debt      int    `json:"debt"`           // events charged beyond the capacity: the key is denied until it is paid
	Denies    bool   `json:"denies"`         // a request of cost 1 is denied now
	ResetMS   int64  `json:"reset_after_ms"` // until the full allowance is back
	NextMS    int64  `json:"next_after_ms"`  // until one more may pass (a slot likely frees, for concurrency)
	RetryMS   int64  `json:"retry_after_ms"` // in debt: until it is paid; else 0
	group     *group
}

// report is what show and reset write.
type report struct {
	Key       string `json:"key"`       // as given
	StateKey  string `json:"state_key"` // as the service stores it (hashed when long)
	Prefix    string `json:"prefix"`    // the service's core.WithPrefix
	Tier      string `json:"tier"`      // -tier, or "" for every rule
	Limits    []row  `json:"limits"`    // show: every limit; reset: the limits reset, as they were
	Denying   int    `json:"denying"`   // how many of them deny a request of cost 1
	Reset     bool   `json:"reset"`     // the limits were reset
	RedisSeen string `json:"-"`         // for people: which Redis
}

// groups returns the rules of the rules file and the -policy flags, for
// key, in order.
func (c *command) groups(key string) ([]group, error) {
	if c.rules == "" && len(c.policies) == 0 {
		return nil, errors.New("no rules: give -rules FILE (the rules file the service loads) or -policy")
	}
	var gs []group
	if c.rules != "" {
		rules, err := readRules(c.rules)
		if err != nil {
			return nil, err
		}
		states, err := rules.States(key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.rules, err)
		}
		for _, s := range states {
			gs = append(gs, group{rule: s.Rule, tier: s.Tier, req: s.Request})
		}
	}
	for _, spec := range c.policies {
		name, limits, err := parsePolicy(spec)
		if err != nil {
			return nil, err
		}
		scopes := make([]string, len(limits))
		for i := range scopes {
			scopes[i] = name
		}
		gs = append(gs, group{rule: name, req: core.Request{Key: redlimit.StateKey(key), Limits: limits, Scopes: scopes}})
	}
	return c.ofTier(gs), nil
}

// ofTier returns the groups a request of c.tier is decided by, when it
// is set: the tier's rules, and the default's for patterns the tier has
// none for.
func (c *command) ofTier(gs []group) []group {
	if c.tier == "" {
		return gs
	}
	own := map[string]bool{} // patterns the tier has rules for
	for _, g := range gs {
		if g.tier == c.tier {
			own[g.req.Scopes[0]] = true
		}
	}
	var out []group
	for _, g := range gs {
		if g.tier == c.tier || g.tier == "" && !own[g.req.Scopes[0]] {
			out = append(out, g)
		}
	}
	return out
}

// readRules reads and parses a rules file.
func readRules(file string) (redlimit.Rules, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	rules, err := redlimit.ParseRules(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return rules, nil
}

// parsePolicy reads a -policy: LIMITS, for a policy named by its limits
// as redlimit.NewPolicy names one without WithName, or NAME=LIMITS.
func parsePolicy(spec string) (name string, limits []core.Limit, err error) {
	if limits, err = core.ParseLimits(spec); err == nil {
		parts := make([]string, len(limits))
		for i, l := range limits {
			parts[i] = l.String()
		}
		return strings.Join(parts, ", "), limits, nil
	}
	name, text, ok := strings.Cut(spec, "=")
	if !ok || name == "" {
		return "", nil, fmt.Errorf("-policy %q: want NAME=LIMITS (\"login=5/m, 20/d\") or LIMITS: %w", spec, err)
	}
	if limits, err = core.ParseLimits(text); err != nil {
		return "", nil, fmt.Errorf("-policy %q: %w", spec, err)
	}
	return name, limits, nil
}

// look reads the state of every limit of gs.
func look(ctx context.Context, lim *core.Limiter, gs []group) ([]row, error) {
	var rows []row
	for i := range gs {
		g := &gs[i]
		states, err := lim.Look(ctx, &g.req)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", g.rule, err)
		}
		for j, s := range states {
			rows = append(rows, row{Rule: g.rule, Tier: g.tier, Policy: g.req.Scopes[j], Limit: s.Limit.String(),
				RedisKey: s.Key, Capacity: s.Limit.Capacity(), Remaining: s.Remaining, Held: s.Held, Debt: s.Debt,
				Denies: !s.Allowed || s.Remaining == 0, ResetMS: millis(s.ResetAfter), NextMS: millis(s.NextAfter),
				RetryMS: millis(s.RetryAfter), group: g})
		}
	}
	return rows, nil
}

// millis is d in whole milliseconds, rounded up.
func millis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// show writes the key's state under every limit.
func (c *command) show(ctx context.Context) error {
	key := c.args[0]
	gs, err := c.groups(key)
	if err != nil {
		return err
	}
	rdb, err := c.connect()
	if err != nil {
		return err
	}
	defer rdb.Close()
	rows, err := look(ctx, c.limiter(rdb), gs)
	if err != nil {
		return err
	}
	return c.write(c.newReport(key, rows, false))
}

func (c *command) newReport(key string, rows []row, reset bool) report {
	r := report{Key: key, StateKey: redlimit.StateKey(key), Prefix: c.prefix, Tier: c.tier, Limits: rows, Reset: reset, RedisSeen: c.where()}
	for _, row := range rows {
		if row.Denies {
			r.Denying++
		}
	}
	if r.Limits == nil {
		r.Limits = []row{}
	}
	return r
}

// write writes r as JSON or as a table.
func (c *command) write(r report) error {
	if c.json {
		return c.writeJSON(r)
	}
	return writeTable(c.out, r)
}

// writeJSON writes v as indented JSON.
func (c *command) writeJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeTable writes r for people.
func writeTable(out io.Writer, r report) error {
	key := fmt.Sprintf("%q", r.Key)
	if r.StateKey != r.Key {
		key += fmt.Sprintf(" (stored as %q)", r.StateKey)
	}
	if r.Reset {
		fmt.Fprintf(out, "reset %s in %s (prefix %q); its state was:\n", key, r.RedisSeen, r.Prefix)
	} else {
		fmt.Fprintf(out, "state of %s in %s (prefix %q):\n", key, r.RedisSeen, r.Prefix)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tLIMIT\tLEFT\tFULL IN\tSTATE")
	for _, row := range r.Limits {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\n", row.Rule, row.Limit, row.Remaining, row.Capacity, human(row.ResetMS), row.state())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case r.Reset:
		fmt.Fprintf(out, "%s reset to the full allowance (an instance of the service that denied the key in the last second may deny it for up to a second more)\n", plural(len(r.Limits), "limit"))
	case len(r.Limits) == 0:
		fmt.Fprintf(out, "no rule to show (is -tier right?)\n")
	case r.Denying == 0:
		fmt.Fprintf(out, "no limit denies %s now (a request costing more than LEFT still would)\n", key)
	default:
		noun, verb := "limits", "deny"
		if len(r.Limits) == 1 {
			noun = "limit"
		}
		if r.Denying == 1 {
			verb = "denies"
		}
		fmt.Fprintf(out, "%d of %d %s %s %s now:\n", r.Denying, len(r.Limits), noun, verb, key)
		for _, row := range r.Limits {
			if row.Denies {
				fmt.Fprintf(out, "  %s %s: %s\n", row.Rule, row.Limit, strings.TrimPrefix(row.state(), "DENIES: "))
			}
		}
	}
	return nil
}

// plural writes n things: "1 limit", "3 limits".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// state says in words what a limit does to a request of cost 1 now.
func (r row) state() string {
	switch {
	case r.Debt > 0:
		return fmt.Sprintf("DENIES: in debt by %d, paid in %s", r.Debt, human(r.RetryMS))
	case r.Held > 0 && r.Remaining == 0:
		return fmt.Sprintf("DENIES: %d of %d slots held, one likely free in %s", r.Held, r.Capacity, human(r.NextMS))
	case r.Denies:
		return fmt.Sprintf("DENIES: none left, one more in %s", human(r.NextMS))
	case r.Held > 0:
		return fmt.Sprintf("allows: %d of %d slots held", r.Held, r.Capacity)
	}
	return "allows"
}

// human writes ms for people, rounded up (never sooner than Redis said):
// "-" for none, "250ms", "3.5s", "4m10s", "2h5m", "12d4h".
func human(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	up := func(unit time.Duration) int64 { return int64((d + unit - 1) / unit) }
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return (time.Duration(up(100*time.Millisecond)) * 100 * time.Millisecond).String()
	case d < time.Hour:
		s := up(time.Second)
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case d < 24*time.Hour:
		m := up(time.Minute)
		return fmt.Sprintf("%dh%dm", m/60, m%60)
	}
	h := up(time.Hour)
	return fmt.Sprintf("%dd%dh", h/24, h%24)
}
