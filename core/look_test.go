package core_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// lookLimits are one limit of every algorithm and variant, with the
// calendar window and a Concurrency limit: what Look and a cost of 0
// must read on every one.
var lookLimits = []string{
	"10/h", "10/h token_bucket", "10/h token_bucket stepped", "10/h leaky_bucket",
	"10/h leaky_bucket shape", "10/h fixed_window", "10/d fixed_window calendar=Europe/Berlin",
	"10/h sliding_window", "10/h sliding_log", "10 concurrent lease=1h",
}

func parseAll(t *testing.T, specs []string) []core.Limit {
	t.Helper()
	limits := make([]core.Limit, len(specs))
	for i, s := range specs {
		l, err := core.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		limits[i] = l
	}
	return limits
}

// snapshot is what a Redis server holds under prefix: each key's value
// (DUMP) and time to live, and the server's count of writes since its
// last save (INFO's rdb_changes_since_last_save), which any write moves:
// a SET, an HSET, a ZADD, a PEXPIRE, a DEL of a key that was there.
type snapshot struct {
	values map[string]string
	ttls   map[string]time.Duration
	dirty  int
}

func snap(t *testing.T, rdb *redis.Client, prefix string) snapshot {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot{values: map[string]string{}, ttls: map[string]time.Duration{}}
	for _, k := range keys {
		v, err := rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		s.values[k] = fmt.Sprintf("%q", v)
		// A time to live falls as the real clock runs: a write that set it
		// again shows as a rise (checked by the caller).
		s.ttls[k] = rdb.PTTL(ctx, k).Val()
	}
	info := rdb.Info(ctx, "persistence").Val()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_changes_since_last_save:"); ok {
			s.dirty, _ = strconv.Atoi(v)
		}
	}
	return s
}

// TestCostZeroWritesNothing: a decision of cost 0 (AllowN, AllowAll and a
// Reserve of 0 for a Concurrency limit) and Look read every algorithm's
// state and write nothing on a real redis-server: no key made, changed,
// deleted or given a new time to live, whether the key is absent, in use,
// full or in debt, alone or with every other limit in one decision.
func TestCostZeroWritesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	limits := parseAll(t, lookLimits)
	scopes := make([]string, len(limits)) // a shaping leaky bucket's state is the policing one's: kept apart by scope
	for i := range scopes {
		scopes[i] = fmt.Sprint("s", i)
	}
	lim := core.New(rdb, patient, core.WithPrefix("zero:"), core.WithDenyCache(0))
	// decide decides limits[i] (all for i < 0) for key in their scopes at
	// cost n, as the HTTP layer does, and returns what it held.
	decide := func(t *testing.T, key string, i, n int) *core.Reservation {
		t.Helper()
		q := core.Request{Key: key, Limits: limits, Scopes: scopes, N: n, Reserve: true}
		if i >= 0 {
			q.Limits, q.Scopes = limits[i:i+1], scopes[i:i+1]
		}
		d, err := lim.Decide(ctx, &q)
		if err != nil || n > 0 && !d.Allowed { // a cost of 0 is denied in debt
			t.Fatalf("Decide %v at %d: %+v, %v", q.Limits, n, d, err)
		}
		if _, err := lim.Look(ctx, &q); err != nil {
			t.Fatal(err)
		}
		return d.Reservation
	}
	reads := func(t *testing.T, key string) {
		t.Helper()
		for i, l := range limits {
			if l.Algorithm != core.Concurrency { // AllowN refuses it: only Reserve takes slots
				if _, err := lim.AllowN(ctx, key, l, 0); err != nil {
					t.Fatal(err)
				}
			}
			decide(t, key, i, 0)
		}
		decide(t, key, -1, 0)
	}
	for _, state := range []string{"absent", "used", "full", "debt"} {
		t.Run(state, func(t *testing.T) {
			key := "k-" + state
			for i, l := range limits {
				switch state {
				case "used":
					decide(t, key, i, 3)
				case "full":
					decide(t, key, i, l.Capacity())
				case "debt":
					if err := decide(t, key, i, 5).Settle(ctx, l.Capacity()+5); err != nil {
						t.Fatal(err)
					}
				}
			}
			before := snap(t, rdb, "zero:")
			reads(t, key)
			after := snap(t, rdb, "zero:")
			if after.dirty != before.dirty {
				t.Errorf("reads of cost 0 wrote %d times", after.dirty-before.dirty)
			}
			for k, v := range before.values {
				if after.values[k] != v {
					t.Errorf("%s: %s, then %s", k, v, after.values[k])
				}
				if after.ttls[k] > before.ttls[k] {
					t.Errorf("%s: time to live %v, then %v: set again", k, before.ttls[k], after.ttls[k])
				}
			}
			if len(after.values) != len(before.values) {
				t.Errorf("%d keys, then %d", len(before.values), len(after.values))
			}
		})
	}
}

// TestLook: what Look reads of every algorithm, on miniredis, a real
// redis-server and a Cluster: the remaining count, the slots held, a debt, each under
// the name Decide keeps it under in its scope; and ResetRequest forgets
// exactly the Request's limits in their scopes.
func TestLook(t *testing.T) {
	t.Parallel()
	for _, b := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"miniredis", func(t *testing.T) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		}},
		{"redis-server", func(t *testing.T) redis.UniversalClient { return redistest.Standalone(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.NewCluster(t, 3).Client(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testLook(t, b.rdb(t))
		})
	}
}

func testLook(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	now := time.Date(2025, 11, 12, 10, 0, 0, 0, time.UTC)
	lim := core.New(rdb, patient, core.WithClock(func() time.Time { return now }))
	for _, l := range parseAll(t, lookLimits) {
		t.Run(l.String(), func(t *testing.T) {
			look := func(key string) core.State {
				t.Helper()
				s, err := lim.Look(ctx, &core.Request{Key: key, Limits: []core.Limit{l}, Scopes: []string{"api"}})
				if err != nil || len(s) != 1 {
					t.Fatalf("Look: %v, %v", s, err)
				}
				return s[0]
			}
			ask := func(key string, n int) *core.Reservation {
				t.Helper()
				d, err := lim.Decide(ctx, &core.Request{Key: key, Limits: []core.Limit{l}, Scopes: []string{"api"}, N: n, Reserve: true})
				if err != nil || !d.Allowed {
					t.Fatalf("Decide: %+v, %v", d, err)
				}
				return d.Reservation
			}
			key := func(k string) string { return l.String() + "/" + k } // shaping and policing leaky buckets share state
			if s := look(key("fresh")); !s.Allowed || s.Remaining != 10 || s.Held != 0 || s.Debt != 0 {
				t.Errorf("fresh: %+v", s)
			}
			ask(key("used"), 3)
			s := look(key("used"))
			if s.Remaining != 7 || !s.Allowed || s.Debt != 0 {
				t.Errorf("3 used: %+v", s)
			}
			if want := 0; l.Algorithm == core.Concurrency {
				if want = 3; s.Held != want {
					t.Errorf("3 held: Held %d", s.Held)
				}
			} else if s.Held != want {
				t.Errorf("Held %d of a limit that holds no slots", s.Held)
			}
			if want := "redlimit:api:{" + key("used") + "}:"; !strings.HasPrefix(s.Key, want) {
				t.Errorf("Key %q, want it to start %q", s.Key, want)
			}
			if n, _ := rdb.Exists(ctx, s.Key).Result(); n != 1 {
				t.Errorf("no key %q in Redis", s.Key)
			}
			if l.Algorithm != core.Concurrency { // slots hold no debt
				r := ask(key("debt"), 5)
				if err := r.Settle(ctx, 15); err != nil { // 5 beyond the 10
					t.Fatal(err)
				}
				s = look(key("debt"))
				if s.Allowed || s.Remaining != 0 || s.Debt != 5 || s.RetryAfter <= 0 {
					t.Errorf("in debt by 5: %+v", s)
				}
				// A decision of cost 0 denies while in debt (ReserveEach's contract), on every algorithm.
				d, err := lim.Decide(ctx, &core.Request{Key: key("debt"), Limits: []core.Limit{l}, Scopes: []string{"api"}})
				if err != nil || d.Allowed || d.RetryAfter != s.RetryAfter {
					t.Errorf("cost 0 in debt: %+v, %v; want denied until the debt is paid, in %v", d.Result, err, s.RetryAfter)
				}
			}
			if err := lim.ResetRequest(ctx, &core.Request{Key: key("used"), Limits: []core.Limit{l}, Scopes: []string{"other"}}); err != nil {
				t.Fatal(err)
			}
			if s := look(key("used")); s.Remaining != 7 {
				t.Errorf("reset in another scope: %+v", s)
			}
			if err := lim.ResetRequest(ctx, &core.Request{Key: key("used"), Limits: []core.Limit{l}, Scopes: []string{"api"}}); err != nil {
				t.Fatal(err)
			}
			if s := look(key("used")); s.Remaining != 10 || s.Held != 0 {
				t.Errorf("reset: %+v", s)
			}
		})
	}
}

// TestLimitWindow: a calendar limit's window is the calendar's, its true
// length: 30 days in November, 28 in February 2025, 23 hours on the day
// Berlin moves its clocks forward.
func TestLimitWindow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limit string
		at    time.Time
		want  time.Duration
	}{
		{"1/month calendar", time.Date(2025, 11, 12, 10, 0, 0, 0, time.UTC), 30 * 24 * time.Hour},
		{"1/month calendar", time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC), 28 * 24 * time.Hour},
		{"1/month calendar", time.Date(2025, 1, 31, 23, 59, 59, 0, time.UTC), 31 * 24 * time.Hour},
		{"1/d calendar=Europe/Berlin", time.Date(2025, 3, 30, 12, 0, 0, 0, time.UTC), 23 * time.Hour},
		{"1/d calendar=Europe/Berlin", time.Date(2025, 10, 26, 12, 0, 0, 0, time.UTC), 25 * time.Hour},
		{"1/w calendar", time.Date(2025, 11, 12, 10, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
	} {
		l, err := core.ParseLimit(c.limit)
		if err != nil {
			t.Fatal(err)
		}
		start, end, ok := l.Window(c.at)
		if !ok || end.Sub(start) != c.want || c.at.Before(start) || !c.at.Before(end) {
			t.Errorf("%s at %v: [%v, %v) %v, want %v long around it", c.limit, c.at, start, end, ok, c.want)
		}
	}
	if _, _, ok := core.PerHour(1).Window(time.Now()); ok {
		t.Error("a limit not on the calendar has a window")
	}
}
