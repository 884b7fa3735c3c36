package echolimit_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/internal/adaptertest"
	"github.com/redlimit/redlimit/keyfunc"
)

// app builds the suite's app on an echo server: global middleware and rules
// with e.Use, per-route middleware as the route's middleware.
func app(s adaptertest.Spec) (http.Handler, error) {
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	e := echo.New()
	if s.StoreUser != "" {
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				if user := c.Request().Header.Get("X-User"); user != "" {
					c.Set(s.StoreUser, user)
				}
				return next(c)
			}
		})
	}
	if s.Rules != nil {
		rules, err := echolimit.Rules(s.Limiter, s.Rules, s.RulesOpts...)
		if err != nil {
			return nil, err
		}
		e.Use(rules)
	}
	if s.Global != nil {
		e.Use(echolimit.New(s.Limiter, s.Global.Limit, s.Global.Opts...))
	}
	route := func(m *adaptertest.Mw) []echo.MiddlewareFunc {
		if m == nil {
			return nil
		}
		return []echo.MiddlewareFunc{echolimit.New(s.Limiter, m.Limit, m.Opts...)}
	}
	e.GET("/ping", ok)
	e.GET("/users/:id", ok, route(s.Users)...)
	e.POST("/login", ok, route(s.Login)...)
	if s.WorkHandler != nil {
		e.POST("/work", echo.WrapHandler(s.WorkHandler), route(s.Work)...)
	}
	return e, nil
}

var adapter = adaptertest.Adapter{Name: "echo", App: app, UserKey: echolimit.Key}

func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, adapter)
}

// BenchmarkMiddleware: go test ./echolimit -run X -bench . -benchmem; the
// middleware's cost is "limited" minus "bare".
func BenchmarkMiddleware(b *testing.B) { adaptertest.Bench(b, adapter) }

// TestErrors: a handler's error goes up to echo's error handler through
// the middleware; a denial is answered by the middleware itself, like every
// adapter's, and never reaches the error handler.
func TestErrors(t *testing.T) {
	t.Parallel()
	var handled []error
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		handled = append(handled, err)
		e.DefaultHTTPErrorHandler(err, c)
	}
	e.Use(echolimit.New(adaptertest.Embedded(t), core.PerMinute(1)))
	teapot := echo.NewHTTPError(http.StatusTeapot, "no coffee")
	e.GET("/", func(c echo.Context) error { return teapot })
	for i, want := range []int{http.StatusTeapot, http.StatusTooManyRequests} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != want {
			t.Fatalf("request %d: %d %q, want %d", i, w.Code, w.Body.String(), want)
		}
	}
	if len(handled) != 1 || !errors.Is(handled[0], teapot) {
		t.Fatalf("the error handler got %v, want only the handler's error", handled)
	}
}

// TestErrorStatusSettles: a handler's returned error settles with its
// HTTP status, 500 for an error that is not an *echo.HTTPError, before
// echo's error handler writes the answer.
func TestErrorStatusSettles(t *testing.T) {
	t.Parallel()
	var seen []int
	cost := redlimit.WithResponseCost(func(_ *http.Request, status int, _ http.Header) int {
		seen = append(seen, status)
		return 1
	})
	e := echo.New()
	e.Use(echolimit.New(adaptertest.Embedded(t), core.PerMinute(100), cost))
	e.GET("/teapot", func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot) })
	e.GET("/broken", func(c echo.Context) error { return errors.New("broken") })
	e.GET("/fine", func(c echo.Context) error { return c.String(http.StatusCreated, "made") })
	for _, path := range []string{"/teapot", "/broken", "/fine"} {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	if fmt.Sprint(seen) != "[418 500 201]" {
		t.Fatalf("WithResponseCost saw statuses %v, want [418 500 201]", seen)
	}
}

// TestKey: Key reads what an earlier middleware stored with c.Set:
// strings, integers and fmt.Stringers make a key "<name>:<value>"; a
// missing or empty value, a value of another type, and a request that no
// echolimit middleware decided are errors, answered 400.
func TestKey(t *testing.T) {
	t.Parallel()
	lim := adaptertest.Embedded(t, core.WithLogger(slog.New(slog.DiscardHandler)))
	var mu sync.Mutex
	var got []string
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		mu.Lock()
		defer mu.Unlock()
		if d.Err != nil {
			got = append(got, "error: "+d.Err.Error())
			return
		}
		got = append(got, d.Key)
	})
	for _, tt := range []struct {
		value  any // stored with c.Set("user", value); nil: nothing stored
		status int
		want   string
	}{
		{"alice", http.StatusOK, "user:alice"},
		{int64(-42), http.StatusOK, "user:-42"},
		{uint32(7), http.StatusOK, "user:7"},
		{userID{9}, http.StatusOK, "user:id-9"},
		{nil, http.StatusBadRequest, `error: keyfunc: no key in request: no echo context value "user"`},
		{"", http.StatusBadRequest, `error: keyfunc: no key in request: echo context value "user" is empty`},
		{[]string{"a"}, http.StatusBadRequest, `error: echo context value "user" is a []string`},
	} {
		got = nil
		e := echo.New()
		setUser := func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				if tt.value != nil {
					c.Set("user", tt.value)
				}
				return next(c)
			}
		}
		e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) },
			setUser, echolimit.New(lim, core.PerMinute(100), redlimit.WithKey(echolimit.Key("user")), observe))
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != tt.status || len(got) != 1 || !strings.HasPrefix(got[0], tt.want) {
			t.Errorf("c.Set(\"user\", %#v): %d, decided %q; want %d and %q", tt.value, w.Code, got, tt.status, tt.want)
		}
	}

	// Outside echolimit's middleware there is no echo context to read.
	_, err := echolimit.Key("user")(httptest.NewRequest(http.MethodGet, "/", nil))
	if !errors.Is(err, keyfunc.ErrNoKey) || !strings.Contains(err.Error(), "not decided by an echolimit middleware") {
		t.Errorf("Key outside the middleware: %v", err)
	}
}

type userID struct{ n int }

func (u userID) String() string { return fmt.Sprintf("id-%d", u.n) }

// TestCheckRules: a rule that no route of the server can receive a
// request for is reported by name, as is a pattern in echo's syntax; rules
// that reach a route, the catch-all and host patterns pass.
func TestCheckRules(t *testing.T) {
	t.Parallel()
	e := echo.New()
	h := func(c echo.Context) error { return nil }
	e.GET("/users/:id", h)
	e.POST("/login", h)
	e.GET("/static/*", h)
	api := e.Group("/api/v1")
	api.PUT("/orders/:id/items/:item", h)
	e.RouteNotFound("/old/*", h)

	for _, rules := range []redlimit.Rules{
		{"*": "100/s", "GET /users/{id}": "5/m", "POST /login": "1/m"},
		{"/users/alice": "1/s", "GET /users/*": "1/s", "/users/": "1/s"},
		{"GET /static/css/site.css": "1/s", "/static/{path...}": "1/s", "GET /static/{$}": "1/s"},
		{"PUT /api/v1/orders/{id}/items/{item}": "1/s", "/api/*": "1/s"},
		{"DELETE /old/page": "1/s"}, // a RouteNotFound route takes every method
		{"localhost/login": "1/s"},
	} {
		if err := echolimit.CheckRules(e, rules); err != nil {
			t.Errorf("CheckRules(%v): %v", rules, err)
		}
	}
	for _, tt := range []struct {
		rules redlimit.Rules
		says  string
	}{
		{redlimit.Rules{"GET /reports/{id}": "1/s", "*": "1/s"}, `rule "GET /reports/{id}": no route of the echo server matches`},
		{redlimit.Rules{"POST /users/{id}": "1/s", "GET /login": "1/s"}, `rules "GET /login", "POST /users/{id}": no route`},
		{redlimit.Rules{"PUT /api/v1/orders/{id}": "1/s"}, `rule "PUT /api/v1/orders/{id}": no route`},
		{redlimit.Rules{"GET /users/:id": "1/s"}, `rule "GET /users/:id": ":id" is gin's and echo's parameter syntax`},
		{redlimit.Rules{"get /login": "1/s"}, `rule "get /login": method "get": methods are case-sensitive`},
	} {
		err := echolimit.CheckRules(e, tt.rules)
		if !errors.Is(err, redlimit.ErrInvalidRules) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("CheckRules(%v) = %v; want an ErrInvalidRules error saying %q", tt.rules, err, tt.says)
		}
	}
	// The hint about gin's and echo's ":id" comes only where a path has a ':'.
	for rule, hint := range map[string]bool{"GET /reports/{id}": false, "GET /logn": false, "GET /files/x_:name": true} {
		err := echolimit.CheckRules(e, redlimit.Rules{rule: "1/s"})
		if err == nil || strings.Contains(err.Error(), "not :id") != hint {
			t.Errorf("CheckRules of %q = %v; want the \"{id}, not :id\" hint: %v", rule, err, hint)
		}
	}
}

// TestKeyMadeLate: a Key first made while a request is decided finds the
// echo context: the middleware depends on no process-wide state. (It once
// put the echo context where Key finds it only once some Key call,
// anywhere, had set a flag, so such a Key failed the process's first
// requests.) Not parallel: it runs before the parallel tests, which call
// Key.
func TestKeyMadeLate(t *testing.T) {
	lim := adaptertest.Embedded(t)
	var got []string
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) { got = append(got, d.Key) })
	late := func(r *http.Request) (string, error) { return echolimit.Key("user")(r) } // Key's first call is in a request
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { c.Set("user", "alice"); return next(c) }
	}, echolimit.New(lim, core.PerMinute(100), redlimit.WithKey(late), observe))
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusOK || len(got) != 1 || got[0] != "user:alice" {
		t.Fatalf("the first request: %d, keyed %q; want 200 and user:alice", w.Code, got)
	}
}
