package chilimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/chilimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/adaptertest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttp"
)

// storeKey is where the suite's StoreUser middleware puts the user in the
// request's context: chi has no store of its own.
type storeKey string

// userKey is the suite's UserKey for chi: keyfunc.ContextUser on the key
// the StoreUser middleware stores under.
func userKey(name string) keyfunc.Func { return keyfunc.ContextUser(storeKey(name)) }

// routes registers the suite's routes on r, with their own middleware
// (r.With), and the middleware of every route (r.Use) before them.
func routes(r chi.Router, s adaptertest.Spec) error {
	ok := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	if s.StoreUser != "" {
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if user := r.Header.Get("X-User"); user != "" {
					r = r.WithContext(context.WithValue(r.Context(), storeKey(s.StoreUser), user))
				}
				next.ServeHTTP(w, r)
			})
		})
	}
	if s.Rules != nil {
		rules, err := chilimit.Rules(s.Limiter, s.Rules, s.RulesOpts...)
		if err != nil {
			return err
		}
		r.Use(rules)
	}
	if s.Global != nil {
		r.Use(chilimit.New(s.Limiter, s.Global.Limit, s.Global.Opts...))
	}
	route := func(m *adaptertest.Mw) chi.Router {
		if m == nil {
			return r.With()
		}
		return r.With(chilimit.New(s.Limiter, m.Limit, m.Opts...))
	}
	r.Get("/ping", ok)
	route(s.Users).Get("/users/{id}", ok)
	route(s.Login).Post("/login", ok)
	if s.WorkHandler != nil {
		route(s.Work).Method(http.MethodPost, "/work", s.WorkHandler)
	}
	return nil
}

// app builds the suite's app on a chi router: global middleware and rules
// with r.Use, per-route middleware with r.With.
func app(s adaptertest.Spec) (http.Handler, error) {
	r := chi.NewRouter()
	return r, routes(r, s)
}

// mountedApp builds it in a subrouter mounted on "/" (r.Route), whose
// r.Use runs once the top router has routed the request to the mount,
// when chi's route pattern is only the mount's, "/*".
func mountedApp(s adaptertest.Spec) (http.Handler, error) {
	r := chi.NewRouter()
	var err error
	r.Route("/", func(sub chi.Router) { err = routes(sub, s) })
	return r, err
}

var adapter = adaptertest.Adapter{Name: "chi", App: app, UserKey: userKey}

func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, adapter)
}

func TestConformanceMounted(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, adaptertest.Adapter{Name: "chi, mounted", App: mountedApp, UserKey: userKey})
}

// BenchmarkMiddleware: go test ./chilimit -run X -bench . -benchmem; the
// middleware's cost is "limited" minus "bare".
func BenchmarkMiddleware(b *testing.B) { adaptertest.Bench(b, adapter) }

// seen is what a route's handler and the middleware saw of a request.
type seen struct {
	key                 string // the decision's key
	pattern, param, url string // the handler's r.Pattern, r.PathValue("id") and chi.URLParam(r, "id")
}

// TestRoutePattern: wherever the middleware is mounted (the top router,
// a subrouter of r.Route or r.Mount, nested subrouters, r.With, r.Group),
// its key functions see the route template and path values chi gives the
// handler, and the handler sees them as chi sets them. A request no route
// matches is keyed as unmatched and still answered 404 by chi.
func TestRoutePattern(t *testing.T) {
	t.Parallel()
	lim := adaptertest.Embedded(t)
	var mu sync.Mutex
	var got seen
	key := keyfunc.Join(keyfunc.Route(), func(r *http.Request) (string, error) { return "id=" + r.PathValue("id"), nil })
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		mu.Lock()
		defer mu.Unlock()
		got.key = d.Key
	})
	limit := chilimit.New(lim, core.PerSecond(1000), redlimit.WithKey(key), observe)
	handler := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got.pattern, got.param, got.url = r.Pattern, r.PathValue("id"), chi.URLParam(r, "id")
	}
	files := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

	top := chi.NewRouter()
	top.Use(limit)
	top.Get("/users/{id}", handler)
	top.Get("/static/*", handler)
	top.Mount("/files", files)
	top.Route("/api", func(r chi.Router) {
		r.Get("/", handler)
		r.Route("/v1", func(r chi.Router) { r.Get("/orders/{id}", handler) })
	})

	stripped := chi.NewRouter() // StripSlashes rewrites the path chi routes before routing
	stripped.Use(middleware.StripSlashes, limit)
	stripped.Get("/users/{id}", handler)

	route := chi.NewRouter()
	route.Route("/api", func(r chi.Router) {
		r.Use(limit)
		r.Get("/users/{id}", handler)
		r.Get("/", handler)
		r.Route("/v1", func(r chi.Router) {
			r.Use(limit)
			r.Get("/orders/{id}", handler)
		})
	})

	sub := chi.NewRouter()
	sub.Use(limit)
	sub.Get("/users/{id:[0-9]+}", handler)
	mount := chi.NewRouter()
	mount.Mount("/api", sub)

	with := chi.NewRouter()
	with.With(limit).Get("/users/{id}", handler)
	with.With(limit).Get("/static/*", handler)
	with.Group(func(r chi.Router) {
		r.Use(limit)
		r.Get("/orders/{id}", handler)
	})
	with.Route("/api", func(r chi.Router) { r.With(limit).Get("/users/{id}", handler) })

	for _, tt := range []struct {
		name         string
		router       http.Handler
		method, path string
		status       int
		want         seen
	}{
		{"top", top, "GET", "/users/7", 200, seen{"route:GET /users/{id}|id=7", "/users/{id}", "7", "7"}},
		{"top, a wildcard", top, "GET", "/static/css/a.css", 200, seen{"route:GET /static/*|id=", "/static/*", "", ""}},
		{"top, a mounted handler", top, "GET", "/files/a.txt", 200, seen{"route:GET /files/*|id=", "", "", ""}},
		{"top, a subrouter's root", top, "GET", "/api", 200, seen{"route:GET /api|id=", "/api", "", ""}},
		{"top, nested subrouters", top, "GET", "/api/v1/orders/9", 200, seen{"route:GET /api/v1/orders/{id}|id=9", "/api/v1/orders/{id}", "9", "9"}},
		{"top, no route", top, "GET", "/nowhere", 404, seen{key: "route:GET (unmatched)|id="}},
		{"top, no such method", top, "POST", "/users/7", 405, seen{key: "route:POST (unmatched)|id="}},
		{"top, after StripSlashes", stripped, "GET", "/users/7/", 200, seen{"route:GET /users/{id}|id=7", "/users/{id}", "7", "7"}},
		{"r.Route", route, "GET", "/api/users/7", 200, seen{"route:GET /api/users/{id}|id=7", "/api/users/{id}", "7", "7"}},
		{"r.Route, its root", route, "GET", "/api/", 200, seen{"route:GET /api|id=", "/api", "", ""}},
		{"r.Route in r.Route", route, "GET", "/api/v1/orders/9", 200, seen{"route:GET /api/v1/orders/{id}|id=9", "/api/v1/orders/{id}", "9", "9"}},
		{"r.Route, no route", route, "GET", "/api/nowhere", 404, seen{key: "route:GET /api/*|id="}},
		{"r.Mount, a regular expression", mount, "GET", "/api/users/7", 200, seen{"route:GET /api/users/{id:[0-9]+}|id=7", "/api/users/{id:[0-9]+}", "7", "7"}},
		{"r.With", with, "GET", "/users/7", 200, seen{"route:GET /users/{id}|id=7", "/users/{id}", "7", "7"}},
		{"r.With, a wildcard", with, "GET", "/static/a.css", 200, seen{"route:GET /static/*|id=", "/static/*", "", ""}},
		{"r.Group", with, "GET", "/orders/9", 200, seen{"route:GET /orders/{id}|id=9", "/orders/{id}", "9", "9"}},
		{"r.With in r.Route", with, "GET", "/api/users/7", 200, seen{"route:GET /api/users/{id}|id=7", "/api/users/{id}", "7", "7"}},
	} {
		got = seen{}
		w := httptest.NewRecorder()
		tt.router.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, nil))
		if w.Code != tt.status || got != tt.want {
			t.Errorf("%s: %s %s: %d, %+v; want %d, %+v", tt.name, tt.method, tt.path, w.Code, got, tt.status, tt.want)
		}
	}
}

// TestRouteKeysMounted: requests to one route share a key by route, and
// another route has its own, with the middleware on a subrouter.
func TestRouteKeysMounted(t *testing.T) {
	t.Parallel()
	lim := adaptertest.Embedded(t)
	r := chi.NewRouter()
	r.Route("/api", func(r chi.Router) {
		r.Use(chilimit.New(lim, core.PerMinute(1), redlimit.WithKey(keyfunc.Route())))
		r.Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {})
		r.Get("/orders/{id}", func(w http.ResponseWriter, r *http.Request) {})
	})
	for _, tt := range []struct {
		path   string
		status int
	}{{"/api/users/1", 200}, {"/api/users/2", 429}, {"/api/orders/1", 200}, {"/api/orders/2", 429}} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if w.Code != tt.status {
			t.Errorf("%s: %d, want %d", tt.path, w.Code, tt.status)
		}
	}
}

// TestOutsideChi: outside a chi router the middleware is nethttp's: a
// ServeMux's pattern stays.
func TestOutsideChi(t *testing.T) {
	t.Parallel()
	lim := adaptertest.Embedded(t)
	var key string
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) { key = d.Key })
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", chilimit.New(lim, core.PerMinute(5), redlimit.WithKey(keyfunc.Route()), observe)(http.NotFoundHandler()))
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/users/1", nil))
	if key != "route:GET /users/{id}" {
		t.Fatalf("key %q, want route:GET /users/{id}", key)
	}
}

// TestCheckRules: a rule that no route of the router can receive a
// request for is reported by name, as is a pattern in another router's
// syntax; rules that reach a route (in mounted subrouters too), the
// catch-all and host patterns pass.
func TestCheckRules(t *testing.T) {
	t.Parallel()
	h := func(w http.ResponseWriter, r *http.Request) {}
	r := chi.NewRouter()
	r.Use(middleware.RequestID)
	r.Get("/users/{id}", h)
	r.Post("/login", h)
	r.Get("/static/*", h)
	r.Head("/ping", h)
	r.Get("/files/{name}.{ext}", h)
	r.Get("/codes/{code:[A-Z]{3}}", h)
	r.Handle("/any", http.HandlerFunc(h))
	r.Mount("/assets", http.FileServer(http.Dir(".")))
	r.Route("/api/v1", func(r chi.Router) {
		r.Get("/", h)
		r.Put("/orders/{id}/items/{item}", h)
		r.Route("/admin", func(r chi.Router) { r.Delete("/users/{id}", h) })
	})
	r.Group(func(r chi.Router) { r.Patch("/profile", h) })

	for _, rules := range []redlimit.Rules{
		{"*": "100/s", "GET /users/{id}": "5/m", "POST /login": "1/m"},
		{"/users/alice": "1/s", "GET /users/*": "1/s", "/users/": "1/s"},
		{"GET /static/css/site.css": "1/s", "/static/{path...}": "1/s"},
		{"GET /ping": "1/s"}, // a GET pattern matches HEAD requests
		{"GET /files/{file}": "1/s", "GET /codes/USD": "1/s"},
		{"DELETE /any": "1/s", "GET /assets/logo.png": "1/s"},
		{"PUT /api/v1/orders/{id}/items/{item}": "1/s", "/api/*": "1/s", "/api/v1/orders/7/items/2": "1/s"},
		{"GET /api/v1": "1/s", "GET /api/v1/": "1/s", "DELETE /api/v1/admin/users/{id}": "1/s"},
		{"PATCH /profile": "1/s"},
		{"api.example.com/login": "1/s"},
	} {
		if err := chilimit.CheckRules(r, rules); err != nil {
			t.Errorf("CheckRules(%v): %v", rules, err)
		}
	}
	for _, tt := range []struct {
		rules redlimit.Rules
		says  string
	}{
		{redlimit.Rules{"GET /reports/{id}": "1/s", "*": "1/s"}, `rule "GET /reports/{id}": no route of the chi router matches`},
		{redlimit.Rules{"POST /users/{id}": "1/s", "GET /login": "1/s"}, `rules "GET /login", "POST /users/{id}": no route`},
		{redlimit.Rules{"GET /users": "1/s"}, `rule "GET /users": no route`},
		{redlimit.Rules{"GET /api/v1/admin/users/{id}": "1/s"}, `rule "GET /api/v1/admin/users/{id}": no route`},
		{redlimit.Rules{"GET /users/{id}/posts": "1/s"}, `rule "GET /users/{id}/posts": no route`},
		{redlimit.Rules{"HEAD /users/{id}": "1/s"}, `rule "HEAD /users/{id}": no route`},
		{redlimit.Rules{"GET /users/{id:[0-9]+}": "1/s"}, `"{id:[0-9]+}": a wildcard with a regular expression (chi's, gorilla/mux's) is not ServeMux's; write "{id}"`},
		{redlimit.Rules{"GET /users/:id": "1/s"}, `rule "GET /users/:id": ":id" is gin's and echo's parameter syntax`},
	} {
		err := chilimit.CheckRules(r, tt.rules)
		if !errors.Is(err, redlimit.ErrInvalidRules) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("CheckRules(%v) = %v; want an ErrInvalidRules error saying %q", tt.rules, err, tt.says)
		}
	}
	// A router without routes: every rule but the catch-all is unrouted.
	err := chilimit.CheckRules(chi.NewRouter(), redlimit.Rules{"*": "1/s", "GET /x": "1/s"})
	if !errors.Is(err, redlimit.ErrInvalidRules) || !strings.Contains(err.Error(), `rule "GET /x": no route`) {
		t.Errorf("CheckRules on an empty router = %v", err)
	}
}

// BenchmarkRoute: the cost of the route lookup, without Redis (the policy
// skips every request): chilimit against nethttp, which does none, on
// the top router of a chi app, for a route without and with a parameter.
// go test ./chilimit -run X -bench Route -benchmem.
func BenchmarkRoute(b *testing.B) {
	lim := core.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})) // never asked
	skip := redlimit.WithSkip(func(*http.Request) bool { return true })
	for _, c := range []struct {
		name string
		mw   func(http.Handler) http.Handler
	}{{"nethttp", nethttp.New(lim, core.PerSecond(1000), skip)}, {"chilimit", chilimit.New(lim, core.PerSecond(1000), skip)}} {
		r := chi.NewRouter()
		r.Use(c.mw)
		r.Get("/ping", func(w http.ResponseWriter, r *http.Request) {})
		r.Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {})
		for _, path := range []string{"/ping", "/users/1"} {
			b.Run(c.name+path, func(b *testing.B) {
				req := httptest.NewRequest(http.MethodGet, path, nil)
				w := httptest.NewRecorder()
				b.ReportAllocs()
				for b.Loop() {
					req.Pattern = ""
					r.ServeHTTP(w, req)
				}
			})
		}
	}
}
