package nethttp_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/redlimit/redlimit/internal/adaptertest"
	"github.com/redlimit/redlimit/nethttp"
)

// app builds the suite's app on a ServeMux: per-route middleware wraps the
// route's handler; the global one wraps every route's handler (so r.Pattern
// is set for route keys); a rules table wraps the whole mux.
func app(s adaptertest.Spec) (http.Handler, error) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mw := func(m *adaptertest.Mw) func(http.Handler) http.Handler {
		if m == nil {
			return func(h http.Handler) http.Handler { return h }
		}
		return nethttp.New(s.Limiter, m.Limit, m.Opts...)
	}
	global := mw(s.Global)
	mux := http.NewServeMux()
	mux.Handle("GET /ping", global(ok))
	mux.Handle("GET /users/{id}", global(mw(s.Users)(ok)))
	mux.Handle("POST /login", global(mw(s.Login)(ok)))
	if s.WorkHandler != nil {
		mux.Handle("POST /work", global(mw(s.Work)(s.WorkHandler)))
	}
	if s.Rules == nil {
		return mux, nil
	}
	rules, err := nethttp.Rules(s.Limiter, s.Rules, s.RulesOpts...)
	if err != nil {
		return nil, err
	}
	return rules(mux), nil
}

var adapter = adaptertest.Adapter{Name: "nethttp", App: app}

func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, adapter)
}

// BenchmarkMiddleware: go test ./nethttp -run X -bench . -benchmem; the
// middleware's cost is "limited" minus "bare".
func BenchmarkMiddleware(b *testing.B) { adaptertest.Bench(b, adapter) }
