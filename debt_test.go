package redlimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// TestResponseCostDebtBounded: a response cost far above the limit (bytes
// served, 2e9, under 1000/m) is charged as far as one period of debt: the
// next request is told to wait about a minute (Retry-After 61: the debt's
// minute and one event, rounded up), not 1.9 years (issue 32, defect 10).
func TestResponseCostDebtBounded(t *testing.T) {
	t.Parallel()
	lim := stillLimiter(t)
	p := mustPolicy(t, lim, core.PerMinute(1000), redlimit.WithResponseCost(func(*http.Request, int, http.Header) int {
		return 2_000_000_000
	}))
	serve := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:1"
		w := httptest.NewRecorder()
		redlimit.Serve(p, w, r, func(w http.ResponseWriter, _ *http.Request) int { w.WriteHeader(http.StatusOK); return http.StatusOK })
		return w
	}
	if w := serve(); w.Code != http.StatusOK {
		t.Fatalf("the first request: %d, want 200", w.Code)
	}
	w := serve()
	retry, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if w.Code != http.StatusTooManyRequests || err != nil || retry > 61 || retry < 60 {
		t.Fatalf("after a charge of 2e9 under 1000/m: %d, Retry-After %q; want 429 and 61 (a minute of debt and one event)",
			w.Code, w.Header().Get("Retry-After"))
	}
}
