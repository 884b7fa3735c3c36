package redlimit

import (
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// TestCalendarPolicyWindow: a calendar limit's RateLimit-Policy member
// announces the window it is in, as long as the calendar makes it: a
// month of 30 days in November (2 592 000 s, not the mean month's
// 2 629 746), 31 in December, 28 in February; a day of 23 hours where
// Berlin moves its clocks forward; and it changes at the boundary.
func TestCalendarPolicyWindow(t *testing.T) {
	t.Parallel()
	utc := func(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }
	for _, c := range []struct {
		limit string
		at    time.Time
		want  string
	}{
		{"60/month calendar", utc(2025, 11, 12, 10), `"q";q=60;w=2592000`},
		{"60/month calendar", utc(2025, 12, 1, 0), `"q";q=60;w=2678400`},
		{"60/month calendar", utc(2025, 2, 28, 23), `"q";q=60;w=2419200`},
		{"60/month calendar", utc(2024, 2, 10, 0), `"q";q=60;w=2505600`},
		{"1000/d calendar=Europe/Berlin", utc(2025, 3, 30, 12), `"q";q=1000;w=82800`},
		{"1000/d calendar=Europe/Berlin", utc(2025, 3, 31, 12), `"q";q=1000;w=86400`},
		{"5/w calendar", utc(2025, 11, 12, 10), `"q";q=5;w=604800`},
	} {
		l, err := core.ParseLimit(c.limit)
		if err != nil {
			t.Fatal(err)
		}
		q := quotasOf("q", []core.Limit{l})[0]
		if q.calendar == nil {
			t.Fatalf("%s: no calendar member", c.limit)
		}
		for range 2 { // worked out, then kept for the window
			if got := q.calendar.at(c.at); got != c.want {
				t.Errorf("%s at %v: %s, want %s", c.limit, c.at, got, c.want)
			}
		}
	}
	l, _ := core.ParseLimit("60/month calendar")
	q := quotasOf("q", []core.Limit{l})[0]
	nov, dec := q.calendar.at(utc(2025, 11, 30, 23)), q.calendar.at(utc(2025, 12, 1, 0))
	if nov != `"q";q=60;w=2592000` || dec != `"q";q=60;w=2678400` {
		t.Errorf("across the end of November: %s, then %s", nov, dec)
	}
	if q := quotasOf("q", []core.Limit{core.PerHour(5)})[0]; q.calendar != nil {
		t.Error("a limit off the calendar has a calendar member")
	}
}

// BenchmarkPolicyItem measures what a RateLimit-Policy member costs to
// write: what quotasOf and calendarPolicy keep from costing every request
// (13 allocations and about 3 µs on the shared 2-core machine, where a
// request's decision costs the client 20–35 µs of CPU;
// docs/performance.md).
func BenchmarkPolicyItem(b *testing.B) {
	l := core.Limit{Rate: 100, Period: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		_ = policyItem("api", l, l.Period)
	}
}

// BenchmarkCalendarPolicy measures a calendar limit's member within a
// window, as every request reads it.
func BenchmarkCalendarPolicy(b *testing.B) {
	l, err := core.ParseLimit("100/month calendar")
	if err != nil {
		b.Fatal(err)
	}
	c := &calendarPolicy{name: "api", limit: l}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		_ = c.at(now)
	}
}
