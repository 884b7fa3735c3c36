package chilimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/chilimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

func ExampleNew() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}))
	ok := func(w http.ResponseWriter, r *http.Request) {}

	r := chi.NewRouter()
	r.Use(chilimit.New(lim, core.PerSecond(20))) // the whole router
	r.Route("/api", func(r chi.Router) {
		r.Use(chilimit.New(lim, core.PerSecond(100), redlimit.WithKey(keyfunc.Route()))) // a subrouter, per route
		r.Get("/orders/{id}", ok)
	})
	r.With(chilimit.New(lim, core.PerMinute(1))).Post("/login", ok) // one route

	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login", nil))
		fmt.Println(strings.TrimSpace(fmt.Sprint(w.Code, " ", w.Body.String())))
	}
	// Output:
	// 200
	// 429 {"error":"rate limit exceeded","retry_after":60}
}

// authUser is where the example's authentication puts the user.
type authUser struct{}

// chi has no per-request store: middleware puts values in the request's
// context, where keyfunc.ContextUser, and a tier function, find them.
func Example_contextUser() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}), core.WithLogger(slog.New(slog.DiscardHandler)))

	authenticate := func(next http.Handler) http.Handler { // your authentication: it stores the user's ID
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user := r.Header.Get("X-User"); user != "" {
				r = r.WithContext(context.WithValue(r.Context(), authUser{}, user))
			}
			next.ServeHTTP(w, r)
		})
	}
	r := chi.NewRouter()
	r.Use(authenticate, chilimit.New(lim, core.PerMinute(1), redlimit.WithKey(keyfunc.ContextUser(authUser{}))))
	r.Get("/orders", func(w http.ResponseWriter, r *http.Request) {})

	for _, user := range []string{"alice", "alice", "bob", ""} {
		req := httptest.NewRequest(http.MethodGet, "/orders", nil)
		req.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Printf("%q %d\n", user, w.Code)
	}
	// Output:
	// "alice" 200
	// "alice" 429
	// "bob" 200
	// "" 400
}

func ExampleCheckRules() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}))
	ok := func(w http.ResponseWriter, r *http.Request) {}

	rules := redlimit.Rules{"POST /login": "5/m", "GET /api/users/{id}": "10/s", "GET /reports/{id}": "1/s"}
	limits, err := chilimit.Rules(lim, rules)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := chi.NewRouter()
	r.Use(limits)
	r.Post("/login", ok)
	r.Route("/api", func(r chi.Router) { r.Get("/users/{id:[0-9]+}", ok) })
	if err := chilimit.CheckRules(r, rules); err != nil {
		fmt.Println(err)
	}
	// Output:
	// redlimit: invalid rules: rule "GET /reports/{id}": no route of the chi router matches
}
