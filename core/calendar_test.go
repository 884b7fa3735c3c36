package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// Calendar windows: fixed windows that follow the calendar in a time zone
// (a day from local midnight, a week from Monday, a month from the first).
// Every instant below is written in UTC and was worked out by hand from
// the zone's rules, so the tests check the library's DST arithmetic
// against the IANA data instead of against itself.

// calWorld is a world whose clock can be set to an instant.
type calWorld struct {
	*world
	now time.Time
}

// at moves the world's clock (the server's or the client's) to t.
func (w *calWorld) at(t time.Time) {
	w.advance(t.Sub(w.now))
	w.now = t
}

// calendarWorlds runs f on three backends: miniredis deciding on its own
// clock (TIME, moved with SetTime, as in production), miniredis on the
// client's clock (core.WithClock), and a real redis-server on the client's
// clock. newWorld makes an isolated world (its own prefix) on the backend.
func calendarWorlds(t *testing.T, f func(t *testing.T, newWorld func(t *testing.T) *calWorld)) {
	t.Helper()
	wrap := func(w *world) *calWorld { return &calWorld{world: w, now: t0} }
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		f(t, func(t *testing.T) *calWorld { return wrap(miniredisWorld(t)) })
	})
	t.Run("miniredis-clock", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		f(t, func(t *testing.T) *calWorld {
			return wrap(realWorld(t, func() redis.UniversalClient {
				c := redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}))
		})
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Standalone(t)
		f(t, func(t *testing.T) *calWorld {
			return wrap(realWorld(t, func() redis.UniversalClient { return srv.Client(t) }))
		})
	})
}

// utc reads an RFC 3339 instant.
func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// calLimit parses a limit or fails the test.
func calLimit(t *testing.T, s string) core.Limit {
	t.Helper()
	l, err := core.ParseLimit(s)
	if err != nil {
		t.Fatalf("ParseLimit(%q): %v", s, err)
	}
	return l
}

// calZone loads an IANA zone or fails the test.
func calZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time.LoadLocation(%q): %v (is /usr/share/zoneinfo installed?)", name, err)
	}
	return loc
}

// calKey is the documented state key of a calendar limit:
// <prefix>{key}:fixed_window:calendar:<zone>:1d (1w, 1month).
func calKey(prefix, key string, l core.Limit) string {
	period := map[time.Duration]string{24 * time.Hour: "1d", 7 * 24 * time.Hour: "1w", calMonth: "1month"}[l.Period]
	return prefix + "{" + key + "}:fixed_window:calendar:" + l.Calendar + ":" + period
}

// calMonth is a "month" Limit's Period: the mean Gregorian month.
const calMonth = 2_629_746 * time.Second

// calExpect checks a calendar window's result: allowed, remaining, and
// ResetAfter to the exact microsecond. A window that holds events reports
// NextAfter as ResetAfter (nothing comes back before the boundary), and a
// denial's RetryAfter is the same time too.
func calExpect(t *testing.T, what string, res core.Result, allowed bool, remaining int, reset time.Duration) {
	t.Helper()
	check(t, what, res, allowed, remaining)
	if res.ResetAfter != reset {
		t.Fatalf("%s: ResetAfter %v, want %v (result %+v)", what, res.ResetAfter, reset, res)
	}
	if res.NextAfter != reset {
		t.Fatalf("%s: NextAfter %v, want %v, the time to the boundary (result %+v)", what, res.NextAfter, reset, res)
	}
	if !allowed && res.RetryAfter != reset {
		t.Fatalf("%s: RetryAfter %v, want %v, the time to the boundary (result %+v)", what, res.RetryAfter, reset, res)
	}
}

// calPeek returns how many events the limit has left for key, counting
// nothing.
func calPeek(t *testing.T, lim decider, key string, l core.Limit) int {
	t.Helper()
	return allowN(t, lim, key, l, 0).Remaining
}

// TestCalendarParse: the calendar grammar, what each accepted string
// gives and how String writes it back (to an equal Limit), and the errors
// of what is refused, each saying what is wrong.
func TestCalendarParse(t *testing.T) {
	t.Parallel()
	const day, week = 24 * time.Hour, 7 * 24 * time.Hour
	for _, c := range []struct {
		in     string
		want   core.Limit
		string string
	}{
		{"1000/d calendar=Europe/Berlin", core.Limit{Algorithm: core.FixedWindow, Rate: 1000, Period: day, Calendar: "Europe/Berlin"},
			"1000/d fixed_window calendar=Europe/Berlin"},
		{"5/w calendar", core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: week, Calendar: "UTC"},
			"5/w fixed_window calendar"},
		{"100000/month fixed_window calendar", core.Limit{Algorithm: core.FixedWindow, Rate: 100000, Period: calMonth, Calendar: "UTC"},
			"100000/month fixed_window calendar"},
		{"3/d fixed_window calendar=America/New_York", core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: day, Calendar: "America/New_York"},
			"3/d fixed_window calendar=America/New_York"},
		// The same limits written otherwise.
		{"1000/1d calendar=UTC", core.Limit{Algorithm: core.FixedWindow, Rate: 1000, Period: day, Calendar: "UTC"},
			"1000/d fixed_window calendar"},
		{"7/24h calendar=Asia/Tokyo fixed_window", core.Limit{Algorithm: core.FixedWindow, Rate: 7, Period: day, Calendar: "Asia/Tokyo"},
			"7/d fixed_window calendar=Asia/Tokyo"},
		{"10/1month calendar=Europe/Berlin", core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: calMonth, Calendar: "Europe/Berlin"},
			"10/month fixed_window calendar=Europe/Berlin"},
		{"2/w fixed_window burst=2 calendar=Australia/Lord_Howe", core.Limit{Algorithm: core.FixedWindow, Rate: 2, Period: week, Burst: 2, Calendar: "Australia/Lord_Howe"},
			"2/w fixed_window burst=2 calendar=Australia/Lord_Howe"},
	} {
		got, err := core.ParseLimit(c.in)
		if err != nil {
			t.Errorf("ParseLimit(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseLimit(%q) = %+v, want %+v", c.in, got, c.want)
		}
		if s := got.String(); s != c.string {
			t.Errorf("ParseLimit(%q).String() = %q, want %q", c.in, s, c.string)
		}
		if back, err := core.ParseLimit(got.String()); err != nil || back != got {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v back", got.String(), back, err, got)
		}
		if err := c.want.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v", c.want, err)
		}
	}

	for _, c := range []struct {
		in   string
		says []string
	}{
		{"10/month", []string{`a month is a period only on the calendar`, `add "calendar"`}},
		{"10/month gcra", []string{`a month is a period only on the calendar`}},
		{"10/d gcra calendar", []string{`calendar is a fixed_window setting, not gcra`}},
		{"10/d sliding_log calendar", []string{`calendar is a fixed_window setting, not sliding_log`}},
		{"10/h calendar", []string{`a calendar window is a day, a week or a month`, `not h`}},
		{"10/2d calendar", []string{`a calendar window is a day, a week or a month`, `not 2d`}},
		{"10/30d calendar", []string{`a calendar window is a day, a week or a month`}},
		{"10/d calendar=Mars/Olympus", []string{`calendar="Mars/Olympus"`, `unknown time zone Mars/Olympus`}},
		{"10/d calendar=Local", []string{`calendar="Local"`, `name a time zone`}},
		{"10/d calendar=", []string{`unknown option "calendar="`}},
		{"10/d calendar calendar=UTC", []string{`calendar given twice`}},
		{"10/d burst=11 calendar", []string{`burst 11 must be 0 or equal to rate 10`}},
	} {
		_, err := core.ParseLimit(c.in)
		if !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q) = %v, want an error wrapping ErrInvalidLimit", c.in, err)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("ParseLimit(%q) = %q, want it to say %q", c.in, err, s)
			}
		}
		if !strings.Contains(err.Error(), c.in) {
			t.Errorf("ParseLimit(%q) = %q, want it to quote the limit", c.in, err)
		}
	}

	// Limits built as structs: Validate refuses them with the same words,
	// and a decision returns the error instead of running.
	lim, _, _ := miniLimiter(t)
	for _, c := range []struct {
		l    core.Limit
		says string
	}{
		{core.Limit{Rate: 1, Period: day, Calendar: "UTC"}, "calendar is a fixed_window setting, not gcra"},
		{core.Limit{Algorithm: core.TokenBucket, Rate: 1, Period: day, Calendar: "UTC"}, "calendar is a fixed_window setting, not token_bucket"},
		{core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: time.Hour, Calendar: "UTC"}, "a calendar window is a day, a week or a month"},
		{core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: 30 * day, Calendar: "UTC"}, "a calendar window is a day, a week or a month"},
		{core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: day, Calendar: "Local"}, `name a time zone`},
		{core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: day, Calendar: "Europe/Atlantis"}, `unknown time zone`},
	} {
		if err := c.l.Validate(); !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidLimit saying %q", c.l, err, c.says)
		}
		if _, err := lim.Allow(context.Background(), "k", c.l); !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("Allow with %+v: %v, want ErrInvalidLimit", c.l, err)
		}
	}
	// A month Limit built as a struct prints as ParseLimit reads it.
	if s := (core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: calMonth, Calendar: "Europe/Berlin"}).String(); s != "1/month fixed_window calendar=Europe/Berlin" {
		t.Errorf("a month Limit's String() = %q", s)
	}
}

// calDay is a day of a zone with a DST change: its local midnight, the
// switch, and the next local midnight, in UTC.
type calDay struct {
	name                      string
	zone                      string
	midnight, change, end     time.Time
	length                    time.Duration // end - midnight
	offsetBefore, offsetAfter int           // the zone's UTC offsets before and after the switch, in hours
}

var calDSTDays = []calDay{
	// CET → CEST at 02:00 local (01:00 UTC): 23 hours.
	{"Berlin-spring", "Europe/Berlin", utc("2026-03-28T23:00:00Z"), utc("2026-03-29T01:00:00Z"), utc("2026-03-29T22:00:00Z"), 23 * time.Hour, 1, 2},
	// CEST → CET at 03:00 local (01:00 UTC): 25 hours.
	{"Berlin-autumn", "Europe/Berlin", utc("2026-10-24T22:00:00Z"), utc("2026-10-25T01:00:00Z"), utc("2026-10-25T23:00:00Z"), 25 * time.Hour, 2, 1},
	// EST → EDT at 02:00 local (07:00 UTC): 23 hours.
	{"NewYork-spring", "America/New_York", utc("2026-03-08T05:00:00Z"), utc("2026-03-08T07:00:00Z"), utc("2026-03-09T04:00:00Z"), 23 * time.Hour, -5, -4},
	// EDT → EST at 02:00 local (06:00 UTC): 25 hours.
	{"NewYork-autumn", "America/New_York", utc("2026-11-01T04:00:00Z"), utc("2026-11-01T06:00:00Z"), utc("2026-11-02T05:00:00Z"), 25 * time.Hour, -4, -5},
}

// TestCalendarDST: a day window across a DST change, on each backend.
// At every instant of the day (just after midnight, just before and after
// the switch, just before the next midnight) ResetAfter is exactly the
// time to the next local midnight, so the day is 23 or 25 hours long; the
// key lives as long; the day's allowance is shared across the switch; the
// next day starts at local midnight with the full allowance, as the
// previous day ended at this midnight. Concurrent clients on both sides of
// the switch (batched decisions) admit exactly the day's allowance.
func TestCalendarDST(t *testing.T) {
	t.Parallel()
	// The table's instants are the zone's, by the IANA data.
	for _, d := range calDSTDays {
		loc := calZone(t, d.zone)
		for _, at := range []time.Time{d.midnight, d.end} {
			if l := at.In(loc); l.Hour() != 0 || l.Minute() != 0 || l.Second() != 0 {
				t.Fatalf("%s: %v is %v locally, not midnight", d.name, at, l)
			}
		}
		_, before := d.change.Add(-time.Second).In(loc).Zone()
		_, after := d.change.In(loc).Zone()
		if before != d.offsetBefore*3600 || after != d.offsetAfter*3600 || d.end.Sub(d.midnight) != d.length {
			t.Fatalf("%s: offsets %d→%d s, length %v; the table is wrong", d.name, before, after, d.end.Sub(d.midnight))
		}
	}

	calendarWorlds(t, func(t *testing.T, newWorld func(t *testing.T) *calWorld) {
		for _, d := range calDSTDays {
			t.Run(d.name, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t)
				l := calLimit(t, "5/d calendar="+d.zone)
				lim := w.limiter()
				ctx := context.Background()

				// The day before ends at this midnight: a window of its own.
				w.at(d.midnight.Add(-time.Second))
				calExpect(t, "a second before midnight", allowN(t, lim, "k", l, 1), true, 4, time.Second)

				w.at(d.midnight)
				calExpect(t, "at midnight", allowN(t, lim, "k", l, 1), true, 4, d.length)
				key := calKey(w.prefix, "k", l)
				if ttl := w.admin.PTTL(ctx, key).Val(); ttl > d.length || ttl < d.length-time.Minute {
					t.Fatalf("%s: TTL %v, want the day's %v", key, ttl, d.length)
				}

				w.at(d.midnight.Add(time.Second))
				calExpect(t, "just after midnight", allowN(t, lim, "k", l, 1), true, 3, d.length-time.Second)
				w.at(d.change.Add(-time.Second))
				calExpect(t, "just before the switch", allowN(t, lim, "k", l, 1), true, 2, d.end.Sub(w.now))
				w.at(d.change.Add(time.Second))
				calExpect(t, "just after the switch", allowN(t, lim, "k", l, 1), true, 1, d.end.Sub(w.now))
				w.at(d.end.Add(-time.Second))
				calExpect(t, "just before midnight", allowN(t, lim, "k", l, 1), true, 0, time.Second)
				calExpect(t, "the sixth event of the day", allowN(t, lim, "k", l, 1), false, 0, time.Second)
				calExpect(t, "denied again (deny cache)", allowN(t, lim, "k", l, 1), false, 0, time.Second)

				w.at(d.end)
				calExpect(t, "at the next midnight", allowN(t, lim, "k", l, 1), true, 4, 24*time.Hour)

				// Clients of their own, all at one instant on either side of
				// the switch: exactly the day's 5, then 5 the next day.
				for _, c := range []struct {
					at   time.Time
					want int64
				}{{d.change.Add(-time.Millisecond), 5}, {d.change, 0}, {d.end, 5}} {
					w.at(c.at)
					if got := calCrowd(t, w, "crowd", l); got != c.want {
						t.Fatalf("at %v: %d of 40 concurrent events admitted, want %d", c.at, got, c.want)
					}
				}
			})
		}
	})
}

// calCrowd sends 40 single events for key under l at once from 4 clients
// and returns how many were admitted.
func calCrowd(t *testing.T, w *calWorld, key string, l core.Limit) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 4 {
		lim := w.limiter()
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := lim.Allow(context.Background(), key, l)
				if err != nil {
					errs <- err
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return admitted.Load()
}

// calStep is one decision of a single event at an instant, and what it
// must give.
type calStep struct {
	what      string
	at        time.Time
	remaining int
	reset     time.Duration
}

// calSteps runs steps in order on one key of a new world, each an
// allowed single event.
func calSteps(t *testing.T, w *calWorld, l core.Limit, steps []calStep) {
	t.Helper()
	lim := w.limiter()
	for _, s := range steps {
		w.at(s.at)
		calExpect(t, s.what, allowN(t, lim, "k", l, 1), true, s.remaining, s.reset)
	}
}

// TestCalendarMonth: month windows start on the first at local midnight
// and last to the next first: 28 days in February 2026, 29 in February
// 2028, 31 days less an hour in a March whose DST change shortens it;
// January 31 23:59:59 and February 1 00:00:00 are different windows; at
// mid-month ResetAfter runs to the first of the next month.
func TestCalendarMonth(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	zones := []struct {
		zone  string
		steps []calStep
	}{
		{"UTC", []calStep{
			{"2026-01-31 23:59:59", utc("2026-01-31T23:59:59Z"), 2, time.Second},
			{"2026-02-01 00:00:00", utc("2026-02-01T00:00:00Z"), 2, 28 * day},
			{"2026-02-15 12:00", utc("2026-02-15T12:00:00Z"), 1, 13*day + 12*time.Hour},
			{"2026-02-28 23:59:59", utc("2026-02-28T23:59:59Z"), 0, time.Second},
			{"2026-03-01 00:00", utc("2026-03-01T00:00:00Z"), 2, 31 * day},
			{"2026-03-15 12:00", utc("2026-03-15T12:00:00Z"), 1, 16*day + 12*time.Hour},
			{"2028-02-01 00:00", utc("2028-02-01T00:00:00Z"), 2, 29 * day},
			{"2028-02-29 23:59:59", utc("2028-02-29T23:59:59Z"), 1, time.Second},
			{"2028-03-01 00:00", utc("2028-03-01T00:00:00Z"), 2, 31 * day},
		}},
		{"Europe/Berlin", []calStep{
			{"2026-01-31 23:59:59 CET", utc("2026-01-31T22:59:59Z"), 2, time.Second},
			{"2026-02-01 00:00:00 CET", utc("2026-01-31T23:00:00Z"), 2, 28 * day},
			{"2026-02-15 12:00 CET", utc("2026-02-15T11:00:00Z"), 1, 13*day + 12*time.Hour},
			{"2026-02-28 23:59:59 CET", utc("2026-02-28T22:59:59Z"), 0, time.Second},
			{"2026-03-01 00:00 CET", utc("2026-02-28T23:00:00Z"), 2, 31*day - time.Hour},
			{"2026-03-15 12:00 CET", utc("2026-03-15T11:00:00Z"), 1, 16*day + 11*time.Hour},
			{"2026-03-31 23:59:59 CEST", utc("2026-03-31T21:59:59Z"), 0, time.Second},
			{"2026-04-01 00:00 CEST", utc("2026-03-31T22:00:00Z"), 2, 30 * day},
			{"2028-02-01 00:00 CET", utc("2028-01-31T23:00:00Z"), 2, 29 * day},
			{"2028-02-29 23:59:59 CET", utc("2028-02-29T22:59:59Z"), 1, time.Second},
			{"2028-03-01 00:00 CET", utc("2028-02-29T23:00:00Z"), 2, 31*day - time.Hour},
		}},
	}
	calendarWorlds(t, func(t *testing.T, newWorld func(t *testing.T) *calWorld) {
		for _, z := range zones {
			t.Run(z.zone, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t)
				l := calLimit(t, "3/month calendar="+z.zone)
				calSteps(t, w, l, z.steps)
				key := calKey(w.prefix, "k", l)
				if n := w.admin.Exists(context.Background(), key).Val(); n != 1 {
					t.Fatalf("no key %s", key)
				}
			})
		}
	})
}

// TestCalendarWeek: week windows start on Monday at local midnight. A
// Sunday 23:59 and the Monday 00:00 after it are different windows; a
// week over a DST change is 167 or 169 hours; ResetAfter at mid-week runs
// to the next Monday.
func TestCalendarWeek(t *testing.T) {
	t.Parallel()
	const week = 7 * 24 * time.Hour
	// 2026-03-01 is a Sunday; New York changes to EDT on Sunday 2026-03-08,
	// Berlin to CEST on Sunday 2026-03-29 and back on Sunday 2026-10-25.
	zones := []struct {
		zone  string
		steps []calStep
	}{
		{"UTC", []calStep{
			{"Sun 2026-03-01 23:59", utc("2026-03-01T23:59:00Z"), 2, time.Minute},
			{"Mon 2026-03-02 00:00", utc("2026-03-02T00:00:00Z"), 2, week},
			{"Wed 2026-03-04 12:00", utc("2026-03-04T12:00:00Z"), 1, 4*24*time.Hour + 12*time.Hour},
			{"Sun 2026-03-08 23:59:59", utc("2026-03-08T23:59:59Z"), 0, time.Second},
			{"Mon 2026-03-09 00:00", utc("2026-03-09T00:00:00Z"), 2, week},
		}},
		{"America/New_York", []calStep{
			{"Sun 2026-03-01 23:59 EST", utc("2026-03-02T04:59:00Z"), 2, time.Minute},
			{"Mon 2026-03-02 00:00 EST", utc("2026-03-02T05:00:00Z"), 2, week - time.Hour},
			{"Wed 2026-03-04 12:00 EST", utc("2026-03-04T17:00:00Z"), 1, 4*24*time.Hour + 11*time.Hour},
			{"Sun 2026-03-08 23:59:59 EDT", utc("2026-03-09T03:59:59Z"), 0, time.Second},
			{"Mon 2026-03-09 00:00 EDT", utc("2026-03-09T04:00:00Z"), 2, week},
		}},
		{"Europe/Berlin", []calStep{
			{"Sun 2026-03-01 23:59 CET", utc("2026-03-01T22:59:00Z"), 2, time.Minute},
			{"Mon 2026-03-02 00:00 CET", utc("2026-03-01T23:00:00Z"), 2, week},
			{"Sun 2026-03-08 23:59:59 CET", utc("2026-03-08T22:59:59Z"), 1, time.Second},
			{"Mon 2026-03-23 00:00 CET", utc("2026-03-22T23:00:00Z"), 2, week - time.Hour},
			{"Sun 2026-03-29 23:59:59 CEST", utc("2026-03-29T21:59:59Z"), 1, time.Second},
			{"Mon 2026-10-19 00:00 CEST", utc("2026-10-18T22:00:00Z"), 2, week + time.Hour},
			{"Sun 2026-10-25 12:00 CET", utc("2026-10-25T11:00:00Z"), 1, 12 * time.Hour},
			{"Mon 2026-10-26 00:00 CET", utc("2026-10-25T23:00:00Z"), 2, week},
		}},
	}
	calendarWorlds(t, func(t *testing.T, newWorld func(t *testing.T) *calWorld) {
		for _, z := range zones {
			t.Run(z.zone, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t)
				l := calLimit(t, "3/w calendar="+z.zone)
				calSteps(t, w, l, z.steps)
				key := calKey(w.prefix, "k", l)
				if n := w.admin.Exists(context.Background(), key).Val(); n != 1 {
					t.Fatalf("no key %s", key)
				}
			})
		}
	})
}

// calSkewed is a Limiter on the Redis server's clock whose own clock (the
// one it computes calendar boundaries with) is the process's moved by
// skew, or base's moved by skew when base is set.
func calSkewed(rdb redis.UniversalClient, prefix string, base func() time.Time, skew time.Duration) *core.Limiter {
	if base == nil {
		base = time.Now
	}
	return core.New(rdb, patient, core.WithPrefix(prefix), core.WithDenyCache(0),
		core.WithLocalClock(func() time.Time { return base().Add(skew) }))
}

// calSkewError checks that a decision whose client clock is far from the
// Redis clock failed, saying why, and did not panic or pass.
func calSkewError(t *testing.T, what string, res core.Result, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: %+v, no error; want the decision to fail", what, res)
	}
	if !strings.Contains(err.Error(), "calendar windows") {
		t.Fatalf("%s: %v, want an error naming the calendar windows", what, err)
	}
}

// TestCalendarRedisClockDecides: the client computes the boundaries
// around its clock, the script picks the window that holds the Redis
// clock's now. A client 10 minutes off, even across a midnight, counts in
// the window of the Redis clock, and shares it with the others; one 40
// days off fails with an error naming the calendar windows, and counts
// nothing (in a decision with other limits, those are not charged
// either).
func TestCalendarRedisClockDecides(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// miniredis, whose clock the test sets: Redis at 23:55 in Berlin on the
	// 23-hour day, a client in the next day, one 10 minutes behind.
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		var mu sync.Mutex
		redisNow := utc("2026-03-29T21:55:00Z") // 23:55 CEST
		setRedis := func(at time.Time) {
			mu.Lock()
			defer mu.Unlock()
			redisNow = at
			m.SetTime(at)
		}
		setRedis(redisNow)
		base := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return redisNow
		}
		prefix := uniquePrefix()
		l := calLimit(t, "5/d calendar=Europe/Berlin")
		exact := calSkewed(rdb, prefix, base, 0)
		ahead := calSkewed(rdb, prefix, base, 10*time.Minute)
		behind := calSkewed(rdb, prefix, base, -10*time.Minute)

		calExpect(t, "ahead, in the next day", allowN(t, ahead, "k", l, 1), true, 4, 5*time.Minute)
		calExpect(t, "behind", allowN(t, behind, "k", l, 1), true, 3, 5*time.Minute)
		calExpect(t, "exact", allowN(t, exact, "k", l, 1), true, 2, 5*time.Minute)

		setRedis(utc("2026-03-29T22:05:00Z")) // 00:05 on the 30th, a 24-hour day
		calExpect(t, "behind, in the previous day", allowN(t, behind, "k", l, 1), true, 4, 23*time.Hour+55*time.Minute)
		calExpect(t, "ahead", allowN(t, ahead, "k", l, 1), true, 3, 23*time.Hour+55*time.Minute)

		// About a day off still finds the window among those it sends
		// (the day before this one is 23 hours long).
		for _, c := range []struct {
			skew      time.Duration
			remaining int
		}{{-23 * time.Hour, 2}, {24 * time.Hour, 1}} {
			res := allowN(t, calSkewed(rdb, prefix, base, c.skew), "k", l, 1)
			calExpect(t, fmt.Sprintf("%v off", c.skew), res, true, c.remaining, 23*time.Hour+55*time.Minute)
		}

		gcra := core.PerHour(10)
		var errs []error
		for _, skew := range []time.Duration{40 * 24 * time.Hour, -40 * 24 * time.Hour} {
			far := calSkewed(rdb, prefix, base, skew)
			res, err := far.Allow(ctx, "k", l)
			if err == nil {
				t.Fatalf("%v off: %+v, no error; want the decision to fail", skew, res)
			}
			errs = append(errs, err)
			res, err = far.AllowAll(ctx, "k", []core.Limit{gcra, l}, 1)
			if err == nil {
				t.Fatalf("%v off, with a gcra limit: %+v, no error; want the decision to fail", skew, res)
			}
			errs = append(errs, err)
		}
		if got := calPeek(t, exact, "k", l); got != 1 {
			t.Fatalf("after the failed decisions: %d left, want 1", got)
		}
		if got := calPeek(t, exact, "k", gcra); got != 10 {
			t.Fatalf("the gcra limit of a failed decision: %d left, want 10 (nothing charged)", got)
		}
		t.Run("error text", func(t *testing.T) {
			for _, err := range errs {
				if !strings.Contains(err.Error(), "calendar windows") {
					t.Fatalf("the error does not say what went wrong: %q", err)
				}
			}
		})
	})

	// A real redis-server on the real clock: the zone is chosen so that its
	// local time is about noon, and skews move the client's clock across
	// the local midnights either side.
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Standalone(t)
		rdb := srv.Client(t)
		prefix := uniquePrefix()

		now := time.Now().UTC()
		east := 12 - now.Hour() // hours east of UTC whose local hour is 12
		name := "Etc/GMT"
		if east > 0 {
			name = fmt.Sprintf("Etc/GMT-%d", east) // POSIX signs: Etc/GMT-3 is UTC+3
		} else if east < 0 {
			name = fmt.Sprintf("Etc/GMT+%d", -east)
		}
		loc := calZone(t, name)
		local := now.In(loc)
		midnight := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, loc)
		next := midnight.AddDate(0, 0, 1)
		if h := local.Hour(); h != 12 {
			t.Fatalf("%s: local hour %d, want 12", name, h)
		}
		l := calLimit(t, "5/d calendar="+name)

		// allow decides one event and checks that its ResetAfter runs to
		// the Redis clock's next midnight, not the client's.
		allow := func(what string, lim *core.Limiter, remaining int) {
			t.Helper()
			before := time.Now()
			res := allowN(t, lim, "k", l, 1)
			after := time.Now()
			check(t, what, res, true, remaining)
			lo, hi := next.Sub(after)-10*time.Millisecond, next.Sub(before)+10*time.Millisecond
			if res.ResetAfter < lo || res.ResetAfter > hi {
				t.Fatalf("%s: ResetAfter %v, want the Redis clock's time to midnight, in [%v, %v]", what, res.ResetAfter, lo, hi)
			}
		}
		allow("exact", calSkewed(rdb, prefix, nil, 0), 4)
		allow("10 minutes ahead", calSkewed(rdb, prefix, nil, 10*time.Minute), 3)
		allow("10 minutes behind", calSkewed(rdb, prefix, nil, -10*time.Minute), 2)
		allow("10 minutes into the next day", calSkewed(rdb, prefix, nil, next.Sub(now)+10*time.Minute), 1)
		allow("10 minutes before today", calSkewed(rdb, prefix, nil, midnight.Sub(now)-10*time.Minute), 0)

		for _, skew := range []time.Duration{40 * 24 * time.Hour, -40 * 24 * time.Hour} {
			res, err := calSkewed(rdb, prefix, nil, skew).Allow(ctx, "k2", l)
			calSkewError(t, fmt.Sprintf("%v off", skew), res, err)
		}
		if n := rdb.Exists(ctx, calKey(prefix, "k2", l)).Val(); n != 0 {
			t.Fatalf("a failed decision wrote its key")
		}

		// Batched: concurrent decisions of a client 40 days off all fail
		// with the same words; its other decisions in the batch stand.
		far := calSkewed(rdb, prefix, nil, 40*24*time.Hour)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					res, err := far.Allow(ctx, "k3", l)
					if err == nil || !strings.Contains(err.Error(), "calendar windows") {
						t.Errorf("batched, 40 days off: %+v, %v; want an error naming the calendar windows", res, err)
					}
					return
				}
				if res, err := far.Allow(ctx, "k3", core.PerHour(100)); err != nil || !res.Allowed {
					t.Errorf("a gcra decision of the same client: %+v, %v", res, err)
				}
			}()
		}
		wg.Wait()
		if got := calPeek(t, calSkewed(rdb, prefix, nil, 0), "k3", core.PerHour(100)); got != 90 {
			t.Fatalf("gcra after 10 decisions: %d left, want 90", got)
		}
	})
}

// TestCalendarReserve: a reservation's settlement on a calendar window.
// A refund within the same day (across its DST switch) gives the events
// back; one settled after local midnight gives nothing to the new day,
// whether or not the new day has events yet; a charge after midnight
// counts in the new day; a charge that puts the day in debt denies until
// midnight and no later.
func TestCalendarReserve(t *testing.T) {
	t.Parallel()
	// New York's 23-hour day: 2026-03-08 from 05:00 to 04:00 (+1) UTC.
	day1 := utc("2026-03-08T06:30:00Z")     // 01:30 EST, before the switch
	later := utc("2026-03-08T08:00:00Z")    // 04:00 EDT, after it
	evening := utc("2026-03-09T03:00:00Z")  // 23:00 EDT
	midnight := utc("2026-03-09T04:00:00Z") // the next day
	after := midnight.Add(time.Second)

	calendarWorlds(t, func(t *testing.T, newWorld func(t *testing.T) *calWorld) {
		l := calLimit(t, "5/d calendar=America/New_York")
		cases := []struct {
			name string
			run  func(t *testing.T, w *calWorld, lim *core.Limiter)
		}{
			{"refund the same day", func(t *testing.T, w *calWorld, lim *core.Limiter) {
				w.at(day1)
				r := calReserve(t, lim, l, 3, 2)
				w.at(later)
				calSettle(t, r, 1)
				if got := calPeek(t, lim, "k", l); got != 4 {
					t.Fatalf("after refunding 2 of 3: %d left, want 4", got)
				}
				calExpect(t, "after the refund", allowN(t, lim, "k", l, 4), true, 0, midnight.Sub(later))
				calExpect(t, "the day's sixth", allowN(t, lim, "k", l, 1), false, 0, midnight.Sub(later))
			}},
			{"refund after midnight, new day empty", func(t *testing.T, w *calWorld, lim *core.Limiter) {
				w.at(evening)
				r := calReserve(t, lim, l, 3, 2)
				w.at(after)
				calSettle(t, r, 0)
				calExpect(t, "the new day", allowN(t, lim, "k", l, 1), true, 4, 23*time.Hour+59*time.Minute+59*time.Second)
			}},
			{"refund after midnight, new day used", func(t *testing.T, w *calWorld, lim *core.Limiter) {
				w.at(evening)
				r := calReserve(t, lim, l, 3, 2)
				w.at(after)
				calExpect(t, "the new day", allowN(t, lim, "k", l, 2), true, 3, 24*time.Hour-time.Second)
				calSettle(t, r, 0)
				if got := calPeek(t, lim, "k", l); got != 3 {
					t.Fatalf("a refund of yesterday's 3 after midnight: %d left today, want 3", got)
				}
			}},
			{"charge after midnight", func(t *testing.T, w *calWorld, lim *core.Limiter) {
				w.at(evening)
				r := calReserve(t, lim, l, 2, 3)
				w.at(after)
				calSettle(t, r, 5)
				if got := calPeek(t, lim, "k", l); got != 2 {
					t.Fatalf("3 more charged after midnight: %d left in the new day, want 2", got)
				}
				calExpect(t, "the new day", allowN(t, lim, "k", l, 2), true, 0, 24*time.Hour-time.Second)
			}},
			{"charge after midnight, new day used", func(t *testing.T, w *calWorld, lim *core.Limiter) {
				w.at(evening)
				r := calReserve(t, lim, l, 2, 3)
				w.at(after)
				allowN(t, lim, "k", l, 1)
				calSettle(t, r, 5)
				if got := calPeek(t, lim, "k", l); got != 1 {
					t.Fatalf("1 used and 3 charged in the new day: %d left, want 1", got)
				}
			}},
			{"debt until midnight", func(t *testing.T, w *calWorld, lim *core.Limiter) {
				w.at(day1)
				r := calReserve(t, lim, l, 5, 0)
				calSettle(t, r, 8)
				w.at(later)
				calExpect(t, "in debt", allowN(t, lim, "k", l, 1), false, 0, midnight.Sub(later))
				w.at(midnight)
				calExpect(t, "the next day", allowN(t, lim, "k", l, 1), true, 4, 24*time.Hour)
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t)
				c.run(t, w, w.limiter())
			})
		}
	})
}

// calReserve reserves n events for "k" under l, which must be admitted
// with remaining left.
func calReserve(t *testing.T, lim *core.Limiter, l core.Limit, n, remaining int) *core.Reservation {
	t.Helper()
	r, err := lim.Reserve(context.Background(), "k", []core.Limit{l}, n)
	if err != nil {
		t.Fatalf("Reserve(%d): %v", n, err)
	}
	check(t, fmt.Sprintf("Reserve(%d)", n), r.Result(), true, remaining)
	return r
}

// calSettle settles r at cost or fails the test.
func calSettle(t *testing.T, r *core.Reservation, cost int) {
	t.Helper()
	if err := r.Settle(context.Background(), cost); err != nil {
		t.Fatalf("Settle(%d): %v", cost, err)
	}
}

// TestCalendarZonesApart: two day windows of different zones on one key
// keep state apart (keys named by zone) and are decided together by
// AllowAll, all or nothing: each day ends at its own midnight. A limit
// decided alone shares the state of the same limit in AllowAll; two of one
// zone would share state, which ParseLimits refuses.
func TestCalendarZonesApart(t *testing.T) {
	t.Parallel()
	if _, err := core.ParseLimits("5/d calendar, 3/d calendar=UTC"); !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), "would share state") {
		t.Errorf("two UTC day windows: %v, want ErrInvalidLimit saying they would share state", err)
	}
	if _, err := core.ParseLimits("5/d calendar, 5/d fixed_window, 5/w calendar, 5/month calendar"); err != nil {
		t.Errorf("a calendar day, a rolling day, a week and a month: %v", err)
	}

	noon := utc("2026-05-10T12:00:00Z")           // 14:00 in Berlin, 08:00 in New York
	berlinMidnight := utc("2026-05-10T22:00:00Z") // 00:00 CEST on the 11th
	nyMidnight := utc("2026-05-11T04:00:00Z")     // 00:00 EDT on the 11th
	calendarWorlds(t, func(t *testing.T, newWorld func(t *testing.T) *calWorld) {
		w := newWorld(t)
		ctx := context.Background()
		limits := mustLimits(t, "5/d calendar=Europe/Berlin, 3/d calendar=America/New_York")
		berlin, ny := limits[0], limits[1]
		lim := w.limiter()
		left := func(what string, wantBerlin, wantNY int) {
			t.Helper()
			if b, n := calPeek(t, lim, "k", berlin), calPeek(t, lim, "k", ny); b != wantBerlin || n != wantNY {
				t.Fatalf("%s: Berlin %d left, New York %d; want %d and %d", what, b, n, wantBerlin, wantNY)
			}
		}

		w.at(noon)
		calExpect(t, "one event", allowAll(t, lim, "k", limits, 1), true, 2, nyMidnight.Sub(noon))
		left("one event", 4, 2)
		// The same Berlin limit alone is the same state.
		calExpect(t, "Berlin alone", allowN(t, lim, "k", berlin, 1), true, 3, berlinMidnight.Sub(noon))
		left("Berlin alone", 3, 2)
		// Another zone's day on the same key is a state of its own.
		if got := calPeek(t, lim, "k", calLimit(t, "5/d calendar")); got != 5 {
			t.Fatalf("a UTC day window on the key: %d left, want 5", got)
		}
		calExpect(t, "two events", allowAll(t, lim, "k", limits, 2), true, 0, nyMidnight.Sub(noon))
		left("two events", 1, 0)
		res := allowAll(t, lim, "k", limits, 1)
		calExpect(t, "New York's day is used up", res, false, 0, nyMidnight.Sub(noon))
		if res.Limit != ny {
			t.Fatalf("denied by %v, want %v", res.Limit, ny)
		}
		left("denied by New York", 1, 0)
		for _, l := range limits {
			if n := w.admin.Exists(ctx, calKey(w.prefix, "k", l)).Val(); n != 1 {
				t.Fatalf("no key %s", calKey(w.prefix, "k", l))
			}
		}

		w.at(berlinMidnight)
		left("at Berlin's midnight", 5, 0)
		calExpect(t, "at Berlin's midnight", allowAll(t, lim, "k", limits, 1), false, 0, nyMidnight.Sub(berlinMidnight))
		left("denied at Berlin's midnight", 5, 0)

		w.at(nyMidnight)
		calExpect(t, "at New York's midnight", allowAll(t, lim, "k", limits, 1), true, 2, 24*time.Hour)
		left("at New York's midnight", 4, 2)
	})
}

// TestCalendarSkippedMidnight: in a zone whose clocks jump from 00:00 to
// 01:00, the day of the change starts at its first instant, 01:00, and is
// 23 hours long; the day before is 24 hours and ends there.
func TestCalendarSkippedMidnight(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		zone       string
		dayBefore  time.Time // local midnight of the day before
		firstOfDay time.Time // 01:00 on the day of the change, its first instant
		end        time.Time // the next local midnight
	}{
		// Chile: -04 → -03 on Sunday 2026-09-06 at 00:00 local.
		{"America/Santiago", utc("2026-09-05T04:00:00Z"), utc("2026-09-06T04:00:00Z"), utc("2026-09-07T03:00:00Z")},
		// Cuba: CST → CDT on Sunday 2026-03-08 at 00:00 local.
		{"America/Havana", utc("2026-03-07T05:00:00Z"), utc("2026-03-08T05:00:00Z"), utc("2026-03-09T04:00:00Z")},
		// Lebanon, east of UTC (time.Date gives 01:00 itself there): EET → EEST
		// on Sunday 2026-03-29 at 00:00 local.
		{"Asia/Beirut", utc("2026-03-27T22:00:00Z"), utc("2026-03-28T22:00:00Z"), utc("2026-03-29T21:00:00Z")},
	} {
		t.Run(c.zone, func(t *testing.T) {
			t.Parallel()
			loc := calZone(t, c.zone)
			if l := c.firstOfDay.In(loc); l.Hour() != 1 || l.Minute() != 0 || c.firstOfDay.Add(-time.Second).In(loc).Hour() != 23 {
				t.Fatalf("%v is %v locally; the table is wrong", c.firstOfDay, l)
			}
			lim, _, clock := miniLimiter(t)
			l := calLimit(t, "5/d calendar="+c.zone)
			steps := []calStep{
				{"midnight of the day before", c.dayBefore, 4, 24 * time.Hour},
				{"22:59:59 the day before", c.firstOfDay.Add(-time.Hour - time.Second), 3, time.Hour + time.Second},
				{"23:30 the day before", c.firstOfDay.Add(-30 * time.Minute), 2, 30 * time.Minute},
				{"01:00, the first instant of the day", c.firstOfDay, 4, 23 * time.Hour},
				{"23:59:59 that day", c.end.Add(-time.Second), 3, time.Second},
			}
			for _, s := range steps {
				clock.Advance(s.at.Sub(clock.Now()))
				calExpect(t, s.what, allowN(t, lim, "k", l, 1), true, s.remaining, s.reset)
			}
		})
	}
}
