package redlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/keyfunc"
)

// TestRulesStates: Rules.States names every state a RuleSet's requests
// write, as the RuleSet names it (a prefix with ':' inside, patterns in
// two spellings and a host, a tier, the catch-all, a key hashed for its
// length), on miniredis and redis-server: the keys in Redis after the
// requests are exactly the Look keys of the rules they crossed, Look
// reads their counts, and ResetRequest of one rule forgets its state
// alone.
func TestRulesStates(t *testing.T) {
	t.Parallel()
	for _, b := range []struct {
		name string
		rdb  func(t *testing.T) *redis.Client
	}{
		{"miniredis", func(t *testing.T) *redis.Client {
			return redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		}},
		{"redis-server", func(t *testing.T) *redis.Client { return redistest.Standalone(t).Client(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testRulesStates(t, b.rdb(t))
		})
	}
}

func testRulesStates(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	rules := redlimit.Rules{
		"*":                           "100/h, 1000/d fixed_window",
		"post  /login":                "5/h", // not a method in capitals: refused below, then fixed
		"API.Example.com./reports":    "3/h sliding_log",
		"GET /api/{rest...}":          "10/h",
		"GET /api/{rest...} tier=pro": "50/d, 2 concurrent",
	}
	if _, err := rules.States("k"); err == nil || !strings.Contains(err.Error(), `"post  /login"`) {
		t.Fatalf("States of a table with a bad pattern: %v; want an error naming it", err)
	}
	delete(rules, "post  /login")
	rules["POST  /login"] = "5/h"
	lim := core.New(rdb, core.WithPrefix("app:v2:"), core.WithTimeout(10*time.Second))
	rs, err := redlimit.NewRuleSet(lim, rules, redlimit.WithKey(keyfunc.Header("X-Key")),
		redlimit.WithTier(func(q redlimit.Request) (string, error) { return strings.Join(q.Values("X-Plan"), ""), nil }))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("tenant-", 30) // hashed: longer than 128 bytes
	send := func(key, plan, method, url string) {
		r := httptest.NewRequest(method, url, nil)
		r.Header.Set("X-Key", key)
		r.Header.Set("X-Plan", plan)
		w := httptest.NewRecorder()
		redlimit.Serve(rs, w, r, func(http.ResponseWriter, *http.Request) int { return http.StatusOK })
		if w.Code != http.StatusOK {
			t.Fatalf("%s %s: %d", method, url, w.Code)
		}
	}
	send(long, "", "POST", "/login")
	send(long, "", "POST", "//login") // cleaned: the same rule
	send(long, "", "GET", "http://api.example.com:8443/reports")
	send(long, "", "GET", "/api/a")
	send(long, "pro", "GET", "/api/b")
	send(long, "pro", "GET", "/other")

	states, err := rules.States("header:X-Key:" + long)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var names []string
	left := map[string]int{} // the rule's first limit's remaining
	for _, s := range states {
		order = append(order, s.Rule)
		got, err := lim.Look(ctx, &s.Request)
		if err != nil {
			t.Fatal(err)
		}
		left[s.Rule] = got[0].Remaining
		for _, g := range got {
			names = append(names, g.Key)
		}
	}
	wantOrder := []string{"*", "API.Example.com./reports", "GET /api/{rest...}", "GET /api/{rest...} tier=pro", "POST  /login"} // as written
	if !slices.Equal(order, wantOrder) {
		t.Errorf("order %q, want %q", order, wantOrder)
	}
	for rule, want := range map[string]int{"*": 94, "POST  /login": 3, "API.Example.com./reports": 2, "GET /api/{rest...}": 9, "GET /api/{rest...} tier=pro": 49} {
		if left[rule] != want {
			t.Errorf("%s: %d left, want %d", rule, left[rule], want)
		}
	}
	inRedis, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range inRedis { // the slot held by the pro request was freed when it finished
		if !slices.Contains(names, k) {
			t.Errorf("Redis holds %q, which States does not name (it names %q)", k, names)
		}
		if !strings.HasPrefix(k, "app%3Av2:") || !strings.Contains(k, "{sha256:") {
			t.Errorf("key %q: want the escaped prefix and the hashed key", k)
		}
	}
	if len(inRedis) != 7 { // the catch-all's two, login, reports, /api/*'s, and pro's two (its slots' key keeps a record)
		t.Errorf("%d keys in Redis, want 7: %q", len(inRedis), inRedis)
	}

	login := states[len(states)-1]
	if login.Rule != "POST  /login" {
		t.Fatalf("last rule %q", login.Rule)
	}
	if err := lim.ResetRequest(ctx, &login.Request); err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		got, err := lim.Look(ctx, &s.Request)
		if err != nil {
			t.Fatal(err)
		}
		want := left[s.Rule]
		if s.Rule == login.Rule {
			want = 5
		}
		if got[0].Remaining != want {
			t.Errorf("after resetting %s: %s has %d left, want %d", login.Rule, s.Rule, got[0].Remaining, want)
		}
	}
}

// ExampleRules_States unlocks a user: support resets the user's state
// under the login rule of the rules table the service loads, and leaves
// every other rule's as it is. The command redlimit does the same:
// "redlimit reset -rules rules.json user:alice 'POST /login'".
func ExampleRules_States() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)
	ctx := context.Background()
	rules := redlimit.Rules{"*": "100/m", "POST /login": "3/h fixed_window"}

	states, err := rules.States("user:alice") // the key WithKey's function finds
	if err != nil {
		panic(err)
	}
	for _, s := range states {
		if s.Rule == "POST /login" {
			// Three failed logins an hour ago: locked out.
			if _, err := lim.Decide(ctx, &core.Request{Key: s.Request.Key, Limits: s.Request.Limits, Scopes: s.Request.Scopes, N: 3}); err != nil {
				panic(err)
			}
		}
	}
	for _, s := range states {
		look, err := lim.Look(ctx, &s.Request)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-12s %-18v %d left\n", s.Rule, s.Request.Limits[0], look[0].Remaining)
	}
	if err := lim.ResetRequest(ctx, &states[1].Request); err != nil { // "POST /login", after the catch-all
		panic(err)
	}
	look, _ := lim.Look(ctx, &states[1].Request)
	fmt.Println("after the reset:", look[0].Remaining, "left;", look[0].Key)
	// Output:
	// *            100/m              100 left
	// POST /login  3/h fixed_window   0 left
	// after the reset: 3 left; redlimit:POST /login:{user:alice}:fixed_window:1h
}

// TestRulesStatesSettings: a rule's settings (cost=, a rule of settings
// only) do not stop States: the rule with limits and a cost is listed and
// Look reads what its requests took; a rule of settings only, decided in
// the catch-all's state, is not listed.
func TestRulesStatesSettings(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	ctx := context.Background()
	rules := redlimit.Rules{"*": "100/h", "GET /search": "cost=5", "POST /upload": "10/h, cost=2"}
	lim := core.New(rdb, core.WithTimeout(10*time.Second))
	rs, err := redlimit.NewRuleSet(lim, rules, redlimit.WithKey(keyfunc.Header("X-Key")))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"GET /search", "POST /upload"} {
		method, path, _ := strings.Cut(target, " ")
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("X-Key", "acme")
		w := httptest.NewRecorder()
		redlimit.Serve(rs, w, r, func(http.ResponseWriter, *http.Request) int { return http.StatusOK })
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d", target, w.Code)
		}
	}
	states, err := rules.States("header:X-Key:acme")
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	for _, s := range states {
		got, err := lim.Look(ctx, &s.Request)
		if err != nil {
			t.Fatal(err)
		}
		left[s.Rule] = got[0].Remaining
	}
	if want := map[string]int{"*": 93, "POST /upload": 8}; fmt.Sprint(left) != fmt.Sprint(want) {
		t.Errorf("remaining by rule %v, want %v: the catch-all took 5 and 2, the upload rule 2", left, want)
	}
}
