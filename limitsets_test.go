package redlimit_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
)

// plan picks a request's limit set from its X-Plan header; "broken" is an
// error.
func plan(q redlimit.Request) (string, error) {
	v := q.Values("X-Plan")
	switch {
	case len(v) == 0:
		return "", nil
	case v[0] == "broken":
		return "", errors.New("plans store down")
	}
	return v[0], nil
}

// TestLimitSets: a request is decided by the set its plan names; the
// policy's own limits for no plan, a plan without a set, and pick's error
// (logged); a key that moves from one set to another keeps its count
// where the algorithm and period stay; each set's headers are its own.
func TestLimitSets(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithLogger(logTo(&logs)), core.WithClock(func() time.Time { return t0 }), core.WithTimeout(10*time.Second))
	p := mustPolicy(t, lim, core.Limit{Algorithm: core.FixedWindow, Rate: 2, Period: time.Minute},
		redlimit.WithName("api"),
		redlimit.WithLimitSets(map[string]string{
			"pro":  "5/m fixed_window",
			"team": "10/m fixed_window, 3/s",
		}, plan))
	app := nethttp.Middleware(p)(okHandler)
	send := func(plan string, n int) string {
		var out []string
		for range n {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if plan != "" {
				r.Header.Set("X-Plan", plan)
			}
			app.ServeHTTP(w, r)
			out = append(out, fmt.Sprint(w.Code, ":", w.Header().Get("X-RateLimit-Limit")))
		}
		return strings.Join(out, " ")
	}
	for _, step := range []struct {
		plan string
		n    int
		want string
	}{
		{"", 3, "200:2 200:2 429:2"},
		{"pro", 4, "200:5 200:5 200:5 429:5"},  // the minute's 2 stand
		{"gold", 1, "429:2"},                   // no such set: the policy's own
		{"broken", 1, "429:2"},                 // pick's error: the policy's own, logged
		{"team", 4, "200:3 200:3 200:3 429:3"}, // 10/m with 5 used, and 3/s binds
	} {
		if got := send(step.plan, step.n); got != step.want {
			t.Errorf("plan %q: %s, want %s", step.plan, got, step.want)
		}
	}
	if !strings.Contains(logs.String(), "plans store down") {
		t.Errorf("pick's error was not logged: %s", logs.String())
	}
}

// TestLimitSetsCheckedWhenBuilt: a set that could never admit a request,
// or that is not one, is an error when the policy is built, naming the
// set; WithRequestLimits found the same mistake only per request (400).
func TestLimitSetsCheckedWhenBuilt(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	limit := core.PerMinute(10)
	for _, tt := range []struct {
		opts []redlimit.Option
		says string
		is   error
	}{
		{[]redlimit.Option{redlimit.WithCost(5), redlimit.WithLimitSets(map[string]string{"free": "3/m", "pro": "100/m"}, plan)},
			`set "free": ` + core.ErrInvalidCost.Error() + ": WithCost(5) is above the burst 3 of 3/m", core.ErrInvalidCost},
		{[]redlimit.Option{redlimit.WithLimitSets(map[string]string{"pro": "100/q"}, plan)}, `set "pro"`, core.ErrInvalidLimit},
		{[]redlimit.Option{redlimit.WithLimitSets(map[string]string{"pro": "100/m, 5/m"}, plan)}, `set "pro"`, core.ErrInvalidLimit},
		{[]redlimit.Option{redlimit.WithLimitSets(map[string]string{"pro": "100/m unit=tokens"}, plan)}, "WithBudget", core.ErrInvalidLimit},
		{[]redlimit.Option{redlimit.WithLimitSets(map[string]string{"": "100/m"}, plan)}, `the name "" is the default's`, nil},
		{[]redlimit.Option{redlimit.WithLimitSets(map[string]string{"pro": "100/m"}, nil)}, "without a function", nil},
		{[]redlimit.Option{redlimit.WithLimitSets(nil, plan)}, "without sets", nil},
		{[]redlimit.Option{redlimit.WithLimitSets(map[string]string{"pro": "100/m"}, plan),
			redlimit.WithRequestLimits(func(*http.Request) ([]core.Limit, error) { return nil, nil })}, "use one", nil},
	} {
		_, err := redlimit.NewPolicy(lim, limit, tt.opts...)
		if err == nil || !strings.Contains(err.Error(), tt.says) || tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("NewPolicy: %v; want an error saying %q (wrapping %v)", err, tt.says, tt.is)
		}
	}
	_, err := redlimit.NewRuleSet(lim, redlimit.Rules{"*": "10/m"}, redlimit.WithLimitSets(map[string]string{"pro": "100/m"}, plan))
	if err == nil || !strings.Contains(err.Error(), "tiers are its limit sets") {
		t.Errorf("NewRuleSet with WithLimitSets: %v, want an error pointing to tiers", err)
	}

	// The same plans picked by WithRequestLimits: the policy is built, and
	// the mistake is found per request, answered 400.
	free, _ := core.ParseLimits("3/m")
	p := mustPolicy(t, lim, limit, redlimit.WithCost(5), redlimit.WithRequestLimits(func(*http.Request) ([]core.Limit, error) { return free, nil }))
	if d, w := decide(p, "192.0.2.9:1"); w.Code != http.StatusBadRequest || !errors.Is(d.Err, core.ErrInvalidCost) {
		t.Errorf("WithRequestLimits of a burst below the cost: %d, %v; want 400 with ErrInvalidCost", w.Code, d.Err)
	}
}
