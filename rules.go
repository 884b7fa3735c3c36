package redlimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
	rulepattern "github.com/redlimit/redlimit/internal/pattern"
)

// ErrInvalidRules is wrapped by the errors of ParseRules, NewRuleSet and
// RuleSet.Update for a rules table that is not one: a document that is not
// a JSON object of pattern to limit string, a table without rules, a
// pattern given twice, a limit that is empty or not a string, and a
// pattern no request can match (see Rules). None of these is ever taken to
// mean "no limit".
var ErrInvalidRules = errors.New("redlimit: invalid rules")

// Rules maps route patterns to limit strings, for many routes in one place:
//
//	{"*": "100/s, 10000/d", "POST /login": "5/m, 20/d", "GET /api/*": "50/s"}
//
// A pattern is a net/http ServeMux pattern ("[METHOD ][HOST]/path", with
// {name} and {name...} wildcards); a trailing "*" is short for "{rest...}".
// A pattern no request can match is an error, never a rule that silently
// limits nothing: a method in lower case ("get /search") or not one of
// RFC 9110's or WebDAV's, another router's syntax (gin's and echo's ":id"
// and "*name", chi's "{id:[0-9]+}"), and a path no router produces (no
// leading '/', "//", "." or ".." segments, a query), white space around
// the pattern. A host must look like one ("api.example.com/",
// "localhost/") and has no port: it matches a request's host as browsers
// and DNS tell hosts apart, in any case, with or without a trailing dot,
// on any port, so "api.example.com/login" limits requests to
// API.EXAMPLE.COM, api.example.com. and api.example.com:8443 alike.
// A limit string is what core.ParseLimits reads: one limit, or several
// decided together ("5/m, 20/d"), and, among them or alone, the rule's
// settings:
//
//	"GET /search":    "cost=5"                  // 5 of the catch-all's limits per request
//	"POST /upload":   "10/m, 100/d, cost=2"     // 2 of each of its limits and the catch-all's
//	"POST /v1/chat":  "60/m, estimate=2000"     // reserves 2000 of WithBudget's budget
//	"POST /v1/embed": "estimate=50 unit=tokens" // of the budget of unit "tokens"
//
// cost=N is what a request under the rule counts under each request limit
// it is decided by, the catch-all's included, in place of WithCost's n:
// from 1 to the smallest burst of those limits. estimate=N is what it
// reserves of a budget (WithBudget), in place of the budget's Estimate
// function: from 0 to the budget's smallest burst (any, with TakeRest)
// and its MaxCost; "unit=NAME" names the budget when there are several.
// A rule of settings only is decided by the catch-all's limits alone,
// under its own name; the table must have a catch-all. The catch-all's
// own settings are those of the requests it decides alone. A cost or
// estimate no request could pay is an error when the rules are loaded
// (ParseRules for the rule's own limits; NewRuleSet and Update for the
// catch-all's and the budgets), wrapping core.ErrInvalidCost.
//
// Each request is limited by the one rule
// whose pattern matches it most specifically, with ServeMux's precedence,
// against the request's cleaned path. Each rule is its own policy, named
// by its pattern, so requests are counted per rule and key, never per raw
// path; the name is the pattern in one spelling (its host in lower case
// without a trailing dot, one space after the method), so two spellings
// of a pattern are one rule, with one state (a table holding both is an
// error).
//
// The pattern "*" is the catch-all: its limits apply to every request, in
// the same decision as the matching rule's, all or nothing, so a request
// one rule denies is charged to no limit, the catch-all's included. A
// request no other rule matches is decided under the catch-all alone;
// without a catch-all, it passes without a limit.
//
// A table has at least one rule: an empty one is an error (ErrInvalidRules),
// never a table that limits nothing.
type Rules map[string]string

// ParseRules reads Rules from a JSON object of pattern to limit string.
//
// Anything else is an error wrapping ErrInvalidRules that says what was
// wrong: a document that is not an object (null, an array, a string, a
// number, nothing at all) or has data after it, an object without rules, a
// pattern given twice (named in the error; neither value wins), a limit that
// is not a string, and an empty limit string (that error also wraps
// core.ErrInvalidLimit). Each rule's pattern, limits and settings are
// checked too (a limit that does not parse wraps core.ErrInvalidLimit, a
// cost above the burst of the rule's own limits core.ErrInvalidCost); what
// depends on the whole table (the catch-all's limits, tiers, budgets) is
// checked by NewRuleSet.
func ParseRules(data []byte) (Rules, error) {
	// Walk the object token by token, to see every key in order: decoding
	// into a map would keep the last of two equal patterns.
	dec := json.NewDecoder(bytes.NewReader(data))
	const want = "want a JSON object of pattern to limit string"
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: %s, got an empty document", ErrInvalidRules, want)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRules, want, err)
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("%w: %s, got %s", ErrInvalidRules, want, describeToken(tok))
	}
	rules := Rules{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRules, want, err)
		}
		pattern, ok := tok.(string)
		if !ok { // not reached: the decoder reports such a key as a syntax error
			return nil, fmt.Errorf("%w: %s, got the key %s", ErrInvalidRules, want, describeToken(tok))
		}
		if _, dup := rules[pattern]; dup {
			return nil, fmt.Errorf("%w: pattern %q is given twice", ErrInvalidRules, pattern)
		}
		if _, _, err := checkKey(pattern); err != nil {
			return nil, err
		}
		spec, err := readRuleValue(dec, pattern)
		if err != nil {
			return nil, err
		}
		rules[pattern] = spec
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidRules, want, err)
	}
	if len(rules) == 0 {
		return nil, errNoRules
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("found %s", describeToken(tok))
		}
		return nil, fmt.Errorf("%w: data after the rules object: %w", ErrInvalidRules, err)
	}
	return rules, nil
}

// readRuleValue reads the value of the rule of pattern, a limit string,
// and checks its limits and settings (the table's are NewRuleSet's to
// check).
func readRuleValue(dec *json.Decoder, pattern string) (string, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return "", fmt.Errorf("%w: want a JSON object of pattern to limit string: %w", ErrInvalidRules, err)
	}
	var spec string
	if raw[0] != '"' || json.Unmarshal(raw, &spec) != nil {
		return "", fmt.Errorf("%w: rule %q: the limit must be a string, not %s", ErrInvalidRules, pattern, abbreviate(raw))
	}
	if strings.TrimSpace(spec) == "" {
		_, err := core.ParseLimit(spec) // says what a limit looks like
		return "", fmt.Errorf("%w: rule %q: %w", ErrInvalidRules, pattern, err)
	}
	if _, err := parseRuleSpec(spec); err != nil {
		return "", fmt.Errorf("%w: rule %q: %w", ErrInvalidRules, pattern, err)
	}
	return spec, nil
}

// errNoRules is the error for a table without rules, parsed or built.
var errNoRules = fmt.Errorf("%w: the table has no rules; every request would pass without a limit", ErrInvalidRules)

// describeToken names the JSON value a token starts.
func describeToken(tok json.Token) string {
	switch tok := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64, json.Number:
		return "a number"
	case string:
		return "a string"
	case json.Delim:
		switch tok {
		case '[':
			return "an array"
		case '{':
			return "an object"
		}
		return fmt.Sprintf("%q", string(tok))
	}
	return fmt.Sprintf("%v", tok)
}

// abbreviate shows a JSON value in an error message, cut short if long.
func abbreviate(raw []byte) string {
	const maxLen = 40
	if len(raw) > maxLen {
		return string(raw[:maxLen]) + "..."
	}
	return string(raw)
}

// RuleSet is a compiled Rules table, a Policy that limits each request by
// the rule that matches it. Build it with NewRuleSet (the zero RuleSet is
// not usable); Update replaces its rules while it serves. It is safe for
// concurrent use.
type RuleSet struct {
	tier    func(q Request) (string, error) // WithTier's, or nil
	log     *slog.Logger
	tierLog throttle // tiers not found
	lim     *core.Limiter
	conf    options                   // the options of every rule, checked by NewRuleSet
	local   *core.Local               // FailLocal's, one for the set, whatever its updates
	table   atomic.Pointer[ruleTable] // what requests are matched against; never nil once built
}

// ruleTable is the compiled rules of a RuleSet: built whole, only read
// afterwards, and replaced whole by Update.
type ruleTable struct {
	tiers    map[string]*ruleTable // the tiers with rules of their own (the default's table only)
	mux      *http.ServeMux
	catchAll *policy // the "*" rule, or nil
	hosts    bool    // some pattern has a host
}

// catchAll is the pattern of the rule whose limits apply to every request.
const catchAll = rulepattern.CatchAll

// NewRuleSet checks every rule and builds its policy with opts (each
// policy's name is its pattern, whatever opts say; WithAlso and
// WithRequestLimits are not for rules; a rule's cost=N replaces WithCost's
// n for its requests). Errors name the rule that is wrong; a bad limit
// wraps core.ErrInvalidLimit, a cost or estimate no request could pay
// core.ErrInvalidCost, a pattern no request can match ErrInvalidRules. A table without rules (nil or empty) is an error
// wrapping ErrInvalidRules, as it is for ParseRules. A nil or zero
// Limiter is refused, as NewPolicy refuses it.
func NewRuleSet(lim *core.Limiter, rules Rules, opts ...Option) (*RuleSet, error) {
	c := newOptions(opts)
	if c.Limits != nil || len(c.Rest.also) > 0 {
		return nil, errors.New("redlimit: WithAlso and WithRequestLimits are not for rules: write the limits in the rule")
	}
	if c.Rest.alsoKeys != nil {
		return nil, errors.New("redlimit: WithAlsoKey is not for rules: decide the keys with a policy of their own (NewPolicy) in front of the rules")
	}
	if c.Rest.pickSet != nil || c.Rest.limitSets != nil {
		return nil, errors.New("redlimit: WithLimitSets is not for rules: a rules table's tiers are its limit sets (\"* tier=pro\", WithTier)")
	}
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("redlimit: NewRuleSet: %w", err)
	}
	rs := &RuleSet{lim: lim, conf: c, tier: c.Rest.tier, log: lim.Logger()}
	if rs.log == nil {
		rs.log = slog.Default()
	}
	if c.Rest.fallsBack() {
		rs.local = lim.Local(localKeys) // one FailLocal state for the set, as its Redis state is one
	}
	t, err := rs.build(rules)
	if err != nil {
		return nil, err
	}
	rs.table.Store(t)
	return rs, nil
}

// Update replaces the rules of a RuleSet in place, atomically for requests
// in flight: a request is decided wholly under the old rules or wholly
// under the new ones, and one already decided finishes under the rule that
// admitted it (its Concurrency slot is freed where it was taken). The new
// rules, their costs and estimates included, are checked as NewRuleSet
// checks them, with the options given to it; invalid rules are an error
// naming the rule, and the old ones stay.
//
// State survives for every pattern whose limits keep their algorithm and
// period: a rule's state is kept under its pattern, its algorithm and its
// period, never its rate or burst, so "POST /login": "5/m" updated to
// "10/m" keeps the count of the minute, as does the catch-all "*"; a
// changed period or algorithm starts afresh, and a rule's old state expires
// on its own. FailLocal's in-process state is the set's, kept across
// updates. Update does no I/O and is safe for concurrent use with requests
// and with other Updates (the last to finish wins).
func (s *RuleSet) Update(rules Rules) error {
	if s == nil || s.table.Load() == nil {
		return errors.New("redlimit: Update of a RuleSet not made by NewRuleSet")
	}
	t, err := s.build(rules)
	if err != nil {
		return err
	}
	s.table.Store(t)
	return nil
}

// build checks rules and compiles them with the set's options: the table
// of the rules of every tier, and in its tiers the table of each tier that
// has rules of its own, its rules in place of the same patterns' and the
// others as they are.
func (s *RuleSet) build(rules Rules) (*ruleTable, error) {
	if len(rules) == 0 {
		return nil, errNoRules
	}
	byTier := map[string]map[string]string{"": {}}
	for key, spec := range rules {
		pattern, tier, err := checkKey(key)
		if err != nil {
			return nil, err
		}
		if byTier[tier] == nil {
			byTier[tier] = map[string]string{}
		}
		if _, dup := byTier[tier][pattern]; dup { // not reached: a map has no two equal keys
			return nil, fmt.Errorf("%w: rule %q is given twice", ErrInvalidRules, key)
		}
		byTier[tier][pattern] = spec
	}
	tiers := make([]string, 0, len(byTier))
	for tier := range byTier {
		if tier != "" {
			tiers = append(tiers, tier)
		}
	}
	sort.Strings(tiers)
	switch {
	case len(tiers) > 0 && s.tier == nil:
		return nil, fmt.Errorf("%w: rules for tier %q, and no redlimit.WithTier to tell a request's tier", ErrInvalidRules, tiers[0])
	case len(tiers) > 0 && len(byTier[""]) == 0:
		return nil, fmt.Errorf("%w: rules for tiers and none for the default (a rule without \"tier=\"): a request of no tier would pass without a limit", ErrInvalidRules)
	}
	t, err := s.compile(byTier[""], nil, "")
	if err != nil {
		return nil, err
	}
	for _, tier := range tiers {
		merged := make(map[string]string, len(byTier[""])+len(byTier[tier]))
		for pattern, spec := range byTier[""] {
			merged[pattern] = spec
		}
		for pattern, spec := range byTier[tier] {
			merged[pattern] = spec
		}
		tt, err := s.compile(merged, byTier[tier], tier)
		if err != nil {
			return nil, err
		}
		if t.tiers == nil {
			t.tiers = make(map[string]*ruleTable, len(tiers))
		}
		t.tiers[tier] = tt
	}
	return t, nil
}

// compile builds the table of one tier's rules (pattern to limits), with
// the set's options; own are the rules written for the tier, named by the
// errors with it.
func (s *RuleSet) compile(rules, own map[string]string, tier string) (*ruleTable, error) {
	t := &ruleTable{mux: http.NewServeMux()}
	patterns := make([]string, 0, len(rules))
	for pattern := range rules {
		if pattern != catchAll {
			patterns = append(patterns, pattern)
		}
	}
	sort.Strings(patterns) // errors in the same order every time
	if _, ok := rules[catchAll]; ok {
		patterns = append([]string{catchAll}, patterns...) // first: the others are decided with it
	}
	for _, pattern := range patterns {
		p, err := t.add(s.lim, pattern, rules[pattern], s.conf)
		if err != nil {
			key := pattern
			if _, ok := own[pattern]; ok {
				key += " tier=" + tier
			}
			if errors.Is(err, ErrInvalidRules) {
				if key != pattern {
					err = fmt.Errorf("tier %q: %w", tier, err)
				}
				return nil, err
			}
			return nil, fmt.Errorf("redlimit: rule %q: %w", key, err)
		}
		if p.local != nil {
			p.local = s.local
		}
	}
	return t, nil
}

// checkKey checks a rules table's key, "PATTERN" or "PATTERN tier=NAME",
// and returns its pattern and tier ("" for a rule of every tier).
func checkKey(key string) (pattern, tier string, err error) {
	pattern, tier, err = rulepattern.SplitTier(key)
	if err == nil && pattern != catchAll {
		_, err = rulepattern.Parse(pattern)
	}
	if err != nil {
		return "", "", fmt.Errorf("%w: rule %q: %w", ErrInvalidRules, key, err)
	}
	return pattern, tier, nil
}

// ruleBudgets takes out of a rule's limits those of a budget's unit
// ("40000/m unit=tokens"), which are the rule's limits of that budget in
// place of WithBudget's, and returns the rule's request limits and its
// budgets.
func ruleBudgets(limits []core.Limit, budgets []RequestBudget) ([]core.Limit, []RequestBudget, error) {
	var requests []core.Limit
	var replaced []int
	for _, l := range limits {
		if l.Unit == "" {
			requests = append(requests, l)
			continue
		}
		i := slices.IndexFunc(budgets, func(b RequestBudget) bool { return len(b.Limits) > 0 && b.Limits[0].Unit == l.Unit })
		if i < 0 {
			return nil, nil, fmt.Errorf("%w: %v counts %q, and no redlimit.WithBudget of that unit estimates and settles a request's", core.ErrInvalidLimit, l, l.Unit)
		}
		if !slices.Contains(replaced, i) {
			if replaced == nil {
				budgets = slices.Clone(budgets)
			}
			budgets[i].Limits, replaced = nil, append(replaced, i)
		}
		budgets[i].Limits = append(budgets[i].Limits, l)
	}
	if replaced != nil && len(requests) == 0 {
		return nil, nil, fmt.Errorf("%w: a rule with a budget's limits needs a limit of requests too (\"60/m, 40000/m unit=tokens\")", core.ErrInvalidLimit)
	}
	return requests, budgets, nil
}

// add builds the policy of one rule and enters it in the table.
func (t *ruleTable) add(lim *core.Limiter, pattern, spec string, c options) (p *policy, err error) {
	var pat rulepattern.Pattern
	if pattern != catchAll {
		if pat, err = rulepattern.Parse(pattern); err != nil {
			return nil, fmt.Errorf("%w: rule %q: %w", ErrInvalidRules, pattern, err)
		}
	}
	rs, err := parseRuleSpec(spec)
	if err != nil {
		return nil, err
	}
	limits, settingsOnly, err := t.ruleLimits(pattern, spec, rs, &c)
	if err != nil {
		return nil, err
	}
	c.Rest.name = pattern
	if pattern != catchAll {
		c.Rest.name = pat.Name // one state for every spelling of the pattern
		t.hosts = t.hosts || pat.Host != ""
	}
	if p, err = newPolicy(&c, lim, limits); err != nil {
		return nil, err
	}
	if pattern == catchAll {
		t.catchAll = p
		p.estimates, err = checkEstimates(rs.estimates, p.budgets)
		return p, err
	}
	if err := t.inherit(p, settingsOnly); err != nil {
		return nil, err
	}
	if p.estimates, err = checkEstimates(rs.estimates, p.budgets); err != nil {
		return nil, err
	}
	defer func() { // ServeMux reports bad and conflicting patterns by panicking
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("%w: rule %q: %v", ErrInvalidRules, pattern, r)
		}
	}()
	t.mux.Handle(pat.Mux, rulePolicy{p})
	return p, nil
}

// ruleLimits returns the request limits a rule's policy is built with,
// from its value rs (spec as written), and sets c's budgets and cost to
// the rule's. A rule of settings only ("cost=5") is decided by the
// catch-all's limits alone (settingsOnly), which it is checked against.
// A rule's cost is checked against the catch-all's limits too.
func (t *ruleTable) ruleLimits(pattern, spec string, rs ruleSpec, c *options) (limits []core.Limit, settingsOnly bool, err error) {
	limits = rs.limits
	if t.catchAll != nil && slices.ContainsFunc(limits, func(l core.Limit) bool { return l.Unit != "" }) {
		return nil, false, errors.New("in a table with a catch-all, a budget's limits are the catch-all's, for every route: write them in the catch-all")
	}
	if limits, c.Budgets, err = ruleBudgets(limits, c.Budgets); err != nil {
		return nil, false, err
	}
	if rs.cost > 0 {
		c.Rest.cost = rs.cost
	}
	if pattern == catchAll {
		if len(limits) == 0 {
			return nil, false, fmt.Errorf("%w: %q has no limits of its own: the catch-all's are every request's", core.ErrInvalidLimit, spec)
		}
		return limits, false, nil
	}
	if len(limits) == 0 {
		if limits = t.catchAllLimits(); limits == nil {
			return nil, false, fmt.Errorf("%w: %q has no limits of its own: such a rule is decided by the catch-all's, and the table has no \"*\" rule", core.ErrInvalidLimit, spec)
		}
		settingsOnly = true
	}
	return limits, settingsOnly, rs.checkCost(t.catchAllLimits(), "the catch-all's limits")
}

// inherit makes p, a rule's policy, decide its requests together with
// the table's catch-all, if it has one, under the catch-all's budgets: its
// quotas the catch-all's, then its own (none for a rule of settings only),
// then the budgets'.
func (t *ruleTable) inherit(p *policy, settingsOnly bool) error {
	all := t.catchAll
	if all == nil {
		return nil
	}
	own := p.quotas[:len(p.quotas)-p.spent]
	if settingsOnly {
		own = nil
	}
	if len(all.quotas)+len(own) > core.MaxLimits {
		return fmt.Errorf("%d limits with the catch-all's; at most %d", len(all.quotas)+len(own), core.MaxLimits)
	}
	inherits := len(all.quotas) - all.spent
	quotas := append(all.quotas[:inherits:inherits], own...)
	p.quotas = append(quotas, all.quotas[inherits:]...)
	p.inherits, p.budgets, p.spent = inherits, all.budgets, all.spent
	return nil
}

// catchAllLimits returns the request limits of the table's catch-all, nil
// when it has none.
func (t *ruleTable) catchAllLimits() []core.Limit {
	all := t.catchAll
	if all == nil {
		return nil
	}
	limits := make([]core.Limit, 0, len(all.quotas)-all.spent)
	for _, q := range all.quotas[:len(all.quotas)-all.spent] {
		limits = append(limits, q.limit)
	}
	return limits
}

// rulePolicy marks a ServeMux entry as a rule's policy.
type rulePolicy struct{ *policy }

// ServeHTTP is never called: ServeMux is only asked which entry matches.
func (rulePolicy) ServeHTTP(http.ResponseWriter, *http.Request) {}

// policyFor returns the policy of the rule that matches q, the catch-all
// if none does, or nil. It panics on a RuleSet not made by NewRuleSet,
// which would otherwise let every request pass unlimited.
func (s *RuleSet) policyFor(q Request) *policy {
	t := s.table.Load()
	if t == nil {
		panic("redlimit: a RuleSet not made by NewRuleSet")
	}
	if t.tiers != nil {
		t = s.tierTable(t, &q)
	}
	r := q.HTTP
	if r == nil {
		// Rules are ServeMux patterns, matched by ServeMux, which reads
		// an *http.Request's method, host and path: only those are set.
		r = &http.Request{Method: q.Method, Host: q.Host, URL: &url.URL{Path: q.Path}}
	}
	if p := t.match(r); p != nil {
		return p
	}
	return t.catchAll
}

// tierTable returns the table of q's tier: its own if it has rules of its
// own, else t, the default's. A tier function's error is logged at warn
// level, at most once a second, and q decided under the default's rules.
func (s *RuleSet) tierTable(t *ruleTable, q *Request) *ruleTable {
	tier, err := s.tier(*q)
	if err != nil {
		if skipped, ok := s.tierLog.allow(time.Now()); ok {
			s.log.WarnContext(q.Context, "redlimit: the request's tier could not be told; decided under the default tier's rules",
				"error", err, "requests_not_logged", skipped)
		}
		return t
	}
	if tt, ok := t.tiers[tier]; ok {
		return tt
	}
	return t
}

func (t *ruleTable) match(r *http.Request) *policy {
	// ServeMux matches hosts as written, but without the port: match the
	// host as browsers and DNS tell hosts apart (any case, with or without
	// the trailing dot), so that no spelling of a host dodges its rule.
	if t.hosts {
		if host := rulepattern.Host(r.Host); !muxSees(r.Host, host) {
			r2 := *r
			r2.Host = host
			r = &r2
		}
	}
	h, _ := t.mux.Handler(r)
	if rp, ok := h.(rulePolicy); ok {
		return rp.policy
	}
	// ServeMux answers unclean paths ("//login", "/a/../login") with a
	// redirect; match what they clean to, so they cannot dodge a rule.
	if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
		r2 := *r
		u := *r.URL
		u.Path, u.RawPath = clean, ""
		r2.URL = &u
		if h, _ := t.mux.Handler(&r2); h != nil {
			if rp, ok := h.(rulePolicy); ok {
				return rp.policy
			}
		}
	}
	return nil
}

// muxSees reports whether ServeMux, which drops a port, reads the Host
// header h as host.
func muxSees(h, host string) bool {
	return h == host || len(h) > len(host) && h[:len(host)] == host && h[len(host)] == ':' && !strings.HasPrefix(host, "[")
}

// cleanPath is path.Clean that keeps a trailing slash, as ServeMux does.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean("/" + strings.TrimPrefix(p, "/"))
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}
