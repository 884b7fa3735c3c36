package redlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// outcomes returns the policies and outcomes of decisions, "policy:outcome".
func outcomes(decisions []redlimit.Decision) []string {
	var s []string
	for _, d := range decisions {
		s = append(s, d.Policy+":"+string(d.Outcome))
	}
	return s
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDecisionsFrom: a handler finds the Decision of every policy that
// decided its request in the request's context, in the order they
// decided; an observer and a deny handler find those made so far, their
// own included; a request no policy decided has none; a Decision made in
// process (FailLocal) says so.
func TestDecisionsFrom(t *testing.T) {
	t.Parallel()
	lim, m := embedded(t)
	var observed []string
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		observed = outcomes(redlimit.DecisionsFrom(r.Context()))
	})
	var denied []string
	deny := redlimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d redlimit.Decision) {
		denied = outcomes(redlimit.DecisionsFrom(r.Context()))
		w.WriteHeader(http.StatusTooManyRequests)
	})
	policies := []redlimit.Policy{
		mustPolicy(t, lim, core.PerMinute(10), redlimit.WithName("global")),
		mustPolicy(t, lim, core.PerMinute(10), redlimit.WithName("login"), observe, redlimit.WithFailure(redlimit.FailLocal)),
		mustPolicy(t, lim, core.PerMinute(1), redlimit.WithName("user"), deny),
	}
	var handled []redlimit.Decision
	app := func(r *http.Request) {
		var serve func(i int, w http.ResponseWriter, r *http.Request) int
		serve = func(i int, w http.ResponseWriter, r *http.Request) int {
			if i == len(policies) {
				handled = redlimit.DecisionsFrom(r.Context())
				return http.StatusOK
			}
			redlimit.Serve(policies[i], w, r, func(w http.ResponseWriter, r *http.Request) int { return serve(i+1, w, r) })
			return 0
		}
		serve(0, httptest.NewRecorder(), r)
	}

	app(httptest.NewRequest(http.MethodGet, "/", nil))
	if got, want := outcomes(handled), []string{"global:allowed", "login:allowed", "user:allowed"}; !equal(got, want) {
		t.Fatalf("the handler found %v, want %v", got, want)
	}
	if got, want := observed, []string{"global:allowed", "login:allowed"}; !equal(got, want) {
		t.Fatalf("the second policy's observer found %v, want %v", got, want)
	}
	handled[0].Policy = "changed" // a copy: the record stays as it was
	app(httptest.NewRequest(http.MethodGet, "/", nil))
	if got, want := denied, []string{"global:allowed", "login:allowed", "user:denied"}; !equal(got, want) {
		t.Fatalf("the deny handler found %v, want %v", got, want)
	}

	m.Close() // Redis gone: the login policy decides in process, the others let it through
	handled = nil
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.2:1" // another client: the first one's denial is in the deny cache
	app(r)
	if got, want := outcomes(handled), []string{"global:error", "login:local", "user:error"}; !equal(got, want) {
		t.Fatalf("Redis down: the handler found %v, want %v", got, want)
	}
	if handled[1].Result.Remaining != 9 || handled[1].Err == nil {
		t.Fatalf("the local decision: %+v", handled[1])
	}

	if d := redlimit.DecisionsFrom(context.Background()); d != nil {
		t.Fatalf("a context no policy decided: %v, want nil", d)
	}
}

// TestDecisionsFromRequest: a protocol other than HTTP puts the record
// in the request's context (ContextWithDecisions) before ServeRequest,
// and hands that context to its handler, which finds every policy's
// Decision there; nested calls share one record.
func TestDecisionsFromRequest(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	key := redlimit.WithRequestKey(func(redlimit.Request) (string, error) { return "call", nil })
	outer := mustPolicy(t, lim, core.PerMinute(10), redlimit.WithName("outer"), key)
	inner := mustPolicy(t, lim, core.PerMinute(10), redlimit.WithName("inner"), key)
	ctx := redlimit.ContextWithDecisions(context.Background())
	if again := redlimit.ContextWithDecisions(ctx); again != ctx {
		t.Fatal("ContextWithDecisions of a context with a record: a new context, want the same")
	}
	var got []string
	q := redlimit.Request{Context: ctx, Method: http.MethodPost, Path: "/pkg.S/M"}
	redlimit.ServeRequest(outer, q, map[string][]string{}, func() int {
		redlimit.ServeRequest(inner, q, map[string][]string{}, func() int {
			got = outcomes(redlimit.DecisionsFrom(ctx))
			return http.StatusOK
		})
		return http.StatusOK
	})
	if want := []string{"outer:allowed", "inner:allowed"}; !equal(got, want) {
		t.Fatalf("the handler found %v, want %v", got, want)
	}
}
