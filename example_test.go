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

	config := []byte(`{
		"POST /login":   "5/m sliding_log",
		"GET /api/*":    "100/s",
		"GET /export/*": "10/h token_bucket burst=0"
	}`)
	rules, err := redlimit.ParseRules(config)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := redlimit.NewRuleSet(lim, rules); err != nil {
		fmt.Println(err) // checked at start-up, naming the rule
	}
	delete(rules, "GET /export/*")
	rs, _ := redlimit.NewRuleSet(lim, rules)
	for _, target := range []string{"POST /login", "GET /api/users/7", "GET /health"} {
		method, path, _ := strings.Cut(target, " ")
		r := httptest.NewRequest(method, path, nil)
		d := redlimit.Serve(rs, httptest.NewRecorder(), r, func(http.ResponseWriter, *http.Request) int { return http.StatusOK })
		fmt.Printf("%-16s rule %q, %d remaining\n", target, d.Policy, d.Result.Remaining)
	}
	// Output:
	// redlimit: rule "GET /export/*": redlimit: invalid limit: "10/h token_bucket burst=0": burst 0 must be positive
	// POST /login      rule "POST /login", 4 remaining
	// GET /api/users/7 rule "GET /api/*", 99 remaining
	// GET /health      rule "", 0 remaining
}
