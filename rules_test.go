package redlimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
)

func TestParseRules(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		doc  string
		want redlimit.Rules
	}{
		{`{"POST /login": "5/m", "GET /api/*": "100/s"}`, redlimit.Rules{"POST /login": "5/m", "GET /api/*": "100/s"}},
		{" \n\t{\"/\": \"1000/m\"}\n ", redlimit.Rules{"/": "1000/m"}},
		{`{"GET \/users\/{id}": "3/m sliding_log", "/x\u00e9": "1/s"}`, redlimit.Rules{"GET /users/{id}": "3/m sliding_log", "/xé": "1/s"}},
	} {
		got, err := redlimit.ParseRules([]byte(tt.doc))
		if err != nil || !maps.Equal(got, tt.want) {
			t.Errorf("ParseRules(%s) = %v, %v; want %v", tt.doc, got, err, tt.want)
		}
	}
}

// TestParseRulesNoLimit: a document that would leave every request
// unlimited, or that is not a table of pattern to limit string, is an
// error that says what is wrong.
func TestParseRulesNoLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ doc, says string }{
		{`null`, "got null"},
		{` null `, "got null"},
		{`[]`, "got an array"},
		{`[{"/x": "5/m"}]`, "got an array"},
		{`""`, "got a string"},
		{`"5/m"`, "got a string"},
		{`5`, "got a number"},
		{`-1.5e3`, "got a number"},
		{`true`, "got a boolean"},
		{``, "empty document"},
		{" \n\t", "empty document"},
		{`{}`, "no rules"},
		{` { } `, "no rules"},
		{`{"/x": ""}`, `rule "/x": ` + core.ErrInvalidLimit.Error() + `: empty limit`},
		{`{"/x": "  "}`, `rule "/x": ` + core.ErrInvalidLimit.Error() + `: empty limit`},
		{`{"/x": null}`, `rule "/x": the limit must be a string, not null`},
		{`{"/x": 5}`, `rule "/x": the limit must be a string, not 5`},
		{`{"/x": {"rate": 5}}`, `rule "/x": the limit must be a string`},
		{`{"/x": ["5/m"]}`, `rule "/x": the limit must be a string`},
		{`{"/x": "5/m"`, "want a JSON object"},
		{`{"/x" "5/m"}`, "want a JSON object"},
		{`{"/x": "5/m",}`, "want a JSON object"},
		{`{"/x": "5/m"} {"/y": "1/s"}`, "after the rules object"},
		{`{"/x": "5/m"} garbage`, "after the rules object"},
		{`{"/x": "5/m"}]`, "after the rules object"},
	} {
		rules, err := redlimit.ParseRules([]byte(tt.doc))
		if !isRulesError(err) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ParseRules(%s) = %v, %v; want an ErrInvalidRules error saying %q", tt.doc, rules, err, tt.says)
		}
		if rules != nil {
			t.Errorf("ParseRules(%s) returned rules %v with its error", tt.doc, rules)
		}
	}
	if _, err := redlimit.ParseRules([]byte(`{"/x": ""}`)); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("an empty limit string: error %v does not wrap core.ErrInvalidLimit", err)
	}
}

// TestParseRulesDuplicates: a pattern given twice is an error naming it,
// not the last one silently winning, however it is spelled in JSON.
func TestParseRulesDuplicates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ doc, pattern string }{
		{`{"/a": "5/m", "/a": "10/m"}`, "/a"},
		{`{"/a": "5/m", "/b": "1/s", "/a": "5/m"}`, "/a"},
		{`{"/b": "1/s", "/a": "5/m", "\/a": "10/m"}`, "/a"},
		{`{"GET /a": "5/m", "GET /\u0061": "10/m"}`, "GET /a"},
		{`{"POST /login": "5/m", "/": "1/s", "/": "1/s"}`, "/"},
	} {
		rules, err := redlimit.ParseRules([]byte(tt.doc))
		if !isRulesError(err) || !strings.Contains(err.Error(), `pattern "`+tt.pattern+`" is given twice`) {
			t.Errorf("ParseRules(%s) = %v, %v; want an ErrInvalidRules error naming pattern %q", tt.doc, rules, err, tt.pattern)
		}
	}
}

// TestNewRuleSetNoLimit: a table built in Go is held to the same rules as
// one parsed from JSON: empty is an error, not a set that limits nothing.
func TestNewRuleSetNoLimit(t *testing.T) {
	t.Parallel()
	lim := core.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	for _, rules := range []redlimit.Rules{nil, {}} {
		rs, err := redlimit.NewRuleSet(lim, rules)
		if !isRulesError(err) || !strings.Contains(err.Error(), "no rules") {
			t.Errorf("NewRuleSet(%#v) = %v, %v; want an ErrInvalidRules error saying \"no rules\"", rules, rs, err)
		}
	}
	for _, spec := range []string{"", " "} {
		_, err := redlimit.NewRuleSet(lim, redlimit.Rules{"/ok": "1/s", "/x": spec})
		if !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), `rule "/x"`) {
			t.Errorf("NewRuleSet with limit %q: error %v, want an ErrInvalidLimit error naming rule \"/x\"", spec, err)
		}
	}
	if _, err := redlimit.NewRuleSet(lim, redlimit.Rules{"/x": "1/s"}); err != nil {
		t.Errorf("NewRuleSet with one rule: %v", err)
	}
}

func isRulesError(err error) bool { return errors.Is(err, redlimit.ErrInvalidRules) }

// badPatterns are patterns no request can match, each with what its error
// says: every one was accepted once and limited nothing.
var badPatterns = []struct{ pattern, says string }{
	{"get /search", `method "get": methods are case-sensitive and requests send "GET"`},
	{"Post /login", `method "Post": methods are case-sensitive and requests send "POST"`},
	{"FETCH /x", `unknown method "FETCH": one of GET, HEAD, POST`},
	{"GET /reports/:id", `":id" is gin's and echo's parameter syntax; rules use ServeMux's, "{id}"`},
	{"/users/:id/posts", `":id" is gin's and echo's parameter syntax`},
	{"GET /static/*filepath", `"*filepath" is gin's catch-all, written "{filepath...}" here`},
	{"GET /a/*/b", `'*' may only end a pattern`},
	{"GET /x/{id:[0-9]+}", `a wildcard with a regular expression (chi's, gorilla/mux's) is not ServeMux's; write "{id}"`},
	{"GET reports/{id}", `the path "reports/{id}" does not start with '/'`},
	{"reports", `no path: "reports" does not start with '/'`},
	{"GET", `no path: "GET" does not start with '/'`},
	{"", `no path`},
	{"GET //x", `an empty segment ("//")`},
	{"/a//b", `an empty segment ("//")`},
	{"/a/./b", `a "." segment: requests' paths are cleaned`},
	{"DELETE /a/../b", `a ".." segment`},
	{"GET /search?q=x", `a pattern has no query or fragment`},
	{"POST /login ", `white space around the pattern: a rule is named by its pattern, so it would keep its state apart from "POST /login"'s; write "POST /login"`},
	{" GET /x", `white space around the pattern`},
	{"localhost:8080/health", `host "localhost:8080" has a port: a request's host is matched without its port, so write "localhost" for every port`},
}

// TestRulesThatCannotMatch: ParseRules, NewRuleSet and Update refuse a
// pattern no request can match, with an ErrInvalidRules error naming the
// rule and saying why; Update keeps the old rules.
func TestRulesThatCannotMatch(t *testing.T) {
	t.Parallel()
	lim := core.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	rs, err := redlimit.NewRuleSet(lim, redlimit.Rules{"POST /login": "1/m"})
	if err != nil {
		t.Fatal(err)
	}
	app := nethttp.Middleware(rs)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	login := func() int {
		w := httptest.NewRecorder()
		app.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login", nil))
		return w.Code
	}
	if code := login(); code != http.StatusOK {
		t.Fatalf("first login: %d", code)
	}
	for _, tt := range badPatterns {
		rule := fmt.Sprintf("rule %q: ", tt.pattern)
		check := func(how string, err error) {
			t.Helper()
			if !isRulesError(err) || !strings.Contains(err.Error(), rule) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("%s of %q: %v; want an ErrInvalidRules error saying %q", how, tt.pattern, err, rule+"..."+tt.says)
			}
		}
		doc, _ := json.Marshal(map[string]string{"POST /ok": "1/s", tt.pattern: "5/m"})
		rules, err := redlimit.ParseRules(doc)
		if rules != nil {
			t.Errorf("ParseRules(%s) returned rules with its error", doc)
		}
		check("ParseRules", err)
		_, err = redlimit.NewRuleSet(lim, redlimit.Rules{"POST /ok": "1/s", tt.pattern: "5/m"})
		check("NewRuleSet", err)
		check("Update", rs.Update(redlimit.Rules{"POST /login": "100/m", tt.pattern: "5/m"}))
	}
	if code := login(); code != http.StatusTooManyRequests {
		t.Fatalf("after refused updates, a second login: %d, want 429 under the old rule", code)
	}
}

// TestRulesStillValid: what ServeMux reads and a request can match stays
// valid: wildcards, subtrees, hosts, every standard method.
func TestRulesStillValid(t *testing.T) {
	t.Parallel()
	lim := core.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	rules := redlimit.Rules{
		"*": "100/s", "/": "10/s", "/{$}": "1/s", "GET /users/{id}": "1/s", "/files/{path...}": "1/s",
		"GET /api/*": "1/s", "api.example.com/": "1/s", "localhost/health": "1/s", "HEAD /x": "1/s",
		"PUT /x": "1/s", "PATCH /x": "1/s", "DELETE /x": "1/s", "OPTIONS /x": "1/s", "PROPFIND /dav/": "1/s",
		"/v1/things:batchGet": "1/s", "/a/{x}/b/{$}": "1/s",
	}
	doc, _ := json.Marshal(rules)
	if _, err := redlimit.ParseRules(doc); err != nil {
		t.Errorf("ParseRules: %v", err)
	}
	if _, err := redlimit.NewRuleSet(lim, rules); err != nil {
		t.Errorf("NewRuleSet: %v", err)
	}
}

// rulesApp is a net/http app behind a rules table whose handlers answer
// 200 "ok", on a Limiter whose clock stands still.
func rulesApp(t *testing.T, rules redlimit.Rules, opts ...redlimit.Option) (*redlimit.RuleSet, func(method, path string) *httptest.ResponseRecorder) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithClock(func() time.Time { return t0 }), core.WithTimeout(10*time.Second))
	rs, err := redlimit.NewRuleSet(lim, rules, opts...)
	if err != nil {
		t.Fatal(err)
	}
	app := nethttp.Middleware(rs)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	return rs, func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = "192.0.2.1:1"
		app.ServeHTTP(w, r)
		return w
	}
}

// TestRuleSetUpdate: Update replaces the rules; a pattern whose limits
// keep their algorithm and period keeps its state (here a fixed window's
// count, the catch-all's too), a new pattern or a new algorithm starts
// afresh, and refused rules leave the old ones in place.
func TestRuleSetUpdate(t *testing.T) {
	t.Parallel()
	rs, send := rulesApp(t, redlimit.Rules{"*": "10/m fixed_window", "POST /login": "2/m fixed_window"})
	want := func(what string, w *httptest.ResponseRecorder, status int, limit, remaining string) {
		t.Helper()
		if w.Code != status || w.Header().Get("X-RateLimit-Limit") != limit || w.Header().Get("X-RateLimit-Remaining") != remaining {
			t.Fatalf("%s: %d, X-RateLimit-Limit %q, Remaining %q; want %d, %s, %s", what, w.Code,
				w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"), status, limit, remaining)
		}
	}
	want("login 1", send("POST", "/login"), http.StatusOK, "2", "1")
	want("login 2", send("POST", "/login"), http.StatusOK, "2", "0")
	want("login 3", send("POST", "/login"), http.StatusTooManyRequests, "2", "0")

	// The rate goes up: the minute's count of 2 stands, one more passes.
	if err := rs.Update(redlimit.Rules{"*": "10/m fixed_window", "POST /login": "3/m fixed_window"}); err != nil {
		t.Fatal(err)
	}
	want("login 3, after the update", send("POST", "/login"), http.StatusOK, "3", "0")
	want("login 4", send("POST", "/login"), http.StatusTooManyRequests, "3", "0")
	// The catch-all counted the three admitted logins.
	want("another path", send("GET", "/x"), http.StatusOK, "10", "6")

	// Refused: the old rules stay.
	if err := rs.Update(redlimit.Rules{"*": "10/m", "get /login": "1/m"}); !isRulesError(err) {
		t.Fatalf("Update with a lowercase method: %v", err)
	}
	if err := rs.Update(nil); !isRulesError(err) {
		t.Fatalf("Update(nil): %v", err)
	}
	if err := rs.Update(redlimit.Rules{"POST /login": "0/m"}); !errors.Is(err, core.ErrInvalidLimit) {
		t.Fatalf("Update with a bad limit: %v", err)
	}
	want("login after refused updates", send("POST", "/login"), http.StatusTooManyRequests, "3", "0")

	// Another algorithm, or another pattern, is another state; without a
	// catch-all, other paths pass unlimited.
	if err := rs.Update(redlimit.Rules{"POST /login": "3/m sliding_log", "POST /signin": "3/m fixed_window"}); err != nil {
		t.Fatal(err)
	}
	want("login, sliding log", send("POST", "/login"), http.StatusOK, "3", "2")
	want("signin", send("POST", "/signin"), http.StatusOK, "3", "2")
	want("another path, no catch-all", send("GET", "/x"), http.StatusOK, "", "")

	var zero redlimit.RuleSet
	if err := zero.Update(redlimit.Rules{"/": "1/s"}); err == nil {
		t.Fatal("Update of the zero RuleSet: no error")
	}
}

// TestRuleSetUpdateKeepsSlots: requests in flight hold their Concurrency
// slots across an Update that keeps the rule's lease, and free them when
// they end, under the old rule that admitted them.
func TestRuleSetUpdateKeepsSlots(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithTimeout(10*time.Second))
	rs, err := redlimit.NewRuleSet(lim, redlimit.Rules{"POST /work": "1 concurrent lease=30s"})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	app := nethttp.Middleware(rs)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	}))
	work := func(done chan<- int) {
		w := httptest.NewRecorder()
		app.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/work", nil))
		done <- w.Code
	}
	done := make(chan int, 3)
	go work(done)
	<-started
	if err := rs.Update(redlimit.Rules{"POST /work": "2 concurrent lease=30s"}); err != nil {
		t.Fatal(err)
	}
	go work(done)
	<-started // the second slot of two
	work(done)
	if code := <-done; code != http.StatusTooManyRequests {
		t.Fatalf("a third in flight after the update: %d, want 429 (the first holds its slot)", code)
	}
	release <- struct{}{}
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the first, admitted before the update: %d", code)
	}
	go work(done)
	<-started // the first freed its slot: admitted
	close(release)
	for i := 0; i < 2; i++ {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("request in flight: %d", code)
		}
	}
}

// TestRuleSetUpdateInFlight: requests decided while the rules are updated
// again and again (go test -race) are each limited by the old rules or by
// the new ones, never by a mix and never by none.
func TestRuleSetUpdateInFlight(t *testing.T) {
	t.Parallel()
	a := redlimit.Rules{"GET /a": "100000/s"}
	b := redlimit.Rules{"GET /a": "200000/s", "*": "300000/s"}
	rs, send := rulesApp(t, a)
	const workers, requests = 4, 100
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < requests && time.Now().Before(deadline); n++ {
				path, allowed := "/a", []string{"100000", "200000"}
				if n%2 == 1 {
					path, allowed = "/b", []string{"", "300000"} // no rule in a; the catch-all in b
				}
				w := send("GET", path)
				if got := w.Header().Get("X-RateLimit-Limit"); w.Code != http.StatusOK || !slices.Contains(allowed, got) {
					errs <- fmt.Errorf("GET %s: %d, X-RateLimit-Limit %q; want 200 and one of %q", path, w.Code, got, allowed)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	go func() { wg.Wait(); close(stop) }()
	updates := 0
	for running := true; running; updates++ {
		select {
		case <-stop:
			running = false
		default:
		}
		next := a
		if updates%2 == 0 {
			next = b
		}
		if err := rs.Update(next); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if updates < 2 {
		t.Errorf("%d updates while requests were in flight", updates)
	}
}
