package redlimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"sort"
	"strings"

	"github.com/redlimit/redlimit/core"
)

// Rules maps route patterns to limit strings, for many routes in one place:
//
//	{"POST /login": "5/m", "GET /api/*": "100/s", "/": "1000/m"}
//
// A pattern is a net/http ServeMux pattern ("[METHOD ][HOST]/path", with
// {name} and {name...} wildcards); a trailing "*" is short for "{rest...}".
// A limit string is what core.ParseLimit reads. Each request is limited by
// the one rule whose pattern matches it most specifically, with ServeMux's
// precedence, against the request's cleaned path; a request no rule
// matches passes without a limit. Each rule is its own policy, named by its
// pattern, so requests are counted per rule and key, never per raw path.
type Rules map[string]string

// ParseRules reads Rules from a JSON object of pattern to limit string.
// The rules are checked by NewRuleSet.
func ParseRules(data []byte) (Rules, error) {
	var rules Rules
	if err := json.Unmarshal(data, &rules); err != nil {
		return nil, fmt.Errorf("redlimit: rules: want a JSON object of pattern to limit string: %w", err)
	}
	return rules, nil
}

// RuleSet is a compiled Rules table. It is safe for concurrent use.
type RuleSet struct {
	mux      *http.ServeMux
	policies []*Policy // in pattern order
}

// NewRuleSet checks every rule and builds its policy with opts (each
// policy's name is its pattern, whatever opts say). Errors name the rule
// that is wrong.
func NewRuleSet(lim *core.Limiter, rules Rules, opts ...Option) (*RuleSet, error) {
	rs := &RuleSet{mux: http.NewServeMux()}
	patterns := make([]string, 0, len(rules))
	for pattern := range rules {
		patterns = append(patterns, pattern)
	}
	sort.Strings(patterns)
	for _, pattern := range patterns {
		p, err := rs.add(lim, pattern, rules[pattern], opts)
		if err != nil {
			return nil, fmt.Errorf("redlimit: rule %q: %w", pattern, err)
		}
		rs.policies = append(rs.policies, p)
	}
	return rs, nil
}

func (rs *RuleSet) add(lim *core.Limiter, pattern, spec string, opts []Option) (p *Policy, err error) {
	limit, err := core.ParseLimit(spec)
	if err != nil {
		return nil, err
	}
	muxPattern := pattern
	if i := strings.IndexByte(pattern, '*'); i >= 0 {
		if i != len(pattern)-1 || !strings.HasSuffix(pattern, "/*") {
			return nil, fmt.Errorf("'*' may only end a pattern, as in \"GET /api/*\"")
		}
		muxPattern = pattern[:i] + "{rest...}"
	}
	p, err = NewPolicy(lim, limit, append(opts[:len(opts):len(opts)], WithName(pattern))...)
	if err != nil {
		return nil, err
	}
	defer func() { // ServeMux reports bad and conflicting patterns by panicking
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("%v", r)
		}
	}()
	rs.mux.Handle(muxPattern, rulePolicy{p})
	return p, nil
}

// rulePolicy marks a ServeMux entry as a rule's policy.
type rulePolicy struct{ *Policy }

// ServeHTTP is never called: ServeMux is only asked which entry matches.
func (rulePolicy) ServeHTTP(http.ResponseWriter, *http.Request) {}

// Match returns the policy of the rule that matches r, or nil.
func (rs *RuleSet) Match(r *http.Request) *Policy {
	h, _ := rs.mux.Handler(r)
	if rp, ok := h.(rulePolicy); ok {
		return rp.Policy
	}
	// ServeMux answers unclean paths ("//login", "/a/../login") with a
	// redirect; match what they clean to, so they cannot dodge a rule.
	if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
		r2 := *r
		u := *r.URL
		u.Path, u.RawPath = clean, ""
		r2.URL = &u
		if h, _ := rs.mux.Handler(&r2); h != nil {
			if rp, ok := h.(rulePolicy); ok {
				return rp.Policy
			}
		}
	}
	return nil
}

// Policies returns the rules' policies, in pattern order.
func (rs *RuleSet) Policies() []*Policy { return rs.policies }

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
