package redlimit_test

// Examples that docs/rules.md quotes.

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
)

func ExampleRuleSet_Update() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)
	login := func(h http.Handler) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login", nil))
		return w.Code
	}

	rs, err := redlimit.NewRuleSet(lim, redlimit.Rules{"POST /login": "2/m fixed_window"})
	if err != nil {
		panic(err)
	}
	app := nethttp.Middleware(rs)(okHandler)
	fmt.Println(login(app), login(app), login(app))

	// Later, from a reloaded configuration file: the same pattern, the
	// same algorithm and period, so the minute's count of 2 stands.
	if err := rs.Update(redlimit.Rules{"POST /login": "3/m fixed_window"}); err != nil {
		fmt.Println(err) // the old rules stay
	}
	fmt.Println(login(app), login(app))

	// A mistake is refused, and the rules in force stay.
	err = rs.Update(redlimit.Rules{"post /login": "100/m"})
	fmt.Println(err)
	fmt.Println(login(app))
	// Output:
	// 200 200 429
	// 200 429
	// redlimit: invalid rules: rule "post /login": method "post": methods are case-sensitive and requests send "POST"; write it so
	// 429
}

func ExampleParseRules_cannotMatch() {
	for _, doc := range []string{
		`{"get /search": "10/s"}`,
		`{"GET /reports/:id": "1/s"}`,
		`{"GET /static/*filepath": "100/s"}`,
		`{"GET api/users": "10/s"}`,
	} {
		_, err := redlimit.ParseRules([]byte(doc))
		fmt.Println(err)
	}
	// Output:
	// redlimit: invalid rules: rule "get /search": method "get": methods are case-sensitive and requests send "GET"; write it so
	// redlimit: invalid rules: rule "GET /reports/:id": ":id" is gin's and echo's parameter syntax; rules use ServeMux's, "{id}"
	// redlimit: invalid rules: rule "GET /static/*filepath": '*' may only end a pattern, as in "GET /api/*": "*filepath" is gin's catch-all, written "{filepath...}" here
	// redlimit: invalid rules: rule "GET api/users": the path "api/users" does not start with '/' (and "api" is not a host name, as in "api.example.com/users")
}

func ExampleRules_cost() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)
	search := func(h http.Handler) string {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/search", nil))
		return fmt.Sprint(w.Code, " ", w.Header().Get("X-RateLimit-Remaining"))
	}

	// Every plan's allowance is the catch-all's; a search costs 5 of it.
	rules := redlimit.Rules{
		"*":           "20/m fixed_window",
		"* tier=pro":  "200/m fixed_window",
		"GET /search": "cost=5",
	}
	rs, err := redlimit.NewRuleSet(lim, rules, redlimit.WithTier(func(q redlimit.Request) (string, error) {
		return q.HTTP.Header.Get("X-Plan"), nil
	}))
	if err != nil {
		panic(err)
	}
	app := nethttp.Middleware(rs)(okHandler)
	fmt.Println(search(app), "|", search(app))

	// Reloaded with the rest of the rules: a search costs 2 now.
	rules["GET /search"] = "cost=2"
	if err := rs.Update(rules); err != nil {
		fmt.Println(err)
	}
	fmt.Println(search(app))

	// A cost no request could pay is refused when loaded.
	rules["GET /search"] = "cost=50"
	fmt.Println(rs.Update(rules))
	// Output:
	// 200 15 | 200 10
	// 200 8
	// redlimit: rule "GET /search": redlimit: invalid cost: cost=50 is above the burst 20 of the catch-all's limits (20/m fixed_window): no request could ever be admitted
}
