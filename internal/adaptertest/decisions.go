package adaptertest

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// testDecisions: the handler finds every policy's Decision of its request
// in the request's context (redlimit.DecisionsFrom), in the order they
// decided, whatever the framework; an observer finds those made so far,
// its own last; and while Redis fails, a handler tells a decision made in
// process (FailLocal) from one let through (FailOpen).
func testDecisions(t *testing.T, a Adapter) {
	var mu sync.Mutex
	var observed string
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		mu.Lock()
		defer mu.Unlock()
		observed = decisionsOf(r)
	})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Decisions", decisionsOf(r))
		_, _ = w.Write([]byte("ok"))
	})
	lim, m := embeddedRedis(t)
	h := build(t, a, Spec{Limiter: lim, WorkHandler: handler,
		Global: &Mw{core.PerMinute(10), []redlimit.Option{redlimit.WithName("global"), redlimit.WithFailure(redlimit.FailLocal)}},
		Work:   &Mw{core.PerMinute(10), []redlimit.Option{redlimit.WithName("work"), observe}}})
	work := req{method: http.MethodPost, path: "/work"}
	expect(t, "two policies", work.send(h), http.StatusOK, "X-Decisions", "global:allowed:9 work:allowed:9")
	mu.Lock()
	if observed != "global:allowed:9 work:allowed:9" {
		t.Errorf("the second policy's observer found %q", observed)
	}
	mu.Unlock()

	m.Close() // the global policy decides in process, the work one lets the request through
	expect(t, "Redis down", work.send(h), http.StatusOK, "X-Decisions", "global:local:9 work:error:0")
}

// decisionsOf writes the Decisions of r's context as
// "policy:outcome:remaining ...".
func decisionsOf(r *http.Request) string {
	var s []string
	for _, d := range redlimit.DecisionsFrom(r.Context()) {
		s = append(s, d.Policy+":"+string(d.Outcome)+":"+strconv.Itoa(d.Result.Remaining))
	}
	return strings.Join(s, " ")
}
