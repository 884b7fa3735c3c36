package redlimit_test

import (
	"fmt"

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
	for _, p := range rs.Policies() {
		fmt.Printf("%s: %v\n", p.Name(), p.Limit())
	}
	// Output:
	// redlimit: rule "GET /export/*": redlimit: invalid limit: "10/h token_bucket burst=0": burst must be positive, not 0
	// GET /api/*: 100/s
	// POST /login: 5/m sliding_log
}
