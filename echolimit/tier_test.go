package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
)

// TestTier: echolimit.Tier reads the plan an earlier handler stored; a
// request without one is of the default tier.
func TestTier(t *testing.T) {
	t.Parallel()
	lim := core.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	limit, err := echolimit.Rules(lim, redlimit.Rules{"*": "1/m fixed_window", "* tier=pro": "3/m fixed_window"},
		redlimit.WithTier(echolimit.Tier("plan")))
	if err != nil {
		t.Fatal(err)
	}
	r := echo.New()
	r.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if p := c.Request().Header.Get("X-Plan"); p != "" {
				c.Set("plan", p)
			}
			return next(c)
		}
	}, limit)
	r.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	for i, tt := range []struct {
		plan string
		want int
	}{{"pro", 200}, {"pro", 200}, {"", 429}, {"pro", 200}, {"pro", 429}} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if tt.plan != "" {
			req.Header.Set("X-Plan", tt.plan)
		}
		r.ServeHTTP(w, req)
		if w.Code != tt.want {
			t.Errorf("request %d (plan %q): %d, want %d", i, tt.plan, w.Code, tt.want)
		}
	}
}

// TestLimitSets: echolimit.Tier picks a policy's limit set by the plan an
// earlier middleware stored; a request without one is decided by the
// policy's own limits.
func TestLimitSets(t *testing.T) {
	t.Parallel()
	lim := core.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	limit := echolimit.New(lim, core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: time.Hour},
		redlimit.WithLimitSets(map[string]string{"pro": "3/h fixed_window"}, echolimit.Tier("plan")))
	r := echo.New()
	r.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if p := c.Request().Header.Get("X-Plan"); p != "" {
				c.Set("plan", p)
			}
			return next(c)
		}
	}, limit)
	r.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	for i, tt := range []struct {
		plan string
		want int
	}{{"pro", 200}, {"pro", 200}, {"", 429}, {"pro", 200}, {"pro", 429}} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if tt.plan != "" {
			req.Header.Set("X-Plan", tt.plan)
		}
		r.ServeHTTP(w, req)
		if w.Code != tt.want {
			t.Errorf("request %d (plan %q): %d, want %d", i, tt.plan, w.Code, tt.want)
		}
	}
}
