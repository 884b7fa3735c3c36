package redlimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// tierApp is rulesApp with the tier of each request in its X-Plan
// header, and a function that sends one request of a plan (the key is
// the peer, one for every request).
func tierApp(t *testing.T, rules redlimit.Rules, opts ...redlimit.Option) (*redlimit.RuleSet, func(plan, method, path string) int) {
	t.Helper()
	var mu sync.Mutex
	var plan string
	tier := redlimit.WithTier(func(q redlimit.Request) (string, error) {
		if v := q.Values("X-Plan"); len(v) > 0 {
			if v[0] == "broken" {
				return "", errors.New("plans store down")
			}
			return v[0], nil
		}
		mu.Lock()
		defer mu.Unlock()
		return plan, nil
	})
	rs, send := rulesApp(t, rules, append([]redlimit.Option{tier}, opts...)...)
	return rs, func(p, method, path string) int {
		mu.Lock()
		plan = p
		mu.Unlock()
		return send(method, path).Code
	}
}

// sendN sends n requests and writes their statuses as "200 200 429".
func sendN(send func(plan, method, path string) int, n int, plan, method, path string) string {
	var codes []string
	for range n {
		codes = append(codes, fmt.Sprint(send(plan, method, path)))
	}
	return strings.Join(codes, " ")
}

// TestTiers: a request is decided by its tier's rules, the default's for
// the patterns its tier does not name and for a tier without rules, ""
// or an error; a key that moves to another tier keeps its count where the
// algorithm and period stay; Update replaces every tier at once and keeps
// their state.
func TestTiers(t *testing.T) {
	t.Parallel()
	rules := redlimit.Rules{
		"*":                    "2/m fixed_window",
		"* tier=pro":           "4/m fixed_window",
		"POST /batch":          "1/h fixed_window",
		"POST /batch tier=pro": "3/h fixed_window",
	}
	rs, send := tierApp(t, rules)
	for _, step := range []struct {
		plan, method, path string
		n                  int
		want               string
	}{
		{"pro", "POST", "/batch", 4, "200 200 200 429"}, // its rule, with its catch-all (4/m: 3 used)
		{"", "POST", "/batch", 1, "429"},                // the default's: 1/h, 3 used
		{"free", "GET", "/a", 1, "429"},                 // no rules of its own: the default's 2/m, 3 used
		{"pro", "GET", "/a", 2, "200 429"},              // back up: the minute's 3 stand, 4 in all
	} {
		if got := sendN(send, step.n, step.plan, step.method, step.path); got != step.want {
			t.Fatalf("%q %s %s: %s, want %s", step.plan, step.method, step.path, got, step.want)
		}
	}
	// Same algorithms and periods: the counts stand under the new rates.
	rules["* tier=pro"] = "6/m fixed_window"
	if err := rs.Update(rules); err != nil {
		t.Fatal(err)
	}
	if got, want := sendN(send, 3, "pro", "GET", "/a"), "200 200 429"; got != want {
		t.Errorf("after Update: %s, want %s", got, want)
	}
	if got, want := sendN(send, 1, "broken", "GET", "/b"), "429"; got != want { // the default's 2/m, long used
		t.Errorf("a tier function's error: %s, want %s (the default's rules)", got, want)
	}
}

// TestTiersBudget: a tier's catch-all writes the budget's limits of the
// tier ("unit=tokens"), in place of WithBudget's.
func TestTiersBudget(t *testing.T) {
	t.Parallel()
	tokens, err := core.ParseLimits("1000/m fixed_window unit=tokens")
	if err != nil {
		t.Fatal(err)
	}
	budget := redlimit.WithBudget(redlimit.Budget{Limits: tokens, Estimate: func(*http.Request) int { return 400 }})
	_, send := tierApp(t, redlimit.Rules{
		"*":          "100/m",
		"* tier=pro": "100/m, 2000/m fixed_window unit=tokens",
	}, budget)
	if got, want := sendN(send, 3, "", "GET", "/"), "200 200 429"; got != want {
		t.Errorf("default: %s, want %s", got, want)
	}
	if got, want := sendN(send, 3, "pro", "GET", "/"), "200 200 200"; got != want { // 800 used of 2000
		t.Errorf("pro: %s, want %s", got, want)
	}
}

// TestTiersRefused: tier rules are checked as rules are, and a table
// that would leave a request without a limit is refused.
func TestTiersRefused(t *testing.T) {
	t.Parallel()
	tier := redlimit.WithTier(func(redlimit.Request) (string, error) { return "", nil })
	lim, _ := embedded(t)
	tokens, _ := core.ParseLimits("1000/m unit=tokens")
	budget := redlimit.WithBudget(redlimit.Budget{Limits: tokens})
	for _, tt := range []struct {
		rules redlimit.Rules
		opts  []redlimit.Option
		says  string
	}{
		{redlimit.Rules{"*": "1/s", "* tier=pro": "2/s"}, nil, `rules for tier "pro", and no redlimit.WithTier`},
		{redlimit.Rules{"* tier=pro": "2/s"}, []redlimit.Option{tier}, "none for the default"},
		{redlimit.Rules{"*": "1/s", "* tier=": "2/s"}, []redlimit.Option{tier}, `tier ""`},
		{redlimit.Rules{"*": "1/s", "* tier=p r": "2/s"}, []redlimit.Option{tier}, `byte ' '`},
		{redlimit.Rules{"*": "1/s", "get /x tier=pro": "2/s"}, []redlimit.Option{tier}, `rule "get /x tier=pro": method "get"`},
		{redlimit.Rules{"*": "1/s", "* tier=pro": "2/x"}, []redlimit.Option{tier}, `rule "* tier=pro"`},
		{redlimit.Rules{"*": "1/s, 5/m unit=tokens"}, nil, "no redlimit.WithBudget of that unit"},
		{redlimit.Rules{"*": "5/m unit=tokens"}, []redlimit.Option{budget}, "needs a limit of requests"},
		{redlimit.Rules{"*": "1/s", "/x": "1/s, 5/m unit=tokens"}, []redlimit.Option{budget}, "are the catch-all's"},
	} {
		_, err := redlimit.NewRuleSet(lim, tt.rules, tt.opts...)
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("NewRuleSet(%v) = %v, want an error saying %q", tt.rules, err, tt.says)
		}
	}
	if _, err := redlimit.ParseRules([]byte(`{"* tier=": "1/s"}`)); !isRulesError(err) {
		t.Errorf("ParseRules of an empty tier: %v, want ErrInvalidRules", err)
	}
	if _, err := redlimit.NewPolicy(lim, core.PerSecond(1), tier); err == nil {
		t.Error("NewPolicy with WithTier: no error")
	}
}

// TestTiersGRPCRequest: the tier function reads the request's
// description, so a request of another protocol is tiered too.
func TestTiersGRPCRequest(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	rs, err := redlimit.NewRuleSet(lim, redlimit.Rules{"*": "1/m fixed_window", "* tier=pro": "2/m fixed_window"},
		redlimit.WithRequestKey(func(redlimit.Request) (string, error) { return "k", nil }),
		redlimit.WithTier(func(q redlimit.Request) (string, error) {
			if v := q.Values("x-plan"); len(v) > 0 {
				return v[0], nil
			}
			return "", nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for range 3 {
		q := redlimit.Request{Context: t.Context(), Method: "POST", Path: "/pkg.S/M", Metadata: map[string][]string{"x-plan": {"pro"}}}
		got = append(got, redlimit.ServeRequest(rs, q, map[string][]string{}, func() int { return 200 }).Allowed())
	}
	if fmt.Sprint(got) != "[true true false]" {
		t.Errorf("pro calls allowed: %v, want [true true false]", got)
	}
}
