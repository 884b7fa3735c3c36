package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginlimit"
	"github.com/redlimit/redlimit/internal/adaptertest"
)

// TestTier: ginlimit.Tier reads the plan an earlier handler stored; a
// request without one is of the default tier.
func TestTier(t *testing.T) {
	t.Parallel()
	lim := adaptertest.Embedded(t)
	limit, err := ginlimit.Rules(lim, redlimit.Rules{"*": "1/m fixed_window", "* tier=pro": "3/m fixed_window"},
		redlimit.WithTier(ginlimit.Tier("plan")))
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if p := c.GetHeader("X-Plan"); p != "" {
			c.Set("plan", p)
		}
	}, limit)
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
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

// TestLimitSets: ginlimit.Tier picks a policy's limit set by the plan an
// earlier handler stored; a request without one is decided by the
// policy's own limits.
func TestLimitSets(t *testing.T) {
	t.Parallel()
	lim := adaptertest.Embedded(t)
	limit := ginlimit.New(lim, core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: time.Hour},
		redlimit.WithLimitSets(map[string]string{"pro": "3/h fixed_window"}, ginlimit.Tier("plan")))
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if p := c.GetHeader("X-Plan"); p != "" {
			c.Set("plan", p)
		}
	}, limit)
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
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
