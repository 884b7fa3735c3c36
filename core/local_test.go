package core_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// localBytesPerEntry bounds the live heap the FailLocal fallback keeps per
// state (one key under one limit) once full. Measured: 193 bytes (Go 1.26,
// amd64) for this test's state names of 31 and 42 bytes (scope "api",
// algorithm, period, and a key "ip:" and six digits): the LRU's map slot,
// its list element holding the name and the time, and the name's bytes,
// so a longer key or scope costs its length more (keys over 128 bytes are
// hashed to 71).
const localBytesPerEntry = 256

// TestLocalLimiterMillionKeys drives FailLocal's limiter with a million
// distinct keys, two limits each, as a flood of new clients during an
// outage would: it never holds more than its bound of states, and its
// live heap stays proportional to that bound, not to the keys seen.
// Not parallel: it measures the heap.
//
// The race detector makes it five times slower and adds nothing to one
// goroutine's test, so under -race it stops at 200 000 keys, still over
// six times the bound.
func TestLocalLimiterMillionKeys(t *testing.T) {
	const max = 30_000
	keys := 1_000_000
	if raceEnabled {
		keys = 200_000
	}
	scopes := []string{"api", "api"}
	limits := []core.Limit{core.PerSecond(10), {Algorithm: core.FixedWindow, Rate: 1000, Period: time.Hour}}
	const n = 2
	each := make([]core.Result, len(limits))

	before := liveHeap()
	now := time.Unix(1_700_000_000, 0)
	l := core.NewLocal(max, func() time.Time { return now })
	var mid uint64
	buf := []byte("ip:")
	for i := range keys {
		key := string(strconv.AppendInt(buf[:3], int64(i), 10))
		if res, _ := l.Allow(key, scopes, limits, n, each); !res.Allowed {
			t.Fatalf("key %d, new, denied: %+v", i, res)
		}
		if kept := l.Size(); kept > max {
			t.Fatalf("after %d keys, %d states kept, over the bound %d", i+1, kept, max)
		}
		if i == keys/4 {
			mid = liveHeap()
		}
		now = now.Add(time.Microsecond)
	}
	if kept := l.Size(); kept != max {
		t.Errorf("%d states kept after %d keys, want the bound, %d", kept, keys, max)
	}
	// The most recent keys are remembered: a second request of the last
	// one is decided on its state, the first one's was evicted.
	last := "ip:" + strconv.Itoa(keys-1)
	if res, _ := l.Allow(last, scopes, limits, n, each); res.Remaining != limits[0].Capacity()-2*n {
		t.Errorf("the last key's second request: Remaining %d, want %d", res.Remaining, limits[0].Capacity()-2*n)
	}
	if res, _ := l.Allow("ip:0", scopes, limits, n, each); res.Remaining != limits[0].Capacity()-n {
		t.Errorf("the first key's second request: Remaining %d, want %d (evicted)", res.Remaining, limits[0].Capacity()-n)
	}

	end := liveHeap()
	runtime.KeepAlive(l)
	used := int64(end) - int64(before)
	perEntry := float64(used) / max
	t.Logf("%d states kept after %d keys × %d limits: live heap %d bytes, %.0f bytes per state (%d at a quarter of the keys)",
		max, keys, len(limits), used, perEntry, int64(mid)-int64(before))
	if used > localBytesPerEntry*max {
		t.Errorf("live heap %d bytes for %d states (%.0f each), over %d each", used, max, perEntry, localBytesPerEntry)
	}
	if grown := int64(end) - int64(mid); grown > localBytesPerEntry*max/10 {
		t.Errorf("live heap grew by %d bytes between a quarter and all of the keys, with the bound reached", grown)
	}
}

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestLocalLimiterKeepsDeniedKeys: a key that keeps being denied stays in
// the fallback's memory while new keys arrive; forgetting it first would
// hand it a fresh allowance.
func TestLocalLimiterKeepsDeniedKeys(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	l := core.NewLocal(3, func() time.Time { return now })
	scopes, limits := []string{"api"}, []core.Limit{core.PerMinute(1)}
	each := make([]core.Result, 1)
	if res, _ := l.Allow("abuser", scopes, limits, 1, each); !res.Allowed {
		t.Fatalf("first request denied: %+v", res)
	}
	for i := 0; i < 10; i++ {
		if res, _ := l.Allow("abuser", scopes, limits, 1, each); res.Allowed {
			t.Fatalf("after %d new keys the abuser was allowed again: its state was forgotten", i)
		}
		l.Allow("ip:"+strconv.Itoa(i), scopes, limits, 1, each)
	}
}

// TestLocalMatchesRedis: FailLocal's fallback decides GCRA limits exactly
// as the script on Redis does, one limit or several, all or nothing, a
// cost above the burst included: the same Go arithmetic (gcra) as
// lua/gcra.lua.
func TestLocalMatchesRedis(t *testing.T) {
	t.Parallel()
	lim, _, clock := miniLimiter(t, core.WithDenyCache(0))
	local := core.NewLocal(100, clock.Now)
	limits := []core.Limit{{Rate: 3, Period: time.Second, Burst: 5}, {Rate: 7, Period: time.Minute}}
	steps := []struct {
		advance time.Duration
		n       int
	}{{0, 1}, {0, 2}, {0, 2}, {0, 1}, {100 * time.Millisecond, 1}, {400 * time.Millisecond, 0},
		{0, 6}, {time.Second, 3}, {0, 1}, {10 * time.Second, 2}, {0, 2}, {time.Minute, 5}}
	for _, only := range [][]core.Limit{limits[:1], limits} {
		for i, s := range steps {
			clock.Advance(s.advance)
			key := fmt.Sprintf("k%d", len(only))
			each := make([]core.Result, len(only))
			got, _ := local.Allow(key, nil, only, s.n, each)
			want, err := lim.AllowAll(context.Background(), key, only, s.n)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%d limits, step %d (n=%d): the fallback says %+v, Redis %+v", len(only), i, s.n, got, want)
			}
		}
	}
}

// TestLocalShare: a fallback that shares a limit among 4 instances
// enforces a quarter of it, its rate and its burst: as the whole limit
// of a quarter the rate and burst would.
func TestLocalShare(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	shared, whole := core.NewLocalShare(10, 4, clock), core.NewLocal(10, clock)
	limit := core.Limit{Rate: 100, Period: time.Minute, Burst: 40}
	quarter := core.Limit{Rate: 25, Period: time.Minute, Burst: 10}
	admitted := 0
	for i := 0; i < 200; i++ {
		if i%20 == 0 {
			now = now.Add(time.Second)
		}
		a := make([]core.Result, 1)
		b := make([]core.Result, 1)
		got, _ := shared.Allow("k", nil, []core.Limit{limit}, 1, a)
		want, _ := whole.Allow("k", nil, []core.Limit{quarter}, 1, b)
		got.Limit = quarter
		if got != want {
			t.Fatalf("request %d: a quarter share of %v says %+v; %v alone says %+v", i, limit, got, quarter, want)
		}
		if got.Allowed {
			admitted++
		}
	}
	// 10 at once, then one every 2.4 s over the 9 s that follow: 3 more.
	if admitted != 13 {
		t.Fatalf("%d admitted over 10 s, want 13", admitted)
	}
	// A share's burst is at least 1, and a cost above it is never admitted.
	tiny := core.NewLocalShare(10, 50, clock)
	if res, _ := tiny.Allow("t", nil, []core.Limit{limit}, 1, make([]core.Result, 1)); !res.Allowed {
		t.Fatalf("a 50th of a burst of 40: %+v, want one request admitted", res)
	}
	if res, _ := tiny.Allow("u", nil, []core.Limit{limit}, 2, make([]core.Result, 1)); res.Allowed || res.RetryAfter != core.InfDuration {
		t.Fatalf("a cost of 2 above a share's burst of 1: %+v, want never admitted", res)
	}
}

// TestLocalEachCosts: the fallback charges each limit its own cost, all
// or nothing as Redis does, and a limit that takes up to its cost takes
// what is left.
func TestLocalEachCosts(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	l := core.NewLocal(100, func() time.Time { return at })
	limits := []core.Limit{{Rate: 3, Period: time.Minute}, {Rate: 1000, Period: time.Minute, Unit: "tokens"}}
	each := make([]core.Result, 2)
	for i, want := range []bool{true, true, false} {
		res, _ := l.AllowEach("k", limits, []int{1, 400}, 0, each)
		if res.Allowed != want {
			t.Fatalf("request %d of 400 tokens: allowed %v, want %v (%+v)", i+1, res.Allowed, want, each)
		}
	}
	if each[0].Remaining != 1 || each[1].Remaining != 200 {
		t.Fatalf("after a denial: remaining %d requests, %d tokens; want 1 and 200 (nothing charged)", each[0].Remaining, each[1].Remaining)
	}
	if res, _ := l.AllowEach("k", limits, []int{1, 400}, 1<<1, each); !res.Allowed || each[1].Remaining != 0 || each[0].Remaining != 0 {
		t.Fatalf("taking up to 400 of the last 200 tokens: %+v", each)
	}
	if res, _ := l.AllowEach("k", limits, []int{0, 400}, 1<<1, each); res.Allowed {
		t.Fatalf("no token left: allowed %+v", each)
	}
}

// TestLocalOutageShare: FailLocal's fallback admits what a limit allows
// over the outage, not a fresh period per outage. Three instances share
// each limit; Redis is down for 10 minutes, and every instance sees 5
// requests a second of one client. A quota of 60 a month admits nothing
// more (it used to admit its whole burst, 20 an instance, whatever Redis
// had counted); 1440 a day admits a minute's share of it and the
// outage's: at most rate × (outage + a minute) / period, plus one an
// instance for rounding; 10 a second starts full, as before, and keeps
// its rate. A second outage a day later, the fallback's states still
// held, adds about a minute's share again, not the day that passed
// between the outages.
func TestLocalOutageShare(t *testing.T) {
	t.Parallel()
	monthly, err := core.ParseLimit("60/month calendar")
	if err != nil {
		t.Fatal(err)
	}
	const instances, perSecond = 3, 5
	outage := 10 * time.Minute
	for _, limit := range []core.Limit{monthly, {Rate: 1440, Period: 24 * time.Hour}, core.PerSecond(10)} {
		now := time.Unix(1_700_000_000, 0)
		clock := func() time.Time { return now }
		var locals []core.TestLocal
		for range instances {
			locals = append(locals, core.NewLocalShare(100, instances, clock))
		}
		limits, each := []core.Limit{limit}, make([]core.Result, 1)
		admit := func() (admitted int) {
			for s := time.Duration(0); s < outage; s += time.Second / perSecond {
				for _, l := range locals {
					if res, _ := l.Allow("tenant", nil, limits, 1, each); res.Allowed {
						admitted++
					}
				}
				now = now.Add(time.Second / perSecond)
			}
			return admitted
		}
		first := admit()
		now = now.Add(24 * time.Hour) // Redis answers for a day
		second := admit()
		most := int(float64(limit.Rate)*(outage+time.Minute).Seconds()/limit.Period.Seconds()) + instances
		t.Logf("%v on %d instances: %d admitted over an outage of %v, %d over a second one a day later (bound %d)",
			limit, instances, first, outage, second, most)
		if first > most || second > most {
			t.Errorf("%v on %d instances: %d and %d admitted over outages of %v; at most %d each (the outage's share and a minute's)",
				limit, instances, first, second, outage, most)
		}
		if limit.Period == time.Second && first < limit.Rate*int(outage/time.Second)-instances {
			t.Errorf("%v: %d admitted over %v; a limit that refills within a minute starts full and keeps its rate", limit, first, outage)
		}
	}
}

// TestLocalRetryAfterBound: a denial of the fallback says to come back
// within a minute at the latest, whatever the limit's period: it cannot
// know what Redis will say once it answers.
func TestLocalRetryAfterBound(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	l := core.NewLocal(10, func() time.Time { return now })
	limits := []core.Limit{core.PerHour(2)}
	var res core.Result
	for i := 0; i < 3; i++ {
		res, _ = l.Allow("k", nil, limits, 1, make([]core.Result, 1))
	}
	if res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > time.Minute {
		t.Fatalf("the third request under %v: %+v; want denied, RetryAfter within a minute", limits[0], res)
	}
}
