package redlimit_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// syncBuffer is a bytes.Buffer safe for the Limiter's goroutines to log to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// How a request ends and what it is charged: a budget settles at what the
// handler reported to its Usage however the handler ends.

// tokensLeft sends a request of estimate 0 through p and returns the
// RateLimit member of its token limit (the draft profile).
func tokensLeft(t *testing.T, p redlimit.Policy) string {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.RemoteAddr = "203.0.113.7:1"
	r.Header.Set("X-Estimate", "0")
	_, w := serveRequest(p, r)
	if w.Code != http.StatusOK {
		t.Fatalf("a request of estimate 0: %d", w.Code)
	}
	for _, m := range strings.Split(w.Header().Get("RateLimit"), ", ") {
		if strings.Contains(m, "-tokens") {
			return m
		}
	}
	t.Fatalf("RateLimit %q has no token limit", w.Header().Get("RateLimit"))
	return ""
}

// estimated is an Estimate of a request's X-Estimate header, 500 without.
func estimated(r *http.Request) int {
	var n int
	if _, err := fmt.Sscan(r.Header.Get("X-Estimate"), &n); err != nil {
		return 500
	}
	return n
}

// TestUsageAddSaturates: a Usage that would go past the most a request
// is charged stays there, never wraps: the request is charged MaxCost.
func TestUsageAddSaturates(t *testing.T) {
	t.Parallel()
	var u redlimit.Usage
	u.Add("tokens", 100)
	u.Add("tokens", math.MaxInt)
	u.Add("tokens", math.MaxInt)
	if n, ok := u.Used("tokens"); !ok || n < 1_000_000_000 {
		t.Fatalf("Used after Add(100), Add(MaxInt) twice: %d, %v; want at least 1e9", n, ok)
	}

	lim, _ := embedded(t)
	b := redlimit.Budget{Limits: []core.Limit{{Algorithm: core.FixedWindow, Rate: 100000, Period: time.Hour, Unit: "tokens"}},
		Estimate: estimated, MaxCost: 10000}
	p := mustPolicy(t, lim, core.PerHour(100), redlimit.WithName("sat"), redlimit.WithHeaders(redlimit.HeadersDraft), redlimit.WithBudget(b))
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.RemoteAddr = "203.0.113.7:1"
	w := httptest.NewRecorder()
	redlimit.Serve(p, w, r, func(w http.ResponseWriter, r *http.Request) int {
		u := redlimit.UsageFrom(r.Context())
		u.Add("tokens", 100)
		u.Add("tokens", math.MaxInt)
		return http.StatusOK
	})
	if got, want := tokensLeft(t, p), `"sat-1h-tokens";r=90000;t=3600`; got != want {
		t.Fatalf("after a request that reported 100 and MaxInt tokens: %s, want %s (charged MaxCost, 10000)", got, want)
	}
}

// TestBudgetSettledOnPanic: a handler that panics, with
// http.ErrAbortHandler (httputil.ReverseProxy's when its client leaves)
// or anything else, is settled at what it reported to its Usage, as when
// it returns; at its estimate when it reported nothing. A budget's Cost
// function is not called (nor is WithResponseCost): the panic goes on up.
func TestBudgetSettledOnPanic(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		value    any
		withCost bool
		report   int // -1: nothing
		want     int // tokens left of 100000
	}{
		{"abort", http.ErrAbortHandler, false, 1000, 99000},
		{"panic", "boom", false, 1000, 99000},
		{"abort, nothing reported", http.ErrAbortHandler, false, -1, 99950},
		{"abort, Cost", http.ErrAbortHandler, true, 1000, 99000},
		{"panic, Cost, nothing reported", "boom", true, -1, 99950},
		{"panic, Usage above MaxCost", "boom", false, 30000, 80000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim, _ := embedded(t)
			var costs atomic.Int64
			b := redlimit.Budget{Limits: []core.Limit{{Algorithm: core.FixedWindow, Rate: 100000, Period: time.Hour, Unit: "tokens"}},
				Estimate: func(r *http.Request) int { return estimated(r) / 10 }, MaxCost: 20000}
			if tt.withCost {
				b.Cost = func(*http.Request, int, http.Header) int { costs.Add(1); return 7 }
			}
			responseCost := redlimit.WithResponseCost(func(*http.Request, int, http.Header) int { costs.Add(1); return 0 })
			p := mustPolicy(t, lim, core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: time.Hour}, redlimit.WithName("p"),
				redlimit.WithHeaders(redlimit.HeadersDraft), redlimit.WithBudget(b), responseCost)
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			r.RemoteAddr = "203.0.113.7:1"
			func() {
				defer func() {
					if got := recover(); got != tt.value {
						t.Fatalf("recovered %v, want the handler's panic %v", got, tt.value)
					}
				}()
				redlimit.Serve(p, httptest.NewRecorder(), r, func(w http.ResponseWriter, r *http.Request) int {
					if tt.report >= 0 {
						redlimit.UsageFrom(r.Context()).Add("tokens", tt.report)
					}
					panic(tt.value)
				})
			}()
			if n := costs.Load(); n != 0 {
				t.Errorf("%d cost functions called for a request whose handler panicked; want none", n)
			}
			want := fmt.Sprintf(`"p-1h-tokens";r=%d;t=3600`, tt.want)
			if got := tokensLeft(t, p); got != want {
				t.Errorf("after the handler panicked: %s, want %s", got, want)
			}
		})
	}
}

// TestZeroLimiterRefused: a nil or zero *core.Limiter, which cannot decide
// anything, is refused where it is handed over, with an error that says
// to create it with core.New; its Stats are zero, never a panic.
func TestZeroLimiterRefused(t *testing.T) {
	t.Parallel()
	for _, lim := range []*core.Limiter{nil, new(core.Limiter), {}} {
		if _, err := redlimit.NewPolicy(lim, core.PerMinute(1)); err == nil || !strings.Contains(err.Error(), "core.New") {
			t.Errorf("NewPolicy(%p): %v; want refused, saying core.New", lim, err)
		}
		if _, err := redlimit.NewRuleSet(lim, redlimit.Rules{"*": "1/m"}); err == nil || !strings.Contains(err.Error(), "core.New") {
			t.Errorf("NewRuleSet(%p): %v; want refused, saying core.New", lim, err)
		}
		if s := lim.Stats(); s != (core.Stats{}) {
			t.Errorf("Stats of %p: %+v, want zero", lim, s)
		}
		if _, err := lim.Allow(context.Background(), "k", core.PerMinute(1)); err == nil || !strings.Contains(err.Error(), "core.New") {
			t.Errorf("Allow on %p: %v; want an error saying core.New", lim, err)
		}
	}
}

// TestSettleErrorSaysWhatHappens: a failed settlement is logged saying
// what the Limiter does about it: its slots are released in the
// background, and a refund or a charge it carried may be lost.
func TestSettleErrorSaysWhatHappens(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	var buf syncBuffer
	lim := core.New(rdb, core.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), core.WithTimeout(10*time.Second))
	p := mustPolicy(t, lim, core.Limit{Algorithm: core.Concurrency, Rate: 2, Period: time.Minute})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:1"
	redlimit.Serve(p, httptest.NewRecorder(), r, func(w http.ResponseWriter, r *http.Request) int {
		m.Close() // Redis goes away while the request is served
		return http.StatusOK
	})
	log := buf.String()
	if lim.Stats().FailedSettlements != 1 {
		t.Fatalf("Stats %+v; want one failed settlement", lim.Stats())
	}
	for _, says := range []string{"released in the background", "until Redis answers or its lease ends", "refund or charge"} {
		if !strings.Contains(log, says) {
			t.Errorf("log %q; want it to say %q", log, says)
		}
	}
	if strings.Contains(log, "freed when its lease ends") {
		t.Errorf("log %q says the slot waits for its lease; it is released in the background", log)
	}
}
