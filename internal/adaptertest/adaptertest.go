// Package adaptertest is the conformance suite every HTTP adapter (nethttp,
// ginlimit, echolimit, chilimit) passes: one table of behaviours, run through each
// framework's own routing and error handling.
package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dunglas/httpsfv"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/keyfunc"
)

// Mw is one middleware to put in an app: a limit and its options.
type Mw struct {
	Limit core.Limit
	Opts  []redlimit.Option
}

// Spec says which middleware an app has. Nil or empty parts are left out.
type Spec struct {
	Limiter *core.Limiter
	Global  *Mw            // on every route
	Login   *Mw            // on POST /login only
	Users   *Mw            // on GET /users/{id} only
	Rules   redlimit.Rules // a rules table on every route
	// RulesOpts are the options of the rules table.
	RulesOpts []redlimit.Option
	// Work is the middleware of POST /work, whose handler is WorkHandler
	// (a net/http one, wrapped in the framework's way).
	Work        *Mw
	WorkHandler http.Handler
	// StoreUser, when set, asks for a middleware before every other that
	// stores the value of the request's X-User header, if it has one,
	// under this name in the framework's own per-request store (gin's and
	// echo's c.Set; the request's context for chi, which has none), where
	// Adapter.UserKey finds it.
	StoreUser string
}

// Adapter is what the suite needs of a framework.
type Adapter struct {
	Name string
	// App builds an app with the routes GET /ping, GET /users/{id} and
	// POST /login, each answering 200 "ok", POST /work served by
	// s.WorkHandler when it is set, and the middleware of s, written in the
	// framework's own way. It returns the rules' error.
	App func(s Spec) (http.Handler, error)
	// UserKey, if set, is the framework's key function for a value stored
	// under name as Spec.StoreUser stores it (ginlimit.Key, echolimit.Key,
	// keyfunc.ContextUser for chi).
	// The suite's ContextUser case runs for adapters that have one.
	UserKey func(name string) keyfunc.Func
}

// t0 is the embedded Redis's clock: it stands still unless a test moves it.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Embedded returns a Limiter with opts on a fresh miniredis whose clock
// stands still, and a timeout of 10 s unless opts set one: for an
// adapter's own tests, whose subject is not the timeout.
func Embedded(t *testing.T, opts ...core.Option) *core.Limiter {
	lim, _ := embeddedRedis(t, opts...)
	return lim
}

// embeddedRedis is Embedded that also returns the miniredis, whose clock
// a test may move (with the deny cache off: it runs on the process's
// clock).
func embeddedRedis(t *testing.T, opts ...core.Option) (*core.Limiter, *miniredis.Miniredis) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return core.New(rdb, append([]core.Option{patient}, opts...)...), m
}

// patient is the timeout of the suite's Limiters where the timeout is not
// what a case tests. Under -race, with every test in parallel on two
// cores beside other packages' tests, a decision can take longer than the
// default 100 ms: on miniredis each one builds a fresh Lua state (about a
// millisecond under -race, the first of a process 15-30 ms), and a
// starved process can stall for longer than that. Tests of the timeout
// set their own.
var patient = core.WithTimeout(10 * time.Second)

// build makes the app or fails the test.
func build(t testing.TB, a Adapter, s Spec) http.Handler {
	t.Helper()
	h, err := a.App(s)
	if err != nil {
		t.Fatalf("%s app: %v", a.Name, err)
	}
	return h
}

// req is one request to send.
type req struct {
	method, path, remote string
	host                 string   // the Host header; "" is httptest's, example.com
	headers              []string // name, value, ...
	ctx                  context.Context
}

func (q req) send(h http.Handler) *httptest.ResponseRecorder {
	method, path, remote := q.method, q.path, q.remote
	if method == "" {
		method = http.MethodGet
	}
	if path == "" {
		path = "/ping"
	}
	if remote == "" {
		remote = "203.0.113.7:40000"
	}
	r := httptest.NewRequest(method, path, nil)
	if q.ctx != nil {
		r = r.WithContext(q.ctx)
	}
	r.RemoteAddr = remote
	if q.host != "" {
		r.Host = q.host
	}
	for i := 0; i+1 < len(q.headers); i += 2 {
		r.Header.Add(q.headers[i], q.headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// served reports whether the route's handler ran.
func served(w *httptest.ResponseRecorder) bool {
	return w.Code == http.StatusOK && w.Body.String() == "ok"
}

// expect checks status and headers; a header wanted "" must be absent.
func expect(t *testing.T, what string, w *httptest.ResponseRecorder, status int, headers ...string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("%s: status %d, want %d (body %q, headers %v)", what, w.Code, status, w.Body.String(), w.Header())
	}
	if status == http.StatusOK && !served(w) {
		t.Fatalf("%s: 200 without the handler's body: %q", what, w.Body.String())
	}
	if status != http.StatusOK && served(w) {
		t.Fatalf("%s: the handler ran on a %d", what, status)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		got, present := w.Header()[http.CanonicalHeaderKey(headers[i])]
		want := headers[i+1]
		switch {
		case want == "" && present:
			t.Fatalf("%s: header %s = %q, want none", what, headers[i], got)
		case want != "" && (len(got) != 1 || got[0] != want):
			t.Fatalf("%s: header %s = %q, want %q", what, headers[i], got, want)
		}
	}
}

// conformanceTest is one test of the suite: its name and its function.
type conformanceTest struct {
	name string
	run  func(t *testing.T, a Adapter)
}

// suite is the conformance suite, in the order Run runs it; Run adds
// ContextUser for an adapter with a UserKey.
var suite = []conformanceTest{
	{"Headers", testHeaders},
	{"HeaderProfiles", testHeaderProfiles},
	{"Skip", testSkip},
	{"DenyHandler", testDenyHandler},
	{"Cost", testCost},
	{"CostUnits", testCostUnits},
	{"DryRun", testDryRun},
	{"MissingKey", testMissingKey},
	{"MissingKeyLogged", testMissingKeyLogged},
	{"LongKeysHashed", testLongKeys},
	{"ForgedForwardedFor", testForgedForwardedFor},
	{"TrustedProxies", testTrustedProxies},
	{"IPv6Grouping", testIPv6Grouping},
	{"RouteKeys", testRouteKeys},
	{"PerRoute", testPerRoute},
	{"PoliciesApart", testPoliciesApart},
	{"TwoPoliciesHeaders", testTwoPoliciesHeaders},
	{"Rules", testRules},
	{"RulesErrors", testRulesErrors},
	{"RulesHosts", testRulesHosts},
	{"Shaping", testShaping},
	{"FailurePolicies", testFailurePolicies},
	{"SlowRedis", testSlowRedis},
	{"Instances", testInstances},
	{"WithAlso", testWithAlso},
	{"RulesCatchAll", testRulesCatchAll},
	{"RequestLimits", testRequestLimits},
	{"RequestLimitsCost", testRequestLimitsCost},
	{"InstancesOneDecision", testInstancesOneDecision},
	{"DraftHeaders", testDraftHeaders},
	{"ProblemDetails", testProblemDetails},
	{"RetryAfterJitter", testRetryAfterJitter},
	{"ResetUnix", testResetUnix},
	{"FailedLoginsCount", testFailedLoginsCount},
	{"TokensCharged", testTokensCharged},
	{"ResponseCostBounds", testResponseCostBounds},
	{"InFlightRules", testInFlightRules},
	{"InFlight", testInFlight},
	{"SlotFreedOnPanic", testSlotFreedOnPanic},
	{"SlotFreedClientGone", testSlotFreedClientGone},
	{"StreamingAndHijacked", testStreamingAndHijacked},
	{"BudgetDenials", testBudgetDenials},
	{"BudgetSettles", testBudgetSettles},
	{"BudgetCap", testBudgetCap},
	{"BudgetLastTokens", testBudgetLastTokens},
	{"BudgetStream", testBudgetStream},
	{"BudgetPanic", testBudgetPanic},
	{"BudgetProxy", testBudgetProxy},
	{"ZeroLimiter", testZeroLimiter},
	{"Decisions", testDecisions},
}

// Run runs the conformance suite against a, each test in parallel.
func Run(t *testing.T, a Adapter) {
	cases := suite
	if a.UserKey != nil {
		cases = append(cases[:len(cases):len(cases)], conformanceTest{"ContextUser", testContextUser})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, a)
		})
	}
}

func testHeaders(t *testing.T, a Adapter) {
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{Limit: core.PerMinute(3)}})
	for i, reset := range []string{"20", "40", "60"} {
		w := req{}.send(h)
		expect(t, fmt.Sprintf("request %d", i+1), w, http.StatusOK,
			"X-RateLimit-Limit", "3", "X-RateLimit-Remaining", fmt.Sprint(2-i), "X-RateLimit-Reset", reset,
			"Retry-After", "", "RateLimit", "", "RateLimit-Policy", "")
	}
	w := req{}.send(h)
	expect(t, "over the limit", w, http.StatusTooManyRequests,
		"X-RateLimit-Limit", "3", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "60", "Retry-After", "20")
	// One default body in every adapter.
	if got, want := w.Body.String(), `{"error":"rate limit exceeded","retry_after":20}`+"\n"; got != want {
		t.Fatalf("429 body %q, want %q", got, want)
	}
	if got := w.Header().Get("Content-Type"); got != "application/json; charset=utf-8" {
		t.Fatalf("429 Content-Type %q", got)
	}
}

func testHeaderProfiles(t *testing.T, a Adapter) {
	for _, tt := range []struct {
		profile redlimit.HeaderProfile
		allowed []string
		denied  []string
	}{
		{redlimit.HeadersDraft,
			[]string{"RateLimit-Policy", `"p";q=1;w=60`, "RateLimit", `"p";r=0;t=60`, "X-RateLimit-Limit", ""},
			[]string{"RateLimit", `"p";r=0;t=60`, "Retry-After", "60", "X-RateLimit-Remaining", ""}},
		{redlimit.HeadersBoth,
			[]string{"RateLimit-Policy", `"p";q=1;w=60`, "X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0"},
			[]string{"RateLimit", `"p";r=0;t=60`, "X-RateLimit-Reset", "60", "Retry-After", "60"}},
		{redlimit.HeadersNone,
			[]string{"RateLimit", "", "X-RateLimit-Limit", "", "Retry-After", ""},
			[]string{"RateLimit", "", "X-RateLimit-Limit", "", "Retry-After", "60"}},
	} {
		opts := []redlimit.Option{redlimit.WithName("p"), redlimit.WithHeaders(tt.profile)}
		h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), opts}})
		expect(t, fmt.Sprintf("profile %d, allowed", tt.profile), req{}.send(h), http.StatusOK, tt.allowed...)
		expect(t, fmt.Sprintf("profile %d, denied", tt.profile), req{}.send(h), http.StatusTooManyRequests, tt.denied...)
	}
}

func testSkip(t *testing.T, a Adapter) {
	skip := redlimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/ping" })
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), []redlimit.Option{skip}}})
	for i := 0; i < 3; i++ {
		expect(t, "skipped", req{}.send(h), http.StatusOK, "X-RateLimit-Limit", "")
	}
	expect(t, "not skipped", req{path: "/users/1"}.send(h), http.StatusOK, "X-RateLimit-Remaining", "0")
	expect(t, "not skipped, over", req{path: "/users/1"}.send(h), http.StatusTooManyRequests)
}

func testDenyHandler(t *testing.T, a Adapter) {
	deny := redlimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d redlimit.Decision) {
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprintf(w, "slow down, %s", d.Policy)
	})
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), []redlimit.Option{deny, redlimit.WithName("tea")}}})
	req{}.send(h)
	w := req{}.send(h)
	expect(t, "denied", w, http.StatusTeapot, "Retry-After", "60", "X-RateLimit-Remaining", "0")
	if w.Body.String() != "slow down, tea" {
		t.Fatalf("body %q from the deny handler", w.Body.String())
	}
}

func testCost(t *testing.T, a Adapter) {
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(5), []redlimit.Option{redlimit.WithCost(2)}}})
	expect(t, "first", req{}.send(h), http.StatusOK, "X-RateLimit-Remaining", "3")
	expect(t, "second", req{}.send(h), http.StatusOK, "X-RateLimit-Remaining", "1")
	expect(t, "third", req{}.send(h), http.StatusTooManyRequests, "X-RateLimit-Remaining", "1")
}

// testCostUnits: every rate-limit field counts the unit the limit counts,
// of which a request of WithCost(n) uses n: 150 a minute with a cost of
// 100 leaves 50, and the next request, which needs 100, is denied with 50
// still remaining (correct in those units: 50 are left, 100 are needed),
// a Retry-After of the 20 s the other 50 take to come back, and a draft t
// of the 1 s until one more unit does.
func testCostUnits(t *testing.T, a Adapter) {
	opts := []redlimit.Option{redlimit.WithName("c"), redlimit.WithCost(100), redlimit.WithHeaders(redlimit.HeadersBoth)}
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(150), opts}})
	expect(t, "a request of cost 100", req{}.send(h), http.StatusOK,
		"X-RateLimit-Limit", "150", "X-RateLimit-Remaining", "50", "X-RateLimit-Reset", "40",
		"RateLimit-Policy", `"c";q=150;w=60`, "RateLimit", `"c";r=50;t=1`)
	w := req{}.send(h)
	expect(t, "another, with 50 left", w, http.StatusTooManyRequests,
		"X-RateLimit-Limit", "150", "X-RateLimit-Remaining", "50", "X-RateLimit-Reset", "40", "Retry-After", "20",
		"RateLimit-Policy", `"c";q=150;w=60`, "RateLimit", `"c";r=50;t=1`)
	if got, want := w.Body.String(), `{"error":"rate limit exceeded","retry_after":20}`+"\n"; got != want {
		t.Fatalf("429 body %q, want %q", got, want)
	}
}

func testDryRun(t *testing.T, a Adapter) {
	var wouldDeny atomic.Int64
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		if d.Outcome == redlimit.OutcomeDryRun {
			wouldDeny.Add(1)
		}
	})
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), []redlimit.Option{redlimit.WithDryRun(), observe}}})
	for i := 0; i < 3; i++ {
		expect(t, "dry run", req{}.send(h), http.StatusOK, "X-RateLimit-Limit", "", "Retry-After", "")
	}
	if got := wouldDeny.Load(); got != 2 {
		t.Fatalf("dry run reported %d would-be denials, want 2", got)
	}
}

func testMissingKey(t *testing.T, a Adapter) {
	key := redlimit.WithKey(keyfunc.Header("X-Api-Key"))
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), []redlimit.Option{key}}})
	expect(t, "no key", req{}.send(h), http.StatusBadRequest, "X-RateLimit-Limit", "")
	expect(t, "with a key", req{headers: []string{"X-Api-Key", "k"}}.send(h), http.StatusOK)
	expect(t, "same key again", req{headers: []string{"X-Api-Key", "k"}}.send(h), http.StatusTooManyRequests)
}

// testMissingKeyLogged: a request answered 400 for want of a key is
// logged, at warn level, with the policy and the key function's error, at
// most once a second per policy, saying how many were left out.
func testMissingKeyLogged(t *testing.T, a Adapter) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lim, _ := embeddedRedis(t, core.WithLogger(log))
	opts := []redlimit.Option{redlimit.WithName("keyed"), redlimit.WithKey(keyfunc.Header("X-Api-Key"))}
	h := build(t, a, Spec{Limiter: lim, Global: &Mw{core.PerMinute(100), opts}})
	for i := 0; i < 5; i++ {
		expect(t, "no key", req{}.send(h), http.StatusBadRequest)
	}
	lines := buf.lines()
	if len(lines) != 1 {
		t.Fatalf("%d log lines for 5 requests without a key in a second, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, want := range []string{"level=WARN", "policy=keyed", "status=400", "header X-Api-Key is missing", "requests_not_logged=0"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q does not say %q", lines[0], want)
		}
	}
	// A second later, the next one is logged with how many were not.
	time.Sleep(1100 * time.Millisecond)
	expect(t, "no key, a second later", req{}.send(h), http.StatusBadRequest)
	if lines = buf.lines(); len(lines) != 2 || !strings.Contains(lines[1], "requests_not_logged=4") {
		t.Fatalf("log after a second: %q, want a second line saying requests_not_logged=4", lines)
	}
	expect(t, "with a key: not logged", req{headers: []string{"X-Api-Key", "k"}}.send(h), http.StatusOK)
	if lines = buf.lines(); len(lines) != 2 {
		t.Fatalf("a request with a key was logged: %q", lines)
	}
}

// syncBuffer is a log's output, safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines written so far.
func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(b.buf.String()), "\n")
}

// testContextUser: an app whose earlier middleware stores the signed-in
// user in the framework's context (c.Set("user", id)) limits per user with
// the adapter's key function, whatever address the user comes from; a
// request without a user is answered 400, never let through.
func testContextUser(t *testing.T, a Adapter) {
	var keys sync.Map
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) { keys.Store(d.Key, true) })
	perUser := []redlimit.Option{redlimit.WithName("per-user"), redlimit.WithKey(a.UserKey("user")), observe}
	h := build(t, a, Spec{Limiter: Embedded(t), StoreUser: "user", Global: &Mw{core.PerMinute(2), perUser}})
	alice, bob := []string{"X-User", "alice"}, []string{"X-User", "bob"}
	expect(t, "alice", req{remote: "198.51.100.1:1", headers: alice}.send(h), http.StatusOK, "X-RateLimit-Remaining", "1")
	expect(t, "alice from elsewhere", req{remote: "198.51.100.2:1", headers: alice}.send(h), http.StatusOK, "X-RateLimit-Remaining", "0")
	expect(t, "alice's third", req{remote: "198.51.100.3:1", headers: alice}.send(h), http.StatusTooManyRequests)
	expect(t, "bob from alice's address", req{remote: "198.51.100.1:1", headers: bob}.send(h), http.StatusOK, "X-RateLimit-Remaining", "1")
	expect(t, "nobody", req{}.send(h), http.StatusBadRequest, "X-RateLimit-Limit", "")
	if _, ok := keys.Load("user:alice"); !ok {
		t.Errorf("no decision keyed user:alice")
	}
	// On a route's own middleware, and in a rules table.
	login := []redlimit.Option{redlimit.WithName("login"), redlimit.WithKey(a.UserKey("user"))}
	h = build(t, a, Spec{Limiter: Embedded(t), StoreUser: "user", Login: &Mw{core.PerMinute(1), login},
		Rules: redlimit.Rules{"GET /users/{id}": "1/m"}, RulesOpts: login[1:]})
	for _, who := range [][]string{alice, bob} {
		expect(t, who[1]+"'s login", req{method: http.MethodPost, path: "/login", headers: who}.send(h), http.StatusOK)
		expect(t, who[1]+"'s second login", req{method: http.MethodPost, path: "/login", headers: who}.send(h), http.StatusTooManyRequests)
		expect(t, who[1]+"'s user page", req{path: "/users/1", headers: who}.send(h), http.StatusOK)
		expect(t, who[1]+"'s second user page", req{path: "/users/2", headers: who}.send(h), http.StatusTooManyRequests)
	}
}

// testLongKeys: keys longer than 128 bytes are hashed; distinct long keys
// stay distinct and the same one keeps its count.
func testLongKeys(t *testing.T, a Adapter) {
	var keys sync.Map
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) { keys.Store(d.Key, true) })
	opts := []redlimit.Option{redlimit.WithKey(keyfunc.Header("X-Api-Key")), observe, redlimit.WithName("long")}
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), opts}})
	long := strings.Repeat("k", 5000)
	expect(t, "a long key", req{headers: []string{"X-Api-Key", long}}.send(h), http.StatusOK)
	expect(t, "again", req{headers: []string{"X-Api-Key", long}}.send(h), http.StatusTooManyRequests)
	expect(t, "another long key", req{headers: []string{"X-Api-Key", long + "x"}}.send(h), http.StatusOK)
	keys.Range(func(k, _ any) bool {
		if s := k.(string); len(s) > 100 || !strings.HasPrefix(s, "sha256:") {
			t.Errorf("key %q is not a hash", s)
		}
		return true
	})
}

func testForgedForwardedFor(t *testing.T, a Adapter) {
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{Limit: core.PerMinute(2)}})
	for i, forged := range []string{"198.51.100.1", "198.51.100.2"} {
		w := req{headers: []string{"X-Forwarded-For", forged, "X-Real-IP", forged}}.send(h)
		expect(t, "forged header", w, http.StatusOK, "X-RateLimit-Remaining", fmt.Sprint(1-i))
	}
	expect(t, "a third forged address", req{headers: []string{"X-Forwarded-For", "198.51.100.3"}}.send(h), http.StatusTooManyRequests)
}

func testTrustedProxies(t *testing.T, a Adapter) {
	key := redlimit.WithKey(keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")))
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), []redlimit.Option{key}}})
	viaProxy := func(client string) req {
		return req{remote: "10.0.0.1:5000", headers: []string{"X-Forwarded-For", "6.6.6.6, " + client}}
	}
	expect(t, "client A via the proxy", viaProxy("198.51.100.1").send(h), http.StatusOK)
	expect(t, "client B via the proxy", viaProxy("198.51.100.2").send(h), http.StatusOK)
	expect(t, "client A again", viaProxy("198.51.100.1").send(h), http.StatusTooManyRequests)
	// Not from the proxy: the header is ignored and the peer is the key.
	direct := req{remote: "198.51.100.9:1", headers: []string{"X-Forwarded-For", "198.51.100.3"}}
	expect(t, "direct, forged", direct.send(h), http.StatusOK)
	expect(t, "client C via the proxy is still fresh", viaProxy("198.51.100.3").send(h), http.StatusOK)
}

func testIPv6Grouping(t *testing.T, a Adapter) {
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{Limit: core.PerMinute(2)}})
	expect(t, "2001:db8::1", req{remote: "[2001:db8::1]:1"}.send(h), http.StatusOK)
	expect(t, "2001:db8::2, same /64", req{remote: "[2001:db8::2]:1"}.send(h), http.StatusOK)
	expect(t, "2001:db8::3, same /64", req{remote: "[2001:db8::3]:1"}.send(h), http.StatusTooManyRequests)
	expect(t, "another /64", req{remote: "[2001:db8:0:1::1]:1"}.send(h), http.StatusOK)
}

func testRouteKeys(t *testing.T, a Adapter) {
	key := redlimit.WithKey(keyfunc.Route())
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(2), []redlimit.Option{key}}})
	expect(t, "/users/1", req{path: "/users/1"}.send(h), http.StatusOK)
	expect(t, "/users/2 from elsewhere", req{path: "/users/2", remote: "198.51.100.1:1"}.send(h), http.StatusOK)
	expect(t, "/users/3: the same route", req{path: "/users/3"}.send(h), http.StatusTooManyRequests)
	expect(t, "/ping: another route", req{}.send(h), http.StatusOK)
}

func testPerRoute(t *testing.T, a Adapter) {
	h := build(t, a, Spec{Limiter: Embedded(t), Login: &Mw{Limit: core.PerMinute(2)}})
	for i := 0; i < 2; i++ {
		expect(t, "login", req{method: http.MethodPost, path: "/login"}.send(h), http.StatusOK)
	}
	expect(t, "login over the limit", req{method: http.MethodPost, path: "/login"}.send(h), http.StatusTooManyRequests)
	for i := 0; i < 5; i++ {
		expect(t, "another route is not limited", req{}.send(h), http.StatusOK, "X-RateLimit-Limit", "")
	}
}

// testPoliciesApart: a policy's state is its name's. Two routes with the
// same limit and default names share state; named apart, they are two
// policies with two states.
func testPoliciesApart(t *testing.T, a Adapter) {
	// Unnamed, two policies with the same limit share state; building the
	// app twice on one Limiter (a reload, a test helper) is no error.
	lim := Embedded(t)
	spec := Spec{Limiter: lim, Login: &Mw{Limit: core.PerHour(2)}, Users: &Mw{Limit: core.PerHour(2)}}
	build(t, a, spec)
	h := build(t, a, spec)
	expect(t, "unnamed login", req{method: http.MethodPost, path: "/login"}.send(h), http.StatusOK, "X-RateLimit-Remaining", "1")
	expect(t, "unnamed users shares its state", req{path: "/users/1"}.send(h), http.StatusOK, "X-RateLimit-Remaining", "0")

	h = build(t, a, Spec{Limiter: Embedded(t),
		Login: &Mw{core.PerHour(2), []redlimit.Option{redlimit.WithName("login")}},
		Users: &Mw{core.PerHour(2), []redlimit.Option{redlimit.WithName("users")}}})
	for i := 0; i < 2; i++ {
		expect(t, "login", req{method: http.MethodPost, path: "/login"}.send(h), http.StatusOK)
	}
	expect(t, "login over", req{method: http.MethodPost, path: "/login"}.send(h), http.StatusTooManyRequests)
	expect(t, "users has its own state", req{path: "/users/1"}.send(h), http.StatusOK, "X-RateLimit-Remaining", "1")
}

// testTwoPoliciesHeaders: when a global and a per-route limit both pass a
// request, X-RateLimit-* describe the more restrictive one, and the draft
// fields list both.
func testTwoPoliciesHeaders(t *testing.T, a Adapter) {
	login := req{method: http.MethodPost, path: "/login"}
	h := build(t, a, Spec{Limiter: Embedded(t),
		Global: &Mw{core.PerMinute(1), []redlimit.Option{redlimit.WithName("global")}},
		Login:  &Mw{core.PerMinute(5), []redlimit.Option{redlimit.WithName("login")}}})
	expect(t, "global 1/m, login 5/m", login.send(h), http.StatusOK,
		"X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "60")

	// The second policy denies after the first passed: the denier's
	// headers, matching its Retry-After.
	h = build(t, a, Spec{Limiter: Embedded(t),
		Global: &Mw{core.PerMinute(2), []redlimit.Option{redlimit.WithName("global")}},
		Login:  &Mw{core.PerHour(1), []redlimit.Option{redlimit.WithName("login")}}})
	login.send(h)
	expect(t, "login denies after global passed", login.send(h), http.StatusTooManyRequests,
		"X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "3600", "Retry-After", "3600")

	draft := []redlimit.Option{redlimit.WithHeaders(redlimit.HeadersDraft)}
	h = build(t, a, Spec{Limiter: Embedded(t),
		Global: &Mw{core.PerMinute(10), append(draft, redlimit.WithName("global"))},
		Login:  &Mw{core.PerMinute(5), append(draft, redlimit.WithName("login"))}})
	w := login.send(h)
	expect(t, "draft, two policies", w, http.StatusOK)
	if got := w.Header().Values("RateLimit"); strings.Join(got, ", ") != `"global";r=9;t=6, "login";r=4;t=12` {
		t.Fatalf("RateLimit %q, want one item per policy", got)
	}
	if got := w.Header().Values("RateLimit-Policy"); strings.Join(got, ", ") != `"global";q=10;w=60, "login";q=5;w=60` {
		t.Fatalf("RateLimit-Policy %q, want one item per policy", got)
	}
}

func testRules(t *testing.T, a Adapter) {
	rules := redlimit.Rules{"POST /login": "2/m", "GET /users/*": "3/m"}
	h := build(t, a, Spec{Limiter: Embedded(t), Rules: rules})
	login := req{method: http.MethodPost, path: "/login"}
	for i := 0; i < 2; i++ {
		expect(t, "login", login.send(h), http.StatusOK)
	}
	expect(t, "login over", login.send(h), http.StatusTooManyRequests)
	expect(t, "//login cannot dodge the rule", req{method: http.MethodPost, path: "//login"}.send(h), http.StatusTooManyRequests)
	for i := 1; i <= 3; i++ {
		expect(t, "users", req{path: fmt.Sprintf("/users/%d", i)}.send(h), http.StatusOK, "X-RateLimit-Limit", "3")
	}
	expect(t, "users over: one rule, whatever the id", req{path: "/users/4"}.send(h), http.StatusTooManyRequests)
	for i := 0; i < 5; i++ {
		expect(t, "no rule for /ping", req{}.send(h), http.StatusOK, "X-RateLimit-Limit", "")
	}
}

func testRulesErrors(t *testing.T, a Adapter) {
	lim := Embedded(t)
	for rule, says := range map[string]string{
		"GET /a/*/b":      "'*' may only end a pattern",
		"GET /api/*x":     "'*' may only end a pattern",
		"FETCH /{bad":     "",
		"GET /x sliding*": "",
	} {
		_, err := a.App(Spec{Limiter: lim, Rules: redlimit.Rules{rule: "5/m"}})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rule %q", rule)) || !strings.Contains(err.Error(), says) {
			t.Errorf("rule %q: error %v, want one naming the rule and saying %q", rule, err, says)
		}
	}
	_, err := a.App(Spec{Limiter: lim, Rules: redlimit.Rules{"POST /login": "5/m", "GET /ok": "0/s"}})
	if err == nil || !strings.Contains(err.Error(), `rule "GET /ok"`) || !strings.Contains(err.Error(), "rate 0 must be positive") {
		t.Errorf("bad limit: error %v, want one naming rule \"GET /ok\"", err)
	}
	_, err = a.App(Spec{Limiter: lim, Rules: redlimit.Rules{"/same": "5/m", "GET /same": "5/m", "/{x}": "1/s", "/{y}": "1/s"}})
	if err == nil || !strings.Contains(err.Error(), "conflicts") {
		t.Errorf("conflicting rules: error %v, want ServeMux's conflict, named", err)
	}
}

// testRulesHosts: a rule's host matches a request's host as a browser and
// DNS see it: in any case, with or without a trailing dot, on any port, so
// no spelling of the host dodges the rule, and every spelling shares its
// state; a pattern is matched the same whatever the spelling of its host.
// A pattern with a port, which would never match, is refused.
func testRulesHosts(t *testing.T, a Adapter) {
	lim := Embedded(t)
	h := build(t, a, Spec{Limiter: lim, Rules: redlimit.Rules{"api.example.com/login": "1/m"}})
	login := func(host string) req { return req{method: http.MethodPost, path: "/login", host: host} }
	expect(t, "api.example.com", login("api.example.com").send(h), http.StatusOK, "X-RateLimit-Remaining", "0")
	for _, host := range []string{"API.EXAMPLE.COM", "api.example.com.", "api.example.com:8080", "Api.Example.Com.:443"} {
		expect(t, host+" cannot dodge the rule", login(host).send(h), http.StatusTooManyRequests, "X-RateLimit-Limit", "1")
	}
	for _, host := range []string{"other.example.com", "api.example.org", "api.example.com.evil"} {
		expect(t, "no rule for "+host, login(host).send(h), http.StatusOK, "X-RateLimit-Limit", "")
	}
	// Another spelling of the pattern's host is the same rule, with the
	// same state: the client above has used this minute's request.
	h2 := build(t, a, Spec{Limiter: lim, Rules: redlimit.Rules{"API.Example.COM./login": "1/m"}})
	expect(t, "a pattern spelled otherwise shares the state", login("api.example.com").send(h2), http.StatusTooManyRequests)
	expect(t, "another client", req{method: http.MethodPost, path: "/login", host: "API.example.com", remote: "198.51.100.9:1"}.send(h2), http.StatusOK)

	for says, rules := range map[string]redlimit.Rules{
		"has a port": {"api.example.com:8080/login": "1/m"},
		"conflicts":  {"api.example.com/login": "1/m", "API.EXAMPLE.COM/login": "2/m"},
	} {
		if _, err := a.App(Spec{Limiter: lim, Rules: rules}); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("rules %v: error %v, want one saying %q", rules, err, says)
		}
	}
}

// testShaping: a shaping leaky bucket makes requests wait their Delay, and
// a client that leaves while queued is not served.
func testShaping(t *testing.T, a Adapter) {
	var mu sync.Mutex
	var delays []time.Duration
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		mu.Lock()
		defer mu.Unlock()
		delays = append(delays, d.Result.Delay)
	})
	limit := core.Limit{Algorithm: core.LeakyBucket, Rate: 20, Period: time.Second, Burst: 3, Shape: true}
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{limit, []redlimit.Option{observe}}})
	for i := 0; i < 3; i++ {
		expect(t, fmt.Sprintf("queued request %d", i), req{}.send(h), http.StatusOK)
	}
	expect(t, "queue full", req{}.send(h), http.StatusTooManyRequests)
	mu.Lock()
	got := fmt.Sprint(delays)
	mu.Unlock()
	if want := "[0s 50ms 100ms 0s]"; got != want {
		t.Fatalf("delays %s, want %s", got, want)
	}

	// A client that leaves while queued is not served. The context is
	// cancelled once Redis holds the request's place in the queue: while
	// the middleware waits its Delay of ten seconds (long, so that a loaded
	// machine cannot let the wait end first).
	m := miniredis.RunT(t)
	m.SetTime(t0)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	slow := core.Limit{Algorithm: core.LeakyBucket, Rate: 1, Period: 10 * time.Second, Burst: 2, Shape: true}
	h = build(t, a, Spec{Limiter: core.New(rdb, patient), Global: &Mw{slow, []redlimit.Option{redlimit.WithName("queue")}}})
	expect(t, "first in an empty queue", req{}.send(h), http.StatusOK)
	key := "redlimit:queue:{ip:203.0.113.7}:leaky_bucket:10s"
	level := m.HGet(key, "l")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if m.HGet(key, "l") != level {
				return
			}
		}
	}()
	expect(t, "queued, but the client left", req{ctx: ctx}.send(h), http.StatusServiceUnavailable)
}

// testFailurePolicies stops a real Redis under each failure policy.
func testFailurePolicies(t *testing.T, a Adapter) {
	for _, tt := range []struct {
		failure redlimit.Failure
		check   func(t *testing.T, h http.Handler)
	}{
		{redlimit.FailOpen, func(t *testing.T, h http.Handler) {
			for i := 0; i < 3; i++ {
				expect(t, "fail open", req{}.send(h), http.StatusOK, "X-RateLimit-Limit", "")
			}
		}},
		{redlimit.FailClosed, func(t *testing.T, h http.Handler) {
			w := req{}.send(h)
			expect(t, "fail closed", w, http.StatusServiceUnavailable, "Retry-After", "1", "X-RateLimit-Limit", "")
		}},
		{redlimit.FailLocal, func(t *testing.T, h http.Handler) {
			// 3/m, one used while Redis was up: the local limiter starts
			// afresh, as a limit that refills within a minute does (a longer
			// one admits only the outage's share: TestFailLocalQuota).
			for i := 0; i < 3; i++ {
				expect(t, "fail local", req{}.send(h), http.StatusOK, "X-RateLimit-Remaining", fmt.Sprint(2-i))
			}
			expect(t, "fail local, over", req{}.send(h), http.StatusTooManyRequests, "Retry-After", "20")
			expect(t, "fail local, another client", req{remote: "198.51.100.1:1"}.send(h), http.StatusOK)
		}},
	} {
		t.Run(tt.failure.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Standalone(t)
			errs := make(chan error, 10)
			opts := []redlimit.Option{redlimit.WithFailure(tt.failure), redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
				if d.Err == nil {
					return
				}
				select {
				case errs <- d.Err:
				default:
				}
			})}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			// patient: the first decision, on a Redis that is up, must not
			// fail for want of CPU. Those after Stop fail whatever the
			// timeout, once go-redis gives up dialling (connection refused).
			h := build(t, a, Spec{Limiter: core.New(rdb, patient), Global: &Mw{core.PerMinute(3), opts}})
			expect(t, "Redis up", req{}.send(h), http.StatusOK, "X-RateLimit-Remaining", "2")
			srv.Stop()
			tt.check(t, h)
			select {
			case err := <-errs:
				if err == nil {
					t.Fatal("nil error reported")
				}
			default:
				t.Fatal("no error reached the observer")
			}
		})
	}
}

// testSlowRedis: a Redis that accepts connections and never answers costs
// a request the timeout, not forever.
func testSlowRedis(t *testing.T, a Adapter) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Silent(t), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	errs := make(chan error, 1)
	opts := []redlimit.Option{redlimit.WithFailure(redlimit.FailClosed),
		redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) { errs <- d.Err })}
	h := build(t, a, Spec{Limiter: core.New(rdb, core.WithTimeout(50*time.Millisecond)), Global: &Mw{core.PerMinute(5), opts}})

	// The bound is the Limiter's: go-redis, as configured here, would
	// wait seconds (DialTimeout, ReadTimeout) for this server. So well under
	// those seconds means the timeout held; this is not a benchmark.
	start := time.Now()
	w := req{}.send(h)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the request waited %v for a silent Redis; the timeout is 50ms", took)
	}
	expect(t, "slow Redis", w, http.StatusServiceUnavailable)
	if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the timeout's DeadlineExceeded", err)
	}
}

// testInstances: several app instances, each with its own Redis client and
// limiter, share one limit exactly, on standalone Redis and on a cluster.
func testInstances(t *testing.T, a Adapter) {
	redistest.Servers(t, func(t *testing.T, newClient func() redis.UniversalClient) {
		const instances, clients, limit = 4, 4, 30
		mw := &Mw{core.PerHour(limit), []redlimit.Option{redlimit.WithName("shared")}}
		var apps []http.Handler
		for i := 0; i < instances; i++ {
			lim := core.New(newClient(), core.WithPrefix(t.Name()+":"), core.WithTimeout(5*time.Second))
			apps = append(apps, build(t, a, Spec{Limiter: lim, Global: mw}))
		}
		hammerApps(t, apps, instances*clients, 3*limit/clients, limit)
	})
}

// hammerApps sends /users/1 from clients goroutines, each `each` times, spread
// over the apps (app instances sharing a Redis), and checks that exactly
// limit were served and the rest, at least twice as many, denied.
func hammerApps(t *testing.T, apps []http.Handler, clients, each, limit int) {
	t.Helper()
	var ok, denied, other atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(app http.Handler) {
			defer wg.Done()
			for j := 0; j < each && time.Now().Before(deadline); j++ {
				switch (req{path: "/users/1"}).send(app).Code {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				default:
					other.Add(1)
				}
			}
		}(apps[i%len(apps)])
	}
	wg.Wait()
	if ok.Load() != int64(limit) || other.Load() != 0 || ok.Load()+denied.Load() < int64(2*limit) {
		t.Fatalf("%d instances: %d served, %d denied, %d other; want exactly %d served and the rest denied",
			len(apps), ok.Load(), denied.Load(), other.Load(), limit)
	}
}

// testWithAlso: a policy's limits are decided together: the first denial
// charges neither, the headers describe the binding limit, and the draft
// profile lists both.
func testWithAlso(t *testing.T, a Adapter) {
	lim, m := embeddedRedis(t, core.WithDenyCache(0))
	hourly := core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: time.Hour}
	opts := []redlimit.Option{redlimit.WithName("api"), redlimit.WithAlso(hourly), redlimit.WithHeaders(redlimit.HeadersBoth)}
	h := build(t, a, Spec{Limiter: lim, Global: &Mw{core.PerMinute(2), opts}})
	w := req{}.send(h)
	expect(t, "first", w, http.StatusOK, "X-RateLimit-Limit", "2", "X-RateLimit-Remaining", "1")
	if got := strings.Join(w.Header().Values("RateLimit-Policy"), ", "); got != `"api";q=2;w=60, "api-1h";q=3;w=3600` {
		t.Fatalf("RateLimit-Policy %q, want both limits", got)
	}
	if got := strings.Join(w.Header().Values("RateLimit"), ", "); got != `"api";r=1;t=30, "api-1h";r=2;t=3600` {
		t.Fatalf("RateLimit %q, want both limits", got)
	}
	expect(t, "second", req{}.send(h), http.StatusOK, "X-RateLimit-Remaining", "0")
	expect(t, "the minute's limit denies", req{}.send(h), http.StatusTooManyRequests,
		"X-RateLimit-Limit", "2", "Retry-After", "30")
	m.SetTime(t0.Add(time.Minute))
	// Had the denial been charged to the hour's limit, it would deny now.
	expect(t, "a minute on: the hour's last", req{}.send(h), http.StatusOK, "X-RateLimit-Limit", "3", "X-RateLimit-Remaining", "0")
	expect(t, "the hour's limit denies", req{}.send(h), http.StatusTooManyRequests, "X-RateLimit-Limit", "3")
}

// testRulesCatchAll: the "*" rule applies to every request in the same
// decision as the matching rule: a request the route denies is charged to
// neither, and a request no rule matches is decided by "*" alone.
func testRulesCatchAll(t *testing.T, a Adapter) {
	rules := redlimit.Rules{"*": "4/m", "POST /login": "1/m, 5/h fixed_window"}
	h := build(t, a, Spec{Limiter: Embedded(t), Rules: rules, RulesOpts: []redlimit.Option{redlimit.WithHeaders(redlimit.HeadersBoth)}})
	login := req{method: http.MethodPost, path: "/login"}
	w := login.send(h)
	expect(t, "login", w, http.StatusOK, "X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0")
	if got := strings.Join(w.Header().Values("RateLimit"), ", "); got != `"*";r=3;t=15, "POST /login";r=0;t=60, "POST /login-1h";r=4;t=3600` {
		t.Fatalf("RateLimit %q, want the catch-all and both of the route's limits", got)
	}
	for i := 0; i < 3; i++ {
		expect(t, "login over its minute", login.send(h), http.StatusTooManyRequests, "X-RateLimit-Limit", "1")
	}
	// Three denied logins charged nothing: the catch-all has 3 left.
	expect(t, "ping, under the catch-all alone", req{}.send(h), http.StatusOK, "X-RateLimit-Limit", "4", "X-RateLimit-Remaining", "2")
	for i := 0; i < 2; i++ {
		expect(t, "ping", req{}.send(h), http.StatusOK)
	}
	expect(t, "ping over the catch-all", req{}.send(h), http.StatusTooManyRequests, "X-RateLimit-Limit", "4")
	if _, err := a.App(Spec{Limiter: Embedded(t), Rules: redlimit.Rules{"*": "1/m, 2/m"}}); err == nil || !strings.Contains(err.Error(), `rule "*"`) {
		t.Fatalf("a catch-all whose limits share state: %v, want an error naming the rule", err)
	}
}

// testRequestLimits: limits picked per request (a plan tier from a
// header): a tier whose rate differs keeps the state (a window's count; a
// GCRA key keeps its time instead); a request whose limits cannot be had
// is answered 400, never let through.
func testRequestLimits(t *testing.T, a Adapter) {
	tiers := map[string]core.Limit{
		"free": {Algorithm: core.FixedWindow, Rate: 2, Period: time.Hour},
		"pro":  {Algorithm: core.FixedWindow, Rate: 5, Period: time.Hour},
	}
	pick := redlimit.WithRequestLimits(func(r *http.Request) ([]core.Limit, error) {
		switch plan := r.Header.Get("X-Plan"); plan {
		case "":
			return nil, nil // the policy's own
		case "broken":
			return []core.Limit{{Rate: 0, Period: time.Hour}}, nil
		default:
			l, ok := tiers[plan]
			if !ok {
				return nil, fmt.Errorf("no plan %q", plan)
			}
			return []core.Limit{l}, nil
		}
	})
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerHour(1), []redlimit.Option{redlimit.WithName("plan"), pick}}})
	free, pro := req{headers: []string{"X-Plan", "free"}}, req{headers: []string{"X-Plan", "pro"}}
	expect(t, "free", free.send(h), http.StatusOK, "X-RateLimit-Limit", "2", "X-RateLimit-Remaining", "1")
	expect(t, "free", free.send(h), http.StatusOK, "X-RateLimit-Remaining", "0")
	expect(t, "free, over", free.send(h), http.StatusTooManyRequests)
	expect(t, "upgraded: the state is kept", pro.send(h), http.StatusOK, "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "2")
	expect(t, "no plan: the policy's own limit", req{remote: "198.51.100.1:1"}.send(h), http.StatusOK, "X-RateLimit-Limit", "1")
	expect(t, "an unknown plan", req{headers: []string{"X-Plan", "gold"}}.send(h), http.StatusBadRequest)
	expect(t, "a plan with an invalid limit", req{headers: []string{"X-Plan", "broken"}}.send(h), http.StatusBadRequest)
}

// testRequestLimitsCost: a cost is checked against the limits a request
// is decided by: limits picked per request whose burst is below WithCost's
// n could never admit it, and the request is answered 400 with a body
// that says so, logged at error level and observed as a configuration
// error (core.ErrInvalidCost), never 429 with a Retry-After of forever.
func testRequestLimitsCost(t *testing.T, a Adapter) {
	var buf syncBuffer
	lim, _ := embeddedRedis(t, core.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	var mu sync.Mutex
	var decided []redlimit.Decision
	opts := []redlimit.Option{
		redlimit.WithName("tiers"), redlimit.WithCost(5),
		redlimit.WithRequestLimits(func(r *http.Request) ([]core.Limit, error) {
			if r.Header.Get("X-Plan") == "small" {
				return []core.Limit{core.PerMinute(2)}, nil
			}
			return nil, nil
		}),
		redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
			mu.Lock()
			defer mu.Unlock()
			decided = append(decided, d)
		}),
	}
	h := build(t, a, Spec{Limiter: lim, Global: &Mw{core.PerMinute(10), opts}})
	expect(t, "the policy's own limit", req{}.send(h), http.StatusOK, "X-RateLimit-Remaining", "5")
	small := req{headers: []string{"X-Plan", "small"}}
	for i := 0; i < 2; i++ {
		w := small.send(h)
		expect(t, "a cost of 5 under 2/m", w, http.StatusBadRequest, "Retry-After", "", "X-RateLimit-Limit", "")
		if got, want := w.Body.String(), `{"error":"request costs more than its rate limit allows"}`+"\n"; got != want {
			t.Fatalf("400 body %q, want %q", got, want)
		}
	}
	mu.Lock()
	last := decided[len(decided)-1]
	mu.Unlock()
	if last.Outcome != redlimit.OutcomeInvalid || last.Status != http.StatusBadRequest || !errors.Is(last.Err, core.ErrInvalidCost) ||
		!strings.Contains(fmt.Sprint(last.Err), "WithCost(5) is above the burst 2 of the limits the request is decided by (2/m)") {
		t.Fatalf("observed %+v; want OutcomeInvalid, 400 and an error wrapping core.ErrInvalidCost that names the cost and the limits", last)
	}
	lines := buf.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "level=ERROR") || !strings.Contains(lines[0], "configuration error") || !strings.Contains(lines[0], "policy=tiers") {
		t.Fatalf("log %q; want one error line saying it is a configuration error", lines)
	}
	expect(t, "nothing was charged", req{}.send(h), http.StatusOK, "X-RateLimit-Remaining", "0")
}

// testInstancesOneDecision: app instances share a rules table with a
// catch-all of one algorithm and a route with two limits of others, on
// every real backend. Exactly the binding limit's allowance is served, the
// other limits are charged for served requests only, and on a cluster all
// of one client's state, under every rule and limit, is in one slot.
func testInstancesOneDecision(t *testing.T, a Adapter) {
	redistest.Servers(t, func(t *testing.T, newClient func() redis.UniversalClient) {
		const instances, clients, limit = 4, 8, 20
		rules := redlimit.Rules{"*": "1000/h fixed_window", "GET /users/*": "20/h, 500/h sliding_log"}
		prefix := t.Name() + ":"
		var apps []http.Handler
		for i := 0; i < instances; i++ {
			lim := core.New(newClient(), core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
			apps = append(apps, build(t, a, Spec{Limiter: lim, Rules: rules}))
		}
		hammerApps(t, apps, instances*clients, 3*limit/clients+1, limit)
		// The catch-all was charged for the served requests only.
		expect(t, "ping", req{}.send(apps[0]), http.StatusOK, "X-RateLimit-Remaining", fmt.Sprint(1000-limit-1))

		cc, isCluster := newClient().(*redis.ClusterClient)
		if !isCluster {
			return
		}
		ctx := context.Background()
		var mu sync.Mutex
		slots := map[int64][]string{}
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			keys, err := c.Keys(ctx, prefix+"*").Result()
			for _, k := range keys {
				slot := cc.ClusterKeySlot(ctx, k).Val()
				mu.Lock()
				slots[slot] = append(slots[slot], k)
				mu.Unlock()
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(slices.Concat(slices.Collect(maps.Values(slots))...)); len(slots) != 1 || n != 3 {
			t.Fatalf("one client's state is in %d slots, %d keys: %v; want one slot, 3 keys", len(slots), n, slots)
		}
	})
}

// testDraftHeaders: the IETF draft's fields (draft-ietf-httpapi-ratelimit-
// headers-10) as its text says: valid structured-field lists; w a whole
// number of seconds, q scaled to it (3 per 500ms is q=6;w=1); the burst as
// a vendor parameter; t the seconds until more quota is available (not
// until the whole allowance is back), never later than Retry-After on a
// 429; pk a keyed hash of the key, never the address.
func testDraftHeaders(t *testing.T, a Adapter) {
	testDraftPolicy(t, a)
	testDraftSubSecond(t, a)
	testDraftBeforeRetryAfter(t, a)
	testDraftPartitionKey(t, a)
}

// draftList parses w's field as a structured-field list, ending the test
// if it is not one.
func draftList(t *testing.T, what string, w *httptest.ResponseRecorder, field string) httpsfv.List {
	t.Helper()
	l, err := httpsfv.UnmarshalList(w.Header().Values(field))
	if err != nil {
		t.Fatalf("%s: %s %q is not a structured-field list: %v", what, field, w.Header().Values(field), err)
	}
	return l
}

// draftParam returns the parameter name of l's i-th item, nil if absent.
func draftParam(l httpsfv.List, i int, name string) any {
	v, _ := l[i].(httpsfv.Item).Params.Get(name)
	return v
}

// testDraftPolicy: a GCRA of 3 a minute, bursts of 5, more quota every
// 20 s: the policy's q, w and burst, r and t, as lists, on a 429 too.
func testDraftPolicy(t *testing.T, a Adapter) {
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.Limit{Rate: 3, Period: time.Minute, Burst: 5},
		[]redlimit.Option{redlimit.WithName("g"), redlimit.WithHeaders(redlimit.HeadersDraft)}}})
	w := req{}.send(h)
	expect(t, "first", w, http.StatusOK, "RateLimit-Policy", `"g";q=3;w=60;redlimit-burst=5`, "RateLimit", `"g";r=4;t=20`)
	draftList(t, "first", w, "RateLimit-Policy")
	draftList(t, "first", w, "RateLimit")
	for i := 0; i < 4; i++ {
		req{}.send(h)
	}
	w = req{}.send(h)
	expect(t, "denied", w, http.StatusTooManyRequests, "RateLimit", `"g";r=0;t=20`, "Retry-After", "20")
}

// testDraftSubSecond: sub-second periods scale to a whole-second window.
func testDraftSubSecond(t *testing.T, a Adapter) {
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.Limit{Rate: 3, Period: 500 * time.Millisecond},
		[]redlimit.Option{redlimit.WithName("fast"), redlimit.WithHeaders(redlimit.HeadersDraft)}}})
	w := req{}.send(h)
	if l := draftList(t, "3/500ms", w, "RateLimit-Policy"); draftParam(l, 0, "q") != int64(6) || draftParam(l, 0, "w") != int64(1) {
		t.Fatalf("3/500ms: RateLimit-Policy %q, want q=6;w=1", w.Header().Get("RateLimit-Policy"))
	}
}

// testDraftBeforeRetryAfter: a token bucket whose burst is spent but
// refills fast, beside a quota that refills in an hour: on the 429, each
// t is at most Retry-After; the hour's would not be, so it is left out.
func testDraftBeforeRetryAfter(t *testing.T, a Adapter) {
	hourly := core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: time.Hour}
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.Limit{Algorithm: core.TokenBucket, Rate: 1, Period: time.Second, Burst: 2},
		[]redlimit.Option{redlimit.WithName("tb"), redlimit.WithAlso(hourly), redlimit.WithHeaders(redlimit.HeadersDraft)}}})
	req{}.send(h)
	req{}.send(h)
	w := req{}.send(h)
	expect(t, "the bucket denies", w, http.StatusTooManyRequests, "Retry-After", "1")
	l := draftList(t, "denied", w, "RateLimit")
	if len(l) != 2 || draftParam(l, 0, "t") != int64(1) || draftParam(l, 1, "t") != nil || draftParam(l, 1, "r") != int64(98) {
		t.Fatalf("RateLimit %q: want the bucket's t=1 and the quota's r=98 without t", w.Header().Values("RateLimit"))
	}
}

// testDraftPartitionKey: pk is a keyed hash, the same for one client,
// different for another, never the address itself.
func testDraftPartitionKey(t *testing.T, a Adapter) {
	secret := redlimit.WithPartitionKey([]byte("0123456789abcdef-secret"))
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(10),
		[]redlimit.Option{redlimit.WithName("pk"), redlimit.WithHeaders(redlimit.HeadersDraft), secret}}})
	pk := func(remote string) []byte {
		w := req{remote: remote}.send(h)
		v, ok := draftParam(draftList(t, "pk", w, "RateLimit"), 0, "pk").([]byte)
		if !ok || len(v) != 12 {
			t.Fatalf("pk %v in %q, want 12 bytes", v, w.Header().Values("RateLimit"))
		}
		return v
	}
	first, again, other := pk("203.0.113.7:1"), pk("203.0.113.7:2"), pk("198.51.100.1:1")
	if string(first) != string(again) || string(first) == string(other) || strings.Contains(string(first), "203.0.113.7") {
		t.Fatalf("pk %x, %x (same client), %x (another): want equal for one client, different for another", first, again, other)
	}
}

// testProblemDetails: with WithProblemDetails, a denial is an RFC 9457
// problem of the draft's quota-exceeded type naming the policies that
// denied; other answers are about:blank problems.
func testProblemDetails(t *testing.T, a Adapter) {
	problem := redlimit.WithProblemDetails()
	hourly := core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: time.Hour}
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), []redlimit.Option{redlimit.WithName("api"), redlimit.WithAlso(hourly), problem}}})
	req{}.send(h)
	w := req{}.send(h)
	// Both deny; the binding one waits longest.
	expect(t, "denied", w, http.StatusTooManyRequests, "Content-Type", "application/problem+json", "Retry-After", "3600")
	var body struct {
		Type, Title string
		Status      int
		Violated    []string `json:"violated-policies"`
		RetryAfter  int64    `json:"retry_after"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("problem body %q: %v", w.Body.String(), err)
	}
	if body.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || body.Status != 429 || fmt.Sprint(body.Violated) != "[api api-1h]" || body.RetryAfter != 3600 || body.Title == "" {
		t.Fatalf("problem %+v from %q", body, w.Body.String())
	}
	h = build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), []redlimit.Option{redlimit.WithKey(keyfunc.Header("X-Api-Key")), problem}}})
	w = req{}.send(h)
	expect(t, "no key", w, http.StatusBadRequest, "Content-Type", "application/problem+json")
	if !strings.Contains(w.Body.String(), `"type":"about:blank"`) || !strings.Contains(w.Body.String(), `"status":400`) {
		t.Fatalf("400 problem %q", w.Body.String())
	}
}

// testRetryAfterJitter: clients denied at the same instant are told to
// come back at different seconds, never before their allowance is back,
// and the body says what the header says.
func testRetryAfterJitter(t *testing.T, a Adapter) {
	jitter := redlimit.WithRetryAfterJitter(20 * time.Second)
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), []redlimit.Option{jitter}}})
	seen := map[string]bool{}
	for i := 0; i < 40; i++ {
		r := req{remote: fmt.Sprintf("198.51.100.%d:1", i)}
		r.send(h)
		w := r.send(h)
		expect(t, "denied", w, http.StatusTooManyRequests)
		ra := w.Header().Get("Retry-After")
		n, err := strconv.Atoi(ra)
		if err != nil || n < 60 || n > 80 {
			t.Fatalf("Retry-After %q: want 60 to 80 (the 60 s the limit needs, plus up to 20)", ra)
		}
		if !strings.Contains(w.Body.String(), `"retry_after":`+ra+"}") {
			t.Fatalf("body %q does not say Retry-After %s", w.Body.String(), ra)
		}
		seen[ra] = true
	}
	if len(seen) < 5 {
		t.Fatalf("40 clients denied together were told %d different Retry-After values: %v", len(seen), seen)
	}
}

// testResetUnix: WithResetUnix sends X-RateLimit-Reset as a Unix time.
func testResetUnix(t *testing.T, a Adapter) {
	h := build(t, a, Spec{Limiter: Embedded(t), Global: &Mw{core.PerMinute(1), []redlimit.Option{redlimit.WithResetUnix()}}})
	before := time.Now()
	w := req{}.send(h)
	reset, err := strconv.ParseInt(w.Header().Get("X-RateLimit-Reset"), 10, 64)
	if err != nil || reset < before.Add(60*time.Second).Unix() || reset > time.Now().Add(61*time.Second).Unix() {
		t.Fatalf("X-RateLimit-Reset %q, want the Unix time a minute from now", w.Header().Get("X-RateLimit-Reset"))
	}
}

// Bench measures one request through the app with a global limit ("limited")
// and without it ("bare"), on a real redis-server, so that the difference
// is the middleware's own cost: allocations and time per request.
func Bench(b *testing.B, a Adapter) {
	lim := core.New(redistest.Standalone(b).Client(b))
	limit := core.Limit{Rate: 1_000_000_000, Period: time.Second} // never denies
	for _, c := range []struct {
		name string
		spec Spec
	}{
		{"bare", Spec{Limiter: lim}},
		{"limited", Spec{Limiter: lim, Global: &Mw{limit, []redlimit.Option{redlimit.WithName("bench")}}}},
	} {
		h := build(b, a, c.spec) // once: b.Run calls its function more than once
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/users/1", nil)
			r.RemoteAddr = "203.0.113.7:40000"
			w := &discard{header: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clear(w.header)
				r.Pattern = ""
				h.ServeHTTP(w, r)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}

// discard is a ResponseWriter that keeps only the status, reused across
// requests so that it allocates nothing itself.
type discard struct {
	header http.Header
	status int
}

// Header returns the reused header map.
func (d *discard) Header() http.Header { return d.header }

// WriteHeader records the status.
func (d *discard) WriteHeader(code int) { d.status = code }

// Write discards p, recording 200 if no status was written.
func (d *discard) Write(p []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	return len(p), nil
}
