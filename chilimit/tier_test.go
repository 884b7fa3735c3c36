package chilimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/chilimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/adaptertest"
)

// planKey is where the test's middleware puts the plan in the request's
// context.
type planKey struct{}

// withPlan is a chi middleware that puts the X-Plan header's plan in the
// request's context, as an authentication middleware would.
func withPlan(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.Header.Get("X-Plan"); p != "" {
			r = r.WithContext(context.WithValue(r.Context(), planKey{}, p))
		}
		next.ServeHTTP(w, r)
	})
}

// TestTier: chilimit.Tier reads the plan a middleware before it put in
// the request's context, for a rules table's tiers and a policy's limit
// sets; a request without one is of the default; a value of another type
// is decided by the default.
func TestTier(t *testing.T) {
	t.Parallel()
	lim := adaptertest.Embedded(t)
	sets := chilimit.New(lim, core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: time.Hour},
		redlimit.WithLimitSets(map[string]string{"pro": "3/h fixed_window"}, chilimit.Tier(planKey{})))
	tiers, err := chilimit.Rules(lim, redlimit.Rules{"*": "1/h fixed_window", "* tier=pro": "3/h fixed_window"},
		redlimit.WithTier(chilimit.Tier(planKey{})))
	if err != nil {
		t.Fatal(err)
	}
	for name, limit := range map[string]func(http.Handler) http.Handler{"sets": sets, "tiers": tiers} {
		r := chi.NewRouter()
		r.Use(withPlan, limit)
		r.Get("/", func(w http.ResponseWriter, r *http.Request) {})
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
				t.Errorf("%s: request %d (plan %q): %d, want %d", name, i, tt.plan, w.Code, tt.want)
			}
		}
	}
	q := redlimit.Request{Context: context.WithValue(context.Background(), planKey{}, 7)}
	if _, err := chilimit.Tier(planKey{})(q); err == nil {
		t.Error("Tier of an int: no error")
	}
}
