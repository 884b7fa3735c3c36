package core_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// A Limit's Rate and Burst, and a settlement's cost, go up to 4294967295
// (a uint32's range, Envoy's requests_per_unit), or int's largest where
// int is smaller; limits whose state Lua cannot count exactly are refused
// by the span check, saying why.

// aboveMaxCount is one more than the largest count, computed at run time
// so that the tests compile where int is 32 bits (there it wraps to a
// negative count, as invalid).
var aboveMaxCount = func() int { n := core.MaxCount; n++; return n }()

// TestMaxCountParse: the largest count parses where it is exact, one more
// is refused, and a huge rate over a long period says why it is refused.
func TestMaxCountParse(t *testing.T) {
	t.Parallel()
	if strconv.IntSize == 64 && core.MaxCount != math.MaxUint32 {
		t.Fatalf("MaxCount %d, want %d", core.MaxCount, uint64(math.MaxUint32))
	}
	top := strconv.Itoa(core.MaxCount)
	for _, c := range []struct {
		in   string
		want core.Limit
	}{
		{top + "/s fixed_window", core.Limit{Algorithm: core.FixedWindow, Rate: core.MaxCount, Period: time.Second}},
		{top + "/h fixed_window", core.Limit{Algorithm: core.FixedWindow, Rate: core.MaxCount, Period: time.Hour}},
		{top + "/d fixed_window calendar", core.Limit{Algorithm: core.FixedWindow, Rate: core.MaxCount, Period: 24 * time.Hour, Calendar: "UTC"}},
		{top + "/s", core.Limit{Rate: core.MaxCount, Period: time.Second}},
		{top + "/s gcra burst=" + top, core.Limit{Algorithm: core.GCRA, Rate: core.MaxCount, Period: time.Second, Burst: core.MaxCount}},
		{"1/s burst=" + top, core.Limit{Rate: 1, Period: time.Second, Burst: core.MaxCount}},
	} {
		got, err := core.ParseLimit(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if back, err := core.ParseLimit(got.String()); err != nil || back != got {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", got.String(), back, err, got)
		}
	}

	over := strconv.FormatUint(uint64(core.MaxCount)+1, 10)
	for _, c := range []struct{ in, says string }{
		{over + "/s", "above the maximum " + top},
		{over + "/h fixed_window", "above the maximum " + top},
		{"1/s burst=" + over, "above the maximum " + top},
		// GCRA counts each event in periods/rate units: 240000000 of them
		// an event at 4294967295 an hour, beyond what a double counts
		// exactly.
		{top + "/h", "Lua counts exactly"},
		{top + "/h token_bucket", "Lua counts exactly"},
	} {
		_, err := core.ParseLimit(c.in)
		if !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseLimit(%q) = %v, want ErrInvalidLimit saying %q", c.in, err, c.says)
		}
	}
	// The span error says how to fix it: a shorter period or a window.
	_, err := core.ParseLimit(top + "/h")
	for _, says := range []string{"shorter period", "fixed_window"} {
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseLimit(%q) = %v, want it to suggest %q", top+"/h", err, says)
		}
	}
}

// TestMaxCountValidate: Validate's bounds are ParseLimit's.
func TestMaxCountValidate(t *testing.T) {
	t.Parallel()
	for _, l := range []core.Limit{
		{Algorithm: core.FixedWindow, Rate: core.MaxCount, Period: time.Second},
		{Algorithm: core.FixedWindow, Rate: core.MaxCount, Period: time.Hour},
		{Algorithm: core.GCRA, Rate: core.MaxCount, Period: time.Second},
		{Algorithm: core.SlidingWindow, Rate: core.MaxCount, Period: time.Second},
	} {
		if err := l.Validate(); err != nil {
			t.Errorf("%v.Validate() = %v, want nil", l, err)
		}
	}
	if core.MaxCount == math.MaxInt {
		return // int holds nothing above it
	}
	above := aboveMaxCount
	for _, l := range []core.Limit{
		{Algorithm: core.FixedWindow, Rate: above, Period: time.Second},
		{Algorithm: core.GCRA, Rate: 1, Period: time.Second, Burst: above},
	} {
		err := l.Validate()
		if !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), "above the maximum "+strconv.Itoa(core.MaxCount)) {
			t.Errorf("Rate %d, Burst %d: Validate() = %v, want ErrInvalidLimit saying the maximum", l.Rate, l.Burst, err)
		}
	}
}

// TestMaxCountDecisions: decisions, reservations and settlements at the
// largest count are exact, on miniredis and on a real server.
func TestMaxCountDecisions(t *testing.T) {
	t.Parallel()
	limits := []core.Limit{
		{Algorithm: core.FixedWindow, Rate: core.MaxCount, Period: time.Second},
		{Algorithm: core.FixedWindow, Rate: core.MaxCount, Period: time.Hour},
		{Algorithm: core.GCRA, Rate: core.MaxCount, Period: time.Second},
		{Algorithm: core.TokenBucket, Rate: core.MaxCount, Period: time.Second},
	}
	for _, b := range backends {
		if b.name != "miniredis" && b.name != "standalone" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			newWorld := b.start(t)
			for _, l := range limits {
				t.Run(l.String(), func(t *testing.T) {
					t.Parallel()
					testMaxCount(t, newWorld(t), l)
				})
			}
		})
	}
}

func testMaxCount(t *testing.T, w *world, l core.Limit) {
	ctx := context.Background()
	lim, top := w.limiter(), core.MaxCount
	// Large counts first: on redis-server, whose key TTLs run in real time
	// while the test's clock stands still, a key holding a few events of
	// these rates (less than a µs each) lives a millisecond.
	check(t, "all but one", allowN(t, lim, "one", l, top-1), true, 1)
	check(t, "the last", allowN(t, lim, "one", l, 1), true, 0)
	check(t, "one more", allowN(t, lim, "one", l, 1), false, 0)

	check(t, "all at once", allowN(t, lim, "all", l, top), true, 0)
	check(t, "read", allowN(t, lim, "all", l, 0), true, 0)

	// A reservation settled at the largest cost is charged it all. (Half
	// the allowance: a reservation of 1 at this rate would drain in less
	// than a µs, and on redis-server its key's time to live, a
	// millisecond, runs in real time while the test's clock stands still.)
	r := reserve(t, w, lim, "settle", l, top/2)
	check(t, "reserved half", r.Result(), true, top-top/2)
	settle(t, r, top)
	check(t, "settled at the most", allowN(t, lim, "settle", l, 0), true, 0)

	// One of the whole allowance refunded leaves it whole.
	r = reserve(t, w, lim, "refund", l, top)
	check(t, "reserved all", r.Result(), true, 0)
	settle(t, r, 0)
	check(t, "refunded", allowN(t, lim, "refund", l, 0), true, top)
	r = reserve(t, w, lim, "refund", l, top/2)
	settle(t, r, top-3)
	check(t, "settled at 3 below the most", allowN(t, lim, "refund", l, 0), true, 3)

	if top == math.MaxInt {
		return
	}
	above := aboveMaxCount
	r = reserve(t, w, lim, "above", l, 1)
	if err := r.Settle(ctx, above); !errors.Is(err, core.ErrInvalidCost) || !strings.Contains(err.Error(), "want 0 to "+strconv.Itoa(top)) {
		t.Fatalf("Settle(%d) = %v, want ErrInvalidCost naming the maximum", above, err)
	}
	res := allowN(t, lim, "above", l, above)
	if res.Allowed || res.RetryAfter != core.InfDuration || res.Remaining != top-1 {
		t.Fatalf("AllowN(%d) = %+v, want denied, RetryAfter InfDuration, Remaining %d", above, res, top-1)
	}
}
