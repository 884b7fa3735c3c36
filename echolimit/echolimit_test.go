package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

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
	return e, nil
}

var adapter = adaptertest.Adapter{Name: "echo", App: app, DenyBody: `{"message":"rate limit exceeded"}`}

func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, adapter)
}

// BenchmarkMiddleware: go test ./echolimit -run X -bench . -benchmem; the
// middleware's cost is "limited" minus "bare".
func BenchmarkMiddleware(b *testing.B) { adaptertest.Bench(b, adapter) }
