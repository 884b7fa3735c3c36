// Command nethttp is a small net/http API behind redlimit, as a service
// behind a load balancer would have it: a limit per client address on
// every request, a stricter one on POST /login, and on /api a limit per
// signed-in user with a daily quota.
//
//	go run ./examples/nethttp            # on localhost:8080, limits in embedded Redis
//	curl -i localhost:8080/hello
//	curl -i -H 'Authorization: Bearer alice' localhost:8080/api/orders
//
// ADDR sets the address to listen on, REDIS_URL a real Redis to keep the
// limits in (REDIS_URL=redis://localhost:6379/0); -h says so.
package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/run"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttp"
)

// newApp builds the API. Every app instance whose Limiter uses the same
// Redis shares these limits.
func newApp(lim *core.Limiter) http.Handler {
	// Behind a load balancer in 10.0.0.0/8: the client is the address it
	// forwards in X-Forwarded-For. Nobody else's header is believed.
	perClient := redlimit.WithKey(keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")))
	// Password guessing: 5 attempts a minute per client, counted exactly.
	login := core.Limit{Algorithm: core.SlidingLog, Rate: 5, Period: time.Minute}
	// The API, per signed-in user: 10 a second, and a quota of 5000 a day
	// decided with it (a request either denies is charged to neither).
	// Both are announced to clients: X-RateLimit-* and the IETF draft's
	// RateLimit fields.
	daily := core.Limit{Algorithm: core.FixedWindow, Rate: 5000, Period: 24 * time.Hour}
	perUser := nethttp.New(lim, core.PerSecond(10), redlimit.WithName("api"), redlimit.WithAlso(daily),
		redlimit.WithKey(keyfunc.ContextUser(userKey{})), redlimit.WithHeaders(redlimit.HeadersBoth))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", hello)
	mux.Handle("POST /login", nethttp.New(lim, login, redlimit.WithName("login"), perClient)(http.HandlerFunc(signIn)))
	mux.Handle("GET /api/orders", authenticate(perUser(http.HandlerFunc(orders))))
	// Every request: 20 a second per client.
	return nethttp.New(lim, core.PerSecond(20), redlimit.WithName("global"), perClient)(mux)
}

// userKey is where authenticate puts the signed-in user's ID.
type userKey struct{}

// authenticate lets through requests with "Authorization: Bearer <user>"
// (a stand-in for real authentication), the user in their context, and
// answers the others 401.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || user == "" {
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	})
}

func hello(w http.ResponseWriter, r *http.Request)  { io.WriteString(w, "hello\n") }
func signIn(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "welcome\n") }
func orders(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "[]\n") }

// command is what -h says.
var command = run.Command{
	Path: "go run ./examples/nethttp",
	Doc: `A small net/http API behind redlimit: 20 requests a second per client
address on every route, 5 login attempts a minute on POST /login, and on
GET /api/orders 10 a second and 5000 a day per signed-in user
(Authorization: Bearer <user>). Behind a load balancer in 10.0.0.0/8, the
client is the address it forwards. It prints the curl commands to try it.`,
	Env: []string{run.Addr, run.RedisURL},
}

func main() {
	command.Parse()
	run.Serve("net/http", newApp)
}
