package echolimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/internal/adaptertest"
)

// app builds the suite's app on an echo server: global middleware and rules
// with e.Use, per-route middleware as the route's middleware.
func app(s adaptertest.Spec) (http.Handler, error) {
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	e := echo.New()
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

var adapter = adaptertest.Adapter{Name: "echo", App: app}

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
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	var handled []error
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		handled = append(handled, err)
		e.DefaultHTTPErrorHandler(err, c)
	}
	e.Use(echolimit.New(core.New(rdb), core.PerMinute(1)))
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
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	var seen []int
	cost := redlimit.WithResponseCost(func(_ *http.Request, status int, _ http.Header) int {
		seen = append(seen, status)
		return 1
	})
	e := echo.New()
	e.Use(echolimit.New(core.New(rdb), core.PerMinute(100), cost))
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
