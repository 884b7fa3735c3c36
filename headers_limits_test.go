package redlimit_test

import (
	"fmt"
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dunglas/httpsfv"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// The rate-limit fields at the edges of what a Limit may be: every
// algorithm at the largest rate and burst core accepts (redlimit.MaxCount),
// the shortest periods and the longest Validate accepts, the calendar's
// day, week and month, and Concurrency's most slots; every HeaderProfile,
// on an allowed answer and a denied one.

// sfMaxInteger is the largest Integer a structured field can carry
// (RFC 9651, 3.3.1).
const sfMaxInteger = 999_999_999_999_999

// largestPeriod returns l with the longest Period that Validate accepts,
// found by bisection over periods whose bound on the scripts' numbers
// (burst times period over their common factor, or the period) grows
// with the period: multiples of the rate for the buckets, of the
// sub-buckets for a sliding window, any for the other windows.
func largestPeriod(t *testing.T, l core.Limit) core.Limit {
	t.Helper()
	step := int64(1)
	switch l.Algorithm {
	case core.GCRA, core.TokenBucket, core.LeakyBucket:
		step = int64(l.Rate)
	case core.SlidingWindow:
		step = 10 // the default sub-buckets
	}
	at := func(k int64) core.Limit {
		m := l
		m.Period = time.Duration(k*step) * time.Microsecond
		return m
	}
	lo, hi := (int64(time.Millisecond/time.Microsecond)+step-1)/step, int64(math.MaxInt64/int64(time.Microsecond))/step
	if at(lo).Validate() != nil {
		t.Fatalf("%v: not even the shortest period is valid: %v", at(lo), at(lo).Validate())
	}
	for lo < hi { // at(lo) is valid
		mid := lo + (hi-lo+1)/2
		if at(mid).Validate() == nil {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return at(lo)
}

// edgeLimits returns the limits the test runs: each checked by Validate
// and read back by ParseLimit from its String.
func edgeLimits(t *testing.T) []core.Limit {
	t.Helper()
	var out []core.Limit
	add := func(l core.Limit, must bool) {
		t.Helper()
		if err := l.Validate(); err != nil {
			if must {
				t.Fatalf("%+v: %v", l, err)
			}
			return
		}
		back, err := core.ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("%v: ParseLimit of its String: %+v, %v", l, back, err)
		}
		out = append(out, l)
	}
	rates := []int{1, 999_999_937, redlimit.MaxCount} // a prime between
	periods := []time.Duration{time.Millisecond, 1001 * time.Microsecond, 333 * time.Millisecond, time.Second,
		7 * time.Second, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}
	for _, a := range []core.Limit{{Algorithm: core.GCRA}, {Algorithm: core.TokenBucket}, {Algorithm: core.TokenBucket, Stepped: true},
		{Algorithm: core.LeakyBucket}, {Algorithm: core.FixedWindow}, {Algorithm: core.SlidingWindow}, {Algorithm: core.SlidingLog}} {
		rates := rates
		if a.Algorithm == core.SlidingLog { // an entry per event: at most MaxSlots
			rates = []int{1, 9_973, redlimit.MaxSlots}
		}
		for _, rate := range rates {
			for _, p := range periods {
				l := a
				l.Rate, l.Period = rate, p
				add(l, false)
			}
			l := a
			l.Rate = rate
			add(largestPeriod(t, l), true)
			if a.Algorithm == core.GCRA || a.Algorithm == core.TokenBucket || a.Algorithm == core.LeakyBucket {
				l.Burst = redlimit.MaxCount // the largest burst, and the longest period it allows
				add(largestPeriod(t, l), true)
			}
		}
	}
	for _, s := range []string{
		fmt.Sprintf("%d/d fixed_window calendar", redlimit.MaxCount),
		fmt.Sprintf("%d/w fixed_window calendar=Pacific/Chatham", redlimit.MaxCount),
		fmt.Sprintf("%d/month fixed_window calendar", redlimit.MaxCount),
		"5000000/month calendar", "10000000/month calendar", "100000000/month calendar=Europe/Berlin",
		fmt.Sprintf("%d concurrent", redlimit.MaxSlots),
		fmt.Sprintf("%d concurrent lease=1ms", redlimit.MaxSlots),
		"2 concurrent lease=1ms",
	} {
		l, err := core.ParseLimit(s)
		if err != nil {
			t.Fatalf("ParseLimit(%q): %v", s, err)
		}
		add(l, true)
	}
	l, err := core.ParseLimit("2 concurrent")
	if err != nil {
		t.Fatal(err)
	}
	add(largestPeriod(t, l), true)
	return out
}

// TestHeadersAtTheEdges: at the edges of what a Limit may be, every field
// of every profile is a non-negative integer, consistent with the limit:
// RateLimit-Policy's q is the quota of its window w (whole seconds, at
// least a period), exact where w is whole periods; X-RateLimit-Limit and
// redlimit-burst are the burst; remaining at most the burst; t never
// later than Retry-After on a 429.
func TestHeadersAtTheEdges(t *testing.T) {
	t.Parallel()
	lim := stillLimiter(t)
	profiles := []redlimit.HeaderProfile{redlimit.HeadersXRateLimit, redlimit.HeadersDraft, redlimit.HeadersBoth, redlimit.HeadersNone}
	limits := edgeLimits(t)
	t.Logf("%d limits", len(limits))
	for i, l := range limits {
		for _, profile := range profiles {
			what := fmt.Sprintf("%v, profile %d", l, profile)
			// One request of 1, then, where a request can take the whole
			// burst cheaply (a sliding log or Concurrency keeps a member
			// per event), one of the burst and one denied.
			p := mustPolicy(t, lim, l, redlimit.WithName(fmt.Sprintf("e%d-%d", i, profile)), redlimit.WithHeaders(profile))
			checkFields(t, what+", allowed", l, profile, send(p), http.StatusOK)
			switch {
			case (l.Algorithm == core.SlidingLog || l.Algorithm == core.Concurrency) && l.Capacity() > 1000:
				continue
			}
			p = mustPolicy(t, lim, l, redlimit.WithName(fmt.Sprintf("d%d-%d", i, profile)), redlimit.WithHeaders(profile),
				redlimit.WithCost(l.Capacity()))
			if l.Algorithm == core.Concurrency { // denied while the whole burst is in flight
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = "203.0.113.7:1"
				w := httptest.NewRecorder()
				var denied *httptest.ResponseRecorder
				redlimit.Serve(p, w, r, func(http.ResponseWriter, *http.Request) int {
					denied = send(p)
					return http.StatusOK
				})
				checkFields(t, what+", the whole burst", l, profile, w, http.StatusOK)
				checkFields(t, what+", denied", l, profile, denied, http.StatusTooManyRequests)
				continue
			}
			checkFields(t, what+", the whole burst", l, profile, send(p), http.StatusOK)
			checkFields(t, what+", denied", l, profile, send(p), http.StatusTooManyRequests)
		}
	}
}

// stillLimiter returns a Limiter on a fresh miniredis whose scripts take
// the time from the Limiter, which stands still: a period of a
// millisecond is not over between two requests, and the calendar's
// boundaries are worked out on the same clock.
func stillLimiter(t *testing.T) *core.Limiter {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return core.New(rdb, core.WithClock(func() time.Time { return t0 }), core.WithTimeout(10*time.Second))
}

// send sends one request through p.
func send(p redlimit.Policy) *httptest.ResponseRecorder {
	_, w := decide(p, "203.0.113.7:1")
	return w
}

// checkFields checks the rate-limit fields of w, an answer of status
// under l in profile.
func checkFields(t *testing.T, what string, l core.Limit, profile redlimit.HeaderProfile, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("%s: status %d, want %d (%v)", what, w.Code, status, w.Header())
	}
	h := w.Header()
	integer := func(name string, min, max int64) (int64, bool) {
		t.Helper()
		v, ok := h[http.CanonicalHeaderKey(name)]
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(v[0], 10, 64)
		if len(v) != 1 || err != nil || n < min || n > max {
			t.Fatalf("%s: %s %q, want one integer in [%d, %d]", what, name, v, min, max)
		}
		return n, true
	}
	capacity := int64(l.Capacity())
	retryAfter, denied := integer("Retry-After", 1, math.MaxInt64)
	if denied != (status == http.StatusTooManyRequests) {
		t.Fatalf("%s: Retry-After %q on a %d", what, h.Get("Retry-After"), status)
	}

	xrl := profile == redlimit.HeadersXRateLimit || profile == redlimit.HeadersBoth
	for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if _, ok := h[http.CanonicalHeaderKey(name)]; ok != xrl {
			t.Fatalf("%s: %s present: %v", what, name, ok)
		}
	}
	if xrl {
		integer("X-RateLimit-Limit", capacity, capacity)
		integer("X-RateLimit-Remaining", 0, capacity)
		integer("X-RateLimit-Reset", 0, math.MaxInt64)
	}

	draft := profile == redlimit.HeadersDraft || profile == redlimit.HeadersBoth
	for _, name := range []string{"RateLimit-Policy", "RateLimit"} {
		if _, ok := h[http.CanonicalHeaderKey(name)]; ok != draft {
			t.Fatalf("%s: %s present: %v", what, name, ok)
		}
	}
	if !draft {
		return
	}
	param := func(item httpsfv.Item, name string, min, max int64) (int64, bool) {
		t.Helper()
		v, ok := item.Params.Get(name)
		if !ok {
			return 0, false
		}
		n, isInt := v.(int64)
		if !isInt || n < min || n > max {
			t.Fatalf("%s: parameter %s=%v, want an integer in [%d, %d]", what, name, v, min, max)
		}
		return n, true
	}
	member := func(name string) httpsfv.Item {
		t.Helper()
		list, err := httpsfv.UnmarshalList(h.Values(name))
		if err != nil || len(list) != 1 {
			t.Fatalf("%s: %s %q: %v, want a list of one member", what, name, h.Values(name), err)
		}
		item, ok := list[0].(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: %s %q is not an Item", what, name, h.Values(name))
		}
		return item
	}

	pol := member("RateLimit-Policy")
	q, ok := param(pol, "q", 0, sfMaxInteger)
	if !ok {
		t.Fatalf("%s: RateLimit-Policy %q without q", what, h.Get("RateLimit-Policy"))
	}
	if l.Algorithm == core.Concurrency {
		if qu, _ := pol.Params.Get("qu"); q != int64(l.Rate) || qu != "concurrent-requests" {
			t.Fatalf("%s: RateLimit-Policy %q, want q=%d;qu=\"concurrent-requests\"", what, h.Get("RateLimit-Policy"), l.Rate)
		}
	} else {
		w, ok := param(pol, "w", 1, sfMaxInteger)
		if !ok {
			t.Fatalf("%s: RateLimit-Policy %q without w", what, h.Get("RateLimit-Policy"))
		}
		// q is what the window surely allows: rate per period, over w,
		// rounded down; w covers a period at least. A calendar limit's
		// period is the window now is in, as long as the calendar has it.
		period := big.NewInt(int64(l.Period / time.Microsecond))
		if start, end, ok := l.Window(time.Now()); ok {
			period = big.NewInt(int64(end.Sub(start) / time.Microsecond))
		}
		window := new(big.Int).Mul(big.NewInt(w), big.NewInt(int64(time.Second/time.Microsecond)))
		quota, rest := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(int64(l.Rate)), window), period, new(big.Int))
		if !quota.IsInt64() || quota.Int64() != q || window.Cmp(period) < 0 {
			t.Fatalf("%s: RateLimit-Policy %q: q=%d;w=%d, want q=%v (rate %d per %v µs over %d s)", what, h.Get("RateLimit-Policy"), q, w, quota, l.Rate, period, w)
		}
		// Where a window of whole seconds is whole periods, within an
		// hour, and its quota fits, it is that window, exact.
		lcm := new(big.Int).Div(new(big.Int).Mul(period, big.NewInt(1e6)), new(big.Int).GCD(nil, nil, period, big.NewInt(1e6)))
		exact := new(big.Int).Mul(big.NewInt(int64(l.Rate)), new(big.Int).Div(lcm, period))
		if lcm.Cmp(big.NewInt(int64(time.Hour/time.Microsecond))) <= 0 && exact.Cmp(big.NewInt(sfMaxInteger)) <= 0 &&
			(rest.Sign() != 0 || window.Cmp(lcm) != 0) {
			t.Fatalf("%s: RateLimit-Policy %q, want w=%v s and q=%v, exact", what, h.Get("RateLimit-Policy"), new(big.Int).Div(lcm, big.NewInt(1e6)), exact)
		}
	}
	if burst, ok := param(pol, "redlimit-burst", capacity, capacity); ok == (capacity == q) {
		t.Fatalf("%s: RateLimit-Policy %q: redlimit-burst %d present %v, want it exactly when the burst %d is not q", what, h.Get("RateLimit-Policy"), burst, ok, capacity)
	}

	rl := member("RateLimit")
	if _, ok := param(rl, "r", 0, capacity); !ok {
		t.Fatalf("%s: RateLimit %q without r", what, h.Get("RateLimit"))
	}
	if tt, ok := param(rl, "t", 1, sfMaxInteger); ok && denied && tt > retryAfter {
		t.Fatalf("%s: RateLimit %q: t=%d later than Retry-After %d", what, h.Get("RateLimit"), tt, retryAfter)
	}
}

// TestPolicyLargeQuotas: RateLimit-Policy of large quotas, verbatim: a
// calendar month's (q is its rate, w the month it is, in seconds: "%w"
// below) and a window whose
// exact quota would not fit a structured field's integer, which is
// rounded to the period's whole seconds.
func TestPolicyLargeQuotas(t *testing.T) {
	t.Parallel()
	lim := stillLimiter(t)
	for i, tt := range []struct{ limit, want string }{
		{"5000000/month calendar", `q=5000000;w=%w`},
		{"10000000/month calendar", `q=10000000;w=%w`},
		{"100000000/month calendar=Europe/Berlin", `q=100000000;w=%w`},
		{"1000000000/1001us", `q=999000999000;w=1;redlimit-burst=1000000000`}, // not 10^15 per 1001 s: too large a field
		{"1000000000/1001us burst=5", `q=999000999000;w=1;redlimit-burst=5`},
		{"999999937/7d fixed_window", `q=999999937;w=604800`},
		{"3/500ms", `q=6;w=1;redlimit-burst=3`},
	} {
		l, err := core.ParseLimit(tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if start, end, ok := l.Window(time.Now()); ok { // a moment at the end of a month could see the next
			tt.want = strings.Replace(tt.want, "%w", fmt.Sprint(int64(end.Sub(start)/time.Second)), 1)
		}
		name := fmt.Sprintf("p%d", i)
		p := mustPolicy(t, lim, l, redlimit.WithName(name), redlimit.WithHeaders(redlimit.HeadersDraft))
		if _, w := decide(p, "203.0.113.7:1"); w.Header().Get("RateLimit-Policy") != `"`+name+`";`+tt.want {
			t.Errorf("%s: RateLimit-Policy %q, want %q", tt.limit, w.Header().Get("RateLimit-Policy"), `"`+name+`";`+tt.want)
		}
	}
}

// TestRequestLimitsWithoutPeriod: a limit a request picks with no period
// is a configuration error (400), never a panic working out its fields.
func TestRequestLimitsWithoutPeriod(t *testing.T) {
	t.Parallel()
	lim := stillLimiter(t)
	for _, bad := range []core.Limit{{Rate: 1}, {Rate: 1, Period: time.Nanosecond}, {Rate: math.MaxInt, Period: time.Microsecond}, {Rate: -1, Period: time.Second}} {
		p := mustPolicy(t, lim, core.PerMinute(10), redlimit.WithRequestLimits(func(*http.Request) ([]core.Limit, error) {
			return []core.Limit{bad}, nil
		}))
		if d, w := decide(p, "203.0.113.7:1"); w.Code != http.StatusBadRequest || d.Outcome != redlimit.OutcomeInvalid {
			t.Errorf("a request picking %+v: %d, %v; want 400, invalid", bad, w.Code, d.Outcome)
		}
	}
}
