package redlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

func ExampleParseRules() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}))

	// Limits and costs are checked when the rules are loaded, naming the
	// rule that is wrong.
	_, err := redlimit.ParseRules([]byte(`{"GET /export/*": "10/h token_bucket burst=0"}`))
	fmt.Println(err)

	config := []byte(`{
		"POST /login":   "5/m sliding_log",
		"GET /api/*":    "100/s",
		"GET /search":   "100/s, cost=5"
	}`)
	rules, err := redlimit.ParseRules(config)
	if err != nil {
		fmt.Println(err)
		return
	}
	rs, err := redlimit.NewRuleSet(lim, rules)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, target := range []string{"POST /login", "GET /api/users/7", "GET /search", "GET /health"} {
		method, path, _ := strings.Cut(target, " ")
		r := httptest.NewRequest(method, path, nil)
		d := redlimit.Serve(rs, httptest.NewRecorder(), r, func(http.ResponseWriter, *http.Request) int { return http.StatusOK })
		fmt.Printf("%-16s rule %q, %d remaining\n", target, d.Policy, d.Result.Remaining)
	}
	// Output:
	// redlimit: invalid rules: rule "GET /export/*": redlimit: invalid limit: "10/h token_bucket burst=0": burst 0 must be positive
	// POST /login      rule "POST /login", 4 remaining
	// GET /api/users/7 rule "GET /api/*", 99 remaining
	// GET /search      rule "GET /search", 95 remaining
	// GET /health      rule "", 0 remaining
}
