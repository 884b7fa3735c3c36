package core

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/wire"
)

// TestDescriptorsMatchScripts: every descriptor's script holds its entry,
// which reads as many arguments as the descriptor sends; the mixed script
// holds every entry.
func TestDescriptorsMatchScripts(t *testing.T) {
	t.Parallel()
	all := []*descriptor{steppedTokenBucket, shapingLeakyBucket, calendarWindow}
	for _, d := range algorithms {
		all = append(all, d)
	}
	for _, d := range all {
		entry := regexp.MustCompile(`algorithms\.` + d.name + ` = \{args = (\d+),`)
		for _, s := range []*wire.Script{d.script, wire.All} {
			m := entry.FindStringSubmatch(s.Src)
			if m == nil {
				t.Errorf("%s: its script has no entry algorithms.%s", d.name, d.name)
				continue
			}
			l := Limit{Rate: 10, Period: time.Second}
			switch d {
			case steppedTokenBucket:
				l.Algorithm, l.Stepped = TokenBucket, true
			case shapingLeakyBucket:
				l.Algorithm, l.Shape = LeakyBucket, true
			case calendarWindow:
				l.Algorithm, l.Calendar, l.Period = FixedWindow, "UTC", day
			default:
				l.Algorithm = Algorithm(d.name)
			}
			if l.descriptor() != d {
				t.Fatalf("%v does not select %s", l, d.name)
			}
			_, n := d.args(l)
			if d.bounds {
				n += 4 // the calendar's boundaries
			}
			if want, _ := strconv.Atoi(m[1]); n != want {
				t.Errorf("%s: the descriptor sends %d arguments, the script reads %d", d.name, n, want)
			}
		}
	}
}

// TestKnobErrors: a knob set on an algorithm that does not read it names
// the algorithms that do.
func TestKnobErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		l    Limit
		says string
	}{
		{Limit{Rate: 1, Period: time.Second, Buckets: 3}, "buckets is a sliding_window setting, not gcra"},
		{Limit{Algorithm: FixedWindow, Rate: 1, Period: time.Second, Stepped: true}, "stepped is a token_bucket setting, not fixed_window"},
		{Limit{Algorithm: TokenBucket, Rate: 1, Period: time.Second, Shape: true}, "shape is a leaky_bucket setting, not token_bucket"},
		{Limit{Algorithm: LeakyBucket, Rate: 1, Period: time.Second, MaxDelay: time.Second}, "max_delay needs shape"},
		{Limit{Rate: 1, Period: time.Second, MaxDelay: time.Second}, "max_delay needs shape"},
	} {
		if err := c.l.Validate(); err == nil || !regexp.MustCompile(regexp.QuoteMeta(c.says)).MatchString(err.Error()) {
			t.Errorf("%+v: %v, want %q", c.l, err, c.says)
		}
	}
}

// TestPrefetchLeaseMatchesScripts: the scripts keep a prefetch's events
// counted for as long as the Limiter believes they do.
func TestPrefetchLeaseMatchesScripts(t *testing.T) {
	t.Parallel()
	m := regexp.MustCompile(`(?m)^ *local prefetch_lease = (\d+)$`).FindStringSubmatch(wire.All.Src)
	if m == nil {
		t.Fatal("the scripts define no prefetch_lease")
	}
	if us, _ := strconv.ParseInt(m[1], 10, 64); us != prefetchLease.Microseconds() {
		t.Fatalf("the scripts' prefetch_lease is %d µs, core's prefetchLease %v", us, prefetchLease)
	}
}
