package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/keyfunc"
)

// rulesFile is the rules file the service of the tests loads: a rate and
// a calendar month's quota for every request, a search with a plan of its
// own, a login lockout, two exports in flight, and a bulk endpoint whose
// true cost the handler tells.
const rulesFile = `{
	"*": "100/m, 60/month fixed_window calendar",
	"GET /search": "20/m",
	"GET /search tier=pro": "200/h",
	"POST /login": "5/h fixed_window",
	"POST /exports": "2 concurrent",
	"POST /bulk": "10/h"
}`

// service is the app the tool inspects: a RuleSet of rulesFile keyed by
// tenant (X-Tenant), with plans (X-Plan), and a policy of its code,
// "login-user" (per user, X-User), on prefix "app:".
type service struct {
	t       *testing.T
	rules   http.Handler
	user    http.Handler
	release chan struct{} // closes to let held exports finish
}

func newService(t *testing.T, rdb redis.UniversalClient, file string) *service {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := redlimit.ParseRules(data)
	if err != nil {
		t.Fatal(err)
	}
	lim := core.New(rdb, core.WithPrefix("app:"), core.WithTimeout(10*time.Second))
	s := &service{t: t, release: make(chan struct{})}
	rs, err := redlimit.NewRuleSet(lim, rules, redlimit.WithKey(keyfunc.Header("X-Tenant")),
		redlimit.WithTier(func(q redlimit.Request) (string, error) { return strings.Join(q.Values("X-Plan"), ""), nil }),
		redlimit.WithResponseCost(func(r *http.Request, status int, h http.Header) int {
			n, err := strconv.Atoi(h.Get("X-Cost"))
			if err != nil {
				return 1
			}
			return n
		}))
	if err != nil {
		t.Fatal(err)
	}
	s.rules = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redlimit.Serve(rs, w, r, func(w http.ResponseWriter, r *http.Request) int {
			switch r.URL.Path {
			case "/exports":
				<-s.release
			case "/bulk":
				w.Header().Set("X-Cost", "15") // 5 beyond the 10 an hour: a debt
			}
			return http.StatusOK
		})
	})
	user, err := redlimit.NewPolicy(lim, core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: time.Hour},
		redlimit.WithName("login-user"), redlimit.WithKey(keyfunc.Header("X-User")))
	if err != nil {
		t.Fatal(err)
	}
	s.user = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redlimit.Serve(user, w, r, func(http.ResponseWriter, *http.Request) int { return http.StatusOK })
	})
	return s
}

// send sends a request of tenant (and plan) and returns its status.
func (s *service) send(tenant, plan, method, path string) int {
	r := httptest.NewRequest(method, path, nil)
	r.Header.Set("X-Tenant", tenant)
	r.Header.Set("X-Plan", plan)
	w := httptest.NewRecorder()
	s.rules.ServeHTTP(w, r)
	return w.Code
}

// tool runs the command line args and returns its exit status, stdout and
// stderr.
func tool(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr, nil)
	return code, stdout.String(), stderr.String()
}

// showJSON runs show -json and reads its report.
func showJSON(t *testing.T, env map[string]string, args ...string) report {
	t.Helper()
	code, out, errs := tool(t, env, append([]string{"show", "-json"}, args...)...)
	if code != 0 {
		t.Fatalf("show %q: exit %d: %s", args, code, errs)
	}
	var r report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("show -json: %v\n%s", err, out)
	}
	return r
}

// limitOf returns the row of rule's limit, failing the test if none.
func limitOf(t *testing.T, r report, rule, limit string) row {
	t.Helper()
	for _, row := range r.Limits {
		if row.Rule == rule && row.Limit == limit {
			return row
		}
	}
	t.Fatalf("no row %s %s in %+v", rule, limit, r.Limits)
	return row{}
}

// TestTool: support's questions, answered by the tool against a service
// that used its limits on a real redis-server and on miniredis: show
// finds every state the service wrote, under the names it wrote them
// (prefix, patterns, the catch-all, a tier, a policy of the code, a key
// hashed for its length), says which limits deny and why (a quota used
// up, slots held, a debt), and writes nothing; reset of one rule unlocks
// a tenant there alone, and the service admits it again; reset of all
// forgets every limit.
func TestTool(t *testing.T) {
	t.Parallel()
	for _, b := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"miniredis", func(t *testing.T) string { return miniredis.RunT(t).Addr() }},
		{"redis-server", func(t *testing.T) string { return redistest.Standalone(t).Addr }},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testTool(t, b.addr(t))
		})
	}
}

// acme is the key of tenant acme, as keyfunc.Header("X-Tenant") finds it.
const acme = "header:X-Tenant:acme"

func testTool(t *testing.T, addr string) {
	file := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(file, []byte(rulesFile), 0o600); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	svc := newService(t, rdb, file)
	env := map[string]string{"REDIS_URL": "redis://" + addr, "REDLIMIT_RULES": file}

	// acme: 38 requests, 20 searches (a minute's) and 2 exports held:
	// the month's 60 used, and a request is denied.
	for i := range 58 {
		path := "/items"
		if i >= 38 {
			path = "/search"
		}
		if code := svc.send("acme", "", "GET", path); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	var held sync.WaitGroup
	for range 2 {
		held.Add(1)
		go func() { defer held.Done(); svc.send("acme", "", "POST", "/exports") }()
	}
	defer func() { close(svc.release); held.Wait() }()
	waitFor(t, func() bool {
		r := showJSON(t, env, "-prefix", "app:", acme)
		return limitOf(t, r, "POST /exports", "2 concurrent").Held == 2
	})
	if code := svc.send("acme", "", "GET", "/items"); code != 429 {
		t.Fatalf("a request after the month's 60: %d, want 429", code)
	}
	checkShow(t, rdb, env)
	checkReset(t, svc, env)
}

// checkShow: what show says of acme, in JSON and for people, and that it
// writes nothing.
func checkShow(t *testing.T, rdb *redis.Client, env map[string]string) {
	dirty := writes(t, rdb)
	r := showJSON(t, env, "-prefix", "app:", acme)
	if got := writes(t, rdb); got != dirty {
		t.Errorf("show wrote %d times", got-dirty)
	}
	month := limitOf(t, r, "*", "60/month fixed_window calendar")
	if !month.Denies || month.Remaining != 0 || month.Capacity != 60 || !strings.HasPrefix(month.RedisKey, "app:*:{header:X-Tenant:acme}:fixed_window:calendar:UTC:1month") {
		t.Errorf("the month's quota: %+v", month)
	}
	if n, _ := rdb.Exists(context.Background(), month.RedisKey).Result(); n != 1 {
		t.Errorf("show names %q, which the service did not write", month.RedisKey)
	}
	if s := limitOf(t, r, "GET /search", "20/m"); s.Remaining != 0 || !s.Denies {
		t.Errorf("search: %+v; want its 20 a minute used", s)
	}
	if s := limitOf(t, r, "GET /search tier=pro", "200/h"); s.Remaining != 200 || s.Denies {
		t.Errorf("search for pro: %+v; want untouched", s)
	}
	if e := limitOf(t, r, "POST /exports", "2 concurrent"); e.Held != 2 || e.Remaining != 0 || !e.Denies {
		t.Errorf("exports: %+v; want 2 slots held", e)
	}
	if r.Denying != 3 {
		t.Errorf("%d limits deny; want 3 (the month, search, exports)", r.Denying)
	}
	code, text, _ := tool(t, env, "show", acme, "-prefix", "app:")
	for _, want := range []string{
		`RULE +LIMIT +LEFT +FULL IN +STATE`,
		`\* +60/month fixed_window calendar +0/60 +\d+d\d+h +DENIES: none left, one more in \d+d\d+h`,
		`POST /exports +2 concurrent +0/2 +\S+ +DENIES: 2 of 2 slots held, one likely free in \S+`,
		`3 of 7 limits deny "header:X-Tenant:acme" now:`,
	} {
		if code != 0 || !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("show's table lacks %s (exit %d):\n%s", want, code, text)
		}
	}
	pro := showJSON(t, env, "-prefix", "app:", "-tier", "pro", acme)
	for _, row := range pro.Limits {
		if row.Rule == "GET /search" {
			t.Errorf("-tier pro shows the default's search rule: %+v", row)
		}
	}
}

// checkReset: a debt, unlocked by a reset of its rule alone; then every
// limit; the service admits again. A tenant key too long to store is
// found by its hash.
func checkReset(t *testing.T, svc *service, env map[string]string) {
	long := strings.Repeat("x", 200)
	if code := svc.send(long, "", "POST", "/bulk"); code != 200 {
		t.Fatal(code)
	}
	long = "header:X-Tenant:" + long // the key keyfunc.Header finds
	r := showJSON(t, env, "-prefix", "app:", long)
	bulk := limitOf(t, r, "POST /bulk", "10/h")
	if !bulk.Denies || bulk.Debt != 5 || bulk.RetryMS < 29*60*1000 || !strings.Contains(bulk.RedisKey, "{sha256:") {
		t.Errorf("bulk after a cost of 15 under 10/h: %+v; want a debt of 5, 30m to pay, the key hashed", bulk)
	}
	if code, _, errs := tool(t, env, "reset", "-prefix", "app:", long, "POST /bulk"); code != 0 {
		t.Fatalf("reset: %d %s", code, errs)
	}
	if code := svc.send(strings.Repeat("x", 200), "", "POST", "/bulk"); code != 200 {
		t.Errorf("bulk after its reset: %d", code)
	}
	if m := limitOf(t, showJSON(t, env, "-prefix", "app:", long), "*", "100/m"); m.Remaining != 70 {
		t.Errorf("the catch-all after a reset of bulk alone: %+v; want its 2 requests counted, at 15 each", m)
	}

	// A user locked out by a policy of the code, not in the rules file.
	for range 4 {
		r := httptest.NewRequest("POST", "/login", nil)
		r.Header.Set("X-User", "alice")
		svc.user.ServeHTTP(httptest.NewRecorder(), r)
	}
	user := []string{"-prefix", "app:", "-policy", "login-user=3/h fixed_window", "header:X-User:alice"}
	if u := limitOf(t, showJSON(t, env, user...), "login-user", "3/h fixed_window"); !u.Denies || u.Remaining != 0 {
		t.Errorf("alice after 4 logins: %+v", u)
	}
	if code, _, errs := tool(t, env, append([]string{"reset", "header:X-User:alice", "login-user"}, user[:4]...)...); code != 0 {
		t.Fatalf("reset: %d %s", code, errs)
	}
	if u := limitOf(t, showJSON(t, env, user...), "login-user", "3/h fixed_window"); u.Denies || u.Remaining != 3 {
		t.Errorf("alice unlocked: %+v", u)
	}

	code, out, errs := tool(t, env, "reset", "-prefix", "app:", "-json", acme, "GET /search")
	var reset report
	if code != 0 || json.Unmarshal([]byte(out), &reset) != nil || len(reset.Limits) != 2 || !reset.Reset {
		t.Fatalf("reset of search (its two tiers' rules): %d %s %s", code, out, errs)
	}
	if code := svc.send("acme", "", "GET", "/search"); code != 429 {
		t.Errorf("search with the month's quota still used: %d, want 429", code)
	}
	if code, _, errs := tool(t, env, "reset", "-prefix", "app:", acme); code != 0 {
		t.Fatalf("reset: %d %s", code, errs)
	}
	after := showJSON(t, env, "-prefix", "app:", acme)
	for _, row := range after.Limits {
		if row.Remaining != row.Capacity || row.Denies {
			t.Errorf("after a reset of everything: %+v", row)
		}
	}
	// The service denied acme a moment ago: its deny cache answers for
	// up to a second more (core.WithDenyCacheMaxAge).
	waitFor(t, func() bool { return svc.send("acme", "", "GET", "/search") == 200 })
}

// writes returns the server's count of writes since its last save, or -1
// on miniredis, which keeps none.
func writes(t *testing.T, rdb *redis.Client) int {
	info, err := rdb.Info(context.Background(), "persistence").Result()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_changes_since_last_save:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return -1
}

// waitFor polls cond for at most 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCheck: check reads a rules file as the service does, says how it
// reads each rule, and names the rule that is wrong; -json says the same
// for scripts; the exit status tells them apart.
func TestCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	good := write("good.json", rulesFile)
	code, out, errs := tool(t, nil, "check", good)
	if code != 0 || !strings.Contains(out, "valid, 6 rules") || !regexp.MustCompile(`GET /search tier=pro +200/h +GET /search`).MatchString(out) {
		t.Errorf("check of a good file: %d\n%s%s", code, out, errs)
	}
	budget := write("budget.json", `{"*": "60/m, 40000/m unit=tokens", "POST /chat": "10/m"}`)
	if code, out, errs := tool(t, nil, "check", budget); code != 0 {
		t.Errorf("check of a file with a budget's limits: %d\n%s%s", code, out, errs)
	}
	for _, body := range []string{ // a rule's settings (issue 35): a cost, an estimate of a budget the service's code gives
		`{"*": "100/m", "GET /search": "cost=5", "POST /upload": "10/h, cost=2"}`,
		`{"*": "100/m", "POST /chat": "10/m, estimate=500 unit=tokens"}`,
		`{"*": "100/m", "POST /chat": "10/m, estimate=500"}`,
		`{"*": "100/m, 1000/h unit=tokens", "POST /chat": "10/m, estimate=500 unit=tokens"}`,
	} {
		if code, out, errs := tool(t, nil, "check", write("settings.json", body)); code != 0 {
			t.Errorf("check of %s: %d\n%s%s", body, code, out, errs)
		}
	}
	for _, c := range []struct{ body, says string }{
		{`{"*": "100/m", "POST /upload": "2/h, cost=5"}`, `rule "POST /upload"`},
		{`{"*": "100/m", "get /search": "10/s"}`, `rule "get /search": method "get"`},
		{`{"*": "100/m", "POST /login": "5/fortnight"}`, `rule "POST /login"`},
		{`{"*": "100/m", "*": "10/s"}`, `pattern "*" is given twice`},
		{`{"GET /a tier=pro": "1/s"}`, `none for the default`},
		{`[]`, `want a JSON object`},
	} {
		f := write("bad.json", c.body)
		code, out, errs := tool(t, nil, "check", f)
		if code != 1 || out != "" || !strings.Contains(errs, c.says) || !strings.Contains(errs, f) {
			t.Errorf("check of %s: exit %d, stdout %q, stderr %q; want 1 and an error with %q", c.body, code, out, errs, c.says)
		}
		code, out, _ = tool(t, nil, "check", "-json", f)
		var r checkReport
		if code != 1 || json.Unmarshal([]byte(out), &r) != nil || r.Valid || !strings.Contains(r.Error, c.says) {
			t.Errorf("check -json of %s: exit %d, %s", c.body, code, out)
		}
	}
	code, out, _ = tool(t, nil, "check", "-json", good)
	var r checkReport
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || !r.Valid || len(r.Rules) != 6 || r.Rules[0].Rule != "*" ||
		strings.Join(r.Rules[0].Limits, ", ") != "100/m, 60/month fixed_window calendar" {
		t.Errorf("check -json of a good file: %d %s", code, out)
	}
}

// TestCommandLine: mistakes on the command line exit 2 with the usage,
// -h exits 0, and what the tool cannot do without says how to fix it.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		env  map[string]string
		code int
		says string
	}{
		{nil, nil, 2, "usage:"},
		{[]string{"-h"}, nil, 0, "usage:"},
		{[]string{"show", "-h"}, nil, 0, "-redis"},
		{[]string{"frobnicate"}, nil, 2, `unknown command "frobnicate"`},
		{[]string{"show"}, nil, 2, "takes KEY, not 0 arguments"},
		{[]string{"reset", "a", "b", "c"}, nil, 2, "takes KEY [RULE], not 3 arguments"},
		{[]string{"show", "-bogus", "k"}, nil, 2, "-bogus"},
		{[]string{"show", "k"}, nil, 1, "give -rules FILE"},
		{[]string{"show", "-policy", "5/m", "k"}, nil, 1, "set -redis or REDIS_URL"},
		{[]string{"show", "-policy", "login=5/fortnight", "k"}, nil, 1, `-policy "login=5/fortnight"`},
		{[]string{"show", "-rules", "/nonexistent.json", "k"}, map[string]string{"REDIS_URL": "redis://localhost:1"}, 1, "/nonexistent.json"},
		{[]string{"reset", "-policy", "login=5/m", "k", "logout"}, map[string]string{"REDIS_URL": "redis://localhost:1"}, 1, `no rule "logout"; the rules are "login"`},
	} {
		code, out, errs := tool(t, c.env, c.args...)
		if code != c.code || !strings.Contains(out+errs, c.says) {
			t.Errorf("redlimit %q: exit %d, %q%q; want %d and %q", c.args, code, out, errs, c.code, c.says)
		}
	}
	if name, limits, err := parsePolicy("5/m burst=10, 100/d"); err != nil || name != "5/m burst=10, 100/d" || len(limits) != 2 {
		t.Errorf("a policy named by its limits: %q %v %v", name, limits, err)
	}
	if name, limits, err := parsePolicy("login=10 concurrent lease=30s"); err != nil || name != "login" || limits[0].Rate != 10 {
		t.Errorf("a named policy: %q %v %v", name, limits, err)
	}
}
