package redlimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// sendCodes sends n requests and writes their statuses and
// X-RateLimit-Remaining as "200:15 200:10 429:0".
func sendCodes(send func(method, path string) *httptest.ResponseRecorder, n int, method, path string) string {
	var out []string
	for range n {
		w := send(method, path)
		out = append(out, fmt.Sprintf("%d:%s", w.Code, w.Header().Get("X-RateLimit-Remaining")))
	}
	return strings.Join(out, " ")
}

// TestRuleCostsReloaded: a rule carries its cost ("cost=5"), charged to
// every request limit it is decided by, the catch-all's included; a rule
// of a cost alone is decided by the catch-all's limits; RuleSet.Update
// reloads costs with the rest, keeps the state, and refuses a cost no
// request could pay, keeping the rules in force.
func TestRuleCostsReloaded(t *testing.T) {
	t.Parallel()
	rs, send := rulesApp(t, redlimit.Rules{
		"*":            "20/m fixed_window",
		"GET /search":  "cost=5",
		"POST /upload": "4/m fixed_window, cost=2",
	})
	steps := []struct {
		method, path string
		n            int
		want         string
	}{
		{"GET", "/search", 2, "200:15 200:10"}, // 5 of the catch-all's 20 each
		{"POST", "/upload", 3, "200:2 200:0 429:0"},
		{"GET", "/other", 1, "200:5"}, // the catch-all alone, at 1: 10 + 4 + 1
	}
	for _, s := range steps {
		if got := sendCodes(send, s.n, s.method, s.path); got != s.want {
			t.Fatalf("%s %s: %s, want %s", s.method, s.path, got, s.want)
		}
	}
	// Reloaded: search costs 2 now; the minute's 15 stand.
	err := rs.Update(redlimit.Rules{"*": "20/m fixed_window", "GET /search": "cost=2", "POST /upload": "4/m fixed_window, cost=2"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sendCodes(send, 3, "GET", "/search"), "200:3 200:1 429:1"; got != want {
		t.Errorf("after the reload: %s, want %s", got, want)
	}
	// A cost above the catch-all's burst is refused, and search still
	// costs 2 (1 left: denied).
	err = rs.Update(redlimit.Rules{"*": "20/m fixed_window", "GET /search": "cost=25"})
	if !errors.Is(err, core.ErrInvalidCost) || !strings.Contains(err.Error(), `rule "GET /search"`) {
		t.Errorf("Update with cost=25 under 20/m: %v, want an ErrInvalidCost error naming the rule", err)
	}
	if got, want := sendCodes(send, 1, "GET", "/search"), "429:1"; got != want {
		t.Errorf("after the refused reload: %s, want %s", got, want)
	}
	if got, want := sendCodes(send, 1, "GET", "/other"), "200:0"; got != want {
		t.Errorf("after the refused reload, another route: %s, want %s", got, want)
	}
}

// TestRuleCostsByTier: "search costs 5 on every plan" is one rule, decided
// with each tier's catch-all; a tier may set a cost of its own.
func TestRuleCostsByTier(t *testing.T) {
	t.Parallel()
	_, send := tierApp(t, redlimit.Rules{
		"*":                    "10/m fixed_window",
		"* tier=pro":           "100/m fixed_window",
		"GET /search":          "cost=5",
		"GET /export tier=pro": "cost=50",
	})
	for _, step := range []struct {
		plan, path string
		n          int
		want       string
	}{
		{"", "/search", 3, "200 200 429"},
		{"pro", "/search", 2, "200 200"},                     // 10 of pro's 100 were used by the default's
		{"pro", "/export", 2, "200 429"},                     // 20 + 50; then 120
		{"pro", "/search", 7, "200 200 200 200 200 200 429"}, // 70 + 30
	} {
		if got := sendN(send, step.n, step.plan, "GET", step.path); got != step.want {
			t.Errorf("%q GET %s: %s, want %s", step.plan, step.path, got, step.want)
		}
	}
}

// TestRuleEstimates: "estimate=N" is what a rule's requests reserve of
// the budget, in place of the budget's Estimate, reloaded with the rules.
func TestRuleEstimates(t *testing.T) {
	t.Parallel()
	tokens, err := core.ParseLimits("1000/m fixed_window unit=tokens")
	if err != nil {
		t.Fatal(err)
	}
	budget := redlimit.WithBudget(redlimit.Budget{Limits: tokens, Estimate: func(*http.Request) int { return 400 }})
	rs, send := rulesApp(t, redlimit.Rules{"*": "100/m", "POST /chat": "estimate=100"}, budget)
	if got, want := sendCodes(send, 1, "GET", "/"), "200:99"; got != want { // 400 tokens: the budget's Estimate
		t.Fatalf("GET /: %s, want %s", got, want)
	}
	if got, want := sendCodes(send, 7, "POST", "/chat"), "200:98 200:97 200:96 200:95 200:94 200:0 429:0"; got != want {
		t.Errorf("POST /chat at 100 tokens: %s, want %s", got, want) // 400 + 6 × 100 = 1000; then the tokens bind
	}
	if err := rs.Update(redlimit.Rules{"*": "100/m", "POST /chat": "estimate=0"}); err != nil {
		t.Fatal(err)
	}
	if got, want := sendCodes(send, 1, "POST", "/chat"), "200:0"; got != want { // 92 requests left, no tokens
		t.Errorf("POST /chat at 0 tokens after the reload: %s, want %s", got, want)
	}
	err = rs.Update(redlimit.Rules{"*": "100/m", "POST /chat": "estimate=1001"})
	if !errors.Is(err, core.ErrInvalidCost) || !strings.Contains(err.Error(), "above the burst 1000") {
		t.Errorf("estimate=1001 under 1000 tokens: %v, want an ErrInvalidCost error", err)
	}
}

// TestRuleSettingsRefused: a cost or estimate that no request could pay,
// or that is not one, is an error when the rules are loaded: by
// ParseRules for the rule's own limits, by NewRuleSet and Update for the
// table's catch-all and budgets.
func TestRuleSettingsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ doc, says string }{
		{`{"/x": "5/m, cost=6"}`, "cost=6 is above the burst 5"},
		{`{"/x": "5/m burst=2, 10/h, cost=3"}`, "cost=3 is above the burst 2"},
		{`{"/x": "5/m, cost=0"}`, `"cost=0": want cost= followed by a whole number from 1`},
		{`{"/x": "5/m, cost=two"}`, `"cost=two"`},
		{`{"/x": "5/m, cost=+2"}`, `"cost=+2"`},
		{`{"/x": "5/m, cost=1, cost=2"}`, "cost is given twice"},
		{`{"/x": "5/m, estimate=-1"}`, `"estimate=-1"`},
		{`{"/x": "5/m, estimate=1 unit=a b"}`, "want estimate=N"},
		{`{"/x": "5/m, estimate=1, estimate=2"}`, "given twice"},
		{`{"/x": "5/m, bogus"}`, core.ErrInvalidLimit.Error()},
	} {
		_, err := redlimit.ParseRules([]byte(tt.doc))
		if !isRulesError(err) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ParseRules(%s): %v; want an ErrInvalidRules error saying %q", tt.doc, err, tt.says)
		}
	}
	lim, _ := embedded(t)
	tokens, _ := core.ParseLimits("1000/m unit=tokens")
	budget := redlimit.WithBudget(redlimit.Budget{Limits: tokens})
	for _, tt := range []struct {
		rules redlimit.Rules
		opts  []redlimit.Option
		says  string
	}{
		{redlimit.Rules{"*": "3/m", "/x": "cost=4"}, nil, `rule "/x": ` + core.ErrInvalidCost.Error() + ": cost=4 is above the burst 3 of the catch-all's limits"},
		{redlimit.Rules{"*": "3/m", "/x": "10/m, cost=4"}, nil, "above the burst 3 of the catch-all's limits"},
		{redlimit.Rules{"/x": "cost=4"}, nil, `no limits of its own`},
		{redlimit.Rules{"*": "cost=4"}, nil, `no limits of its own`},
		{redlimit.Rules{"*": "3/m", "* tier=pro": "100/m", "/x": "cost=50"}, []redlimit.Option{tierOf("pro")}, `rule "/x"`},
		{redlimit.Rules{"*": "3/m", "/x": "estimate=5"}, nil, "no redlimit.WithBudget"},
		{redlimit.Rules{"*": "3/m", "/x": "estimate=5 unit=bytes"}, []redlimit.Option{budget}, `no redlimit.WithBudget of that unit`},
		{redlimit.Rules{"*": "3/m", "/x": "estimate=2000"}, []redlimit.Option{budget}, "above the burst 1000"},
		{redlimit.Rules{"*": "3/m", "/x": "estimate=5, estimate=6 unit=tokens"}, []redlimit.Option{budget}, "two estimates"},
		{redlimit.Rules{"*": "3/m", "/x": "cost=2"}, []redlimit.Option{redlimit.WithMaxCost(1)}, "WithMaxCost(1) is below"},
	} {
		_, err := redlimit.NewRuleSet(lim, tt.rules, tt.opts...)
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("NewRuleSet(%v): %v; want an error saying %q", tt.rules, err, tt.says)
		}
	}
	ok := []redlimit.Rules{
		{"*": "3/m", "* tier=pro": "100/m", "/x tier=pro": "cost=50"},
		{"*": "3/m, cost=2", "/x": "cost=3"},
		{"*": "3/m", "/x": "estimate=1000 unit=tokens, cost=3"},
	}
	for _, rules := range ok {
		if _, err := redlimit.NewRuleSet(lim, rules, tierOf("pro"), budget); err != nil {
			t.Errorf("NewRuleSet(%v): %v", rules, err)
		}
	}
}

// tierOf is WithTier of a function that tells every request's tier as
// tier.
func tierOf(tier string) redlimit.Option {
	return redlimit.WithTier(func(redlimit.Request) (string, error) { return tier, nil })
}
