package core_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

func TestParseLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want core.Limit
	}{
		{"100/m", core.Limit{Rate: 100, Period: time.Minute}},
		{"5/10s", core.Limit{Rate: 5, Period: 10 * time.Second}},
		{"3/500ms", core.Limit{Rate: 3, Period: 500 * time.Millisecond}},
		{"1/h", core.Limit{Rate: 1, Period: time.Hour}},
		{"5000/d", core.Limit{Rate: 5000, Period: 24 * time.Hour}},
		{"20/2d", core.Limit{Rate: 20, Period: 48 * time.Hour}},
		{"20/1d", core.Limit{Rate: 20, Period: 24 * time.Hour}},
		{"5/24h fixed_window", core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: 24 * time.Hour}},
		{"20/s", core.Limit{Rate: 20, Period: time.Second}},
		{"7/1m30s", core.Limit{Rate: 7, Period: 90 * time.Second}},
		{"7/1.5s", core.Limit{Rate: 7, Period: 1500 * time.Millisecond}},
		{"  20/s  token_bucket  burst=40 ", core.Limit{Algorithm: core.TokenBucket, Rate: 20, Period: time.Second, Burst: 40}},
		{"20/s burst=40 gcra", core.Limit{Algorithm: core.GCRA, Rate: 20, Period: time.Second, Burst: 40}},
		{"60/m fixed_window", core.Limit{Algorithm: core.FixedWindow, Rate: 60, Period: time.Minute}},
		{"60/m fixed_window burst=60", core.Limit{Algorithm: core.FixedWindow, Rate: 60, Period: time.Minute, Burst: 60}},
		{"1000000000/h", core.Limit{Rate: 1_000_000_000, Period: time.Hour}},
		{"100/m sliding_window", core.Limit{Algorithm: core.SlidingWindow, Rate: 100, Period: time.Minute}},
		{"100/m sliding_window buckets=6", core.Limit{Algorithm: core.SlidingWindow, Rate: 100, Period: time.Minute, Buckets: 6}},
		{"100/m sliding_log", core.Limit{Algorithm: core.SlidingLog, Rate: 100, Period: time.Minute}},
		{"10/m token_bucket stepped burst=15", core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Minute, Burst: 15, Stepped: true}},
		{"2/s leaky_bucket", core.Limit{Algorithm: core.LeakyBucket, Rate: 2, Period: time.Second}},
		{"2/s leaky_bucket burst=10 shape max_delay=3s", core.Limit{Algorithm: core.LeakyBucket, Rate: 2, Period: time.Second, Burst: 10, Shape: true, MaxDelay: 3 * time.Second}},
		{"2/s shape leaky_bucket max_delay=1500ms", core.Limit{Algorithm: core.LeakyBucket, Rate: 2, Period: time.Second, Shape: true, MaxDelay: 1500 * time.Millisecond}},
		{"1000/m max_debt=1h", core.Limit{Rate: 1000, Period: time.Minute, MaxDebt: time.Hour}},
		{"40000/m unit=tokens token_bucket max_debt=d", core.Limit{Algorithm: core.TokenBucket, Rate: 40000, Period: time.Minute, Unit: "tokens", MaxDebt: 24 * time.Hour}},
	}
	for _, tt := range tests {
		got, err := core.ParseLimit(tt.in)
		if err != nil {
			t.Errorf("ParseLimit(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseLimit(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestParseLimitErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, says string // says: part of the message that explains the problem
	}{
		{"", "empty limit"},
		{"   ", "empty limit"},
		{"100", "want RATE/PERIOD"},
		{"0/s", "must be positive"},
		{"00/s", "must be positive"},
		{"-1/s", "must be a positive integer"},
		{"+1/s", "must be a positive integer"},
		{"1.5/s", "must be a positive integer"},
		{"abc/s", "must be a positive integer"},
		{"/s", "must be a positive integer"},
		{"4294967296/s", "above the maximum"},
		{"99999999999999999999999/s", "above the maximum"},
		{"5/", "period is missing"},
		{"5/10", "not a duration with a unit"},
		{"5/parsec", "not a duration with a unit"},
		{"5/-1s", "period -1s must be at least 1ms"},
		{"5/0s", "period 0s must be at least 1ms"},
		{"5/.5s", "positive duration"},
		{"5/1us", "at least 1ms"},
		{"5/9999999999999999h", "not a duration"},
		{"5/0d", "period 0s must be at least 1ms"},
		{"5/1.5d", "not a duration with a unit"},
		{"5/-1d", "period -24h0m0s must be at least 1ms"},
		{"5/99999999999999999999d", "too long"},
		{"5/1d12h", "not a duration with a unit"},
		{"0-M", "want RATE/PERIOD"},
		{"5/s/s", "not a duration"},
		{"5/s lottery", "unknown option \"lottery\""},
		{"5/s burst=0", "burst 0 must be positive"},
		{"5/s burst=x", "burst \"x\" must be a positive integer"},
		{"5/s burst=2 burst=3", "burst given twice"},
		{"5/s gcra token_bucket", "algorithm given twice"},
		{"5/s fixed_window burst=6", "burst 6 must be 0 or equal to rate 5"},
		{"999999937/24h token_bucket", "cannot be counted exactly"}, // prime rate: no common factor
		{"5/s buckets=4", "buckets is a sliding_window setting, not gcra"},
		{"5/s sliding_window buckets=0", "buckets 0 must be positive"},
		{"5/s sliding_window buckets=101", "buckets 101 must be between 1 and 100"},
		{"5/s sliding_window buckets=7", "does not divide into 7 buckets"},
		{"5/s sliding_window buckets=2 buckets=2", "buckets given twice"},
		{"5/s stepped", "stepped is a token_bucket setting, not gcra"},
		{"5/s leaky_bucket stepped", "stepped is a token_bucket setting, not leaky_bucket"},
		{"5/s token_bucket shape", "shape is a leaky_bucket setting, not token_bucket"},
		{"5/s leaky_bucket max_delay=1s", "max_delay needs shape"},
		{"5/s leaky_bucket shape max_delay=", "max_delay is missing"},
		{"5/s leaky_bucket shape max_delay=-1s", "max_delay -1s must be positive whole microseconds"},
		{"5/s leaky_bucket shape max_delay=1ns", "whole microseconds"},
		{"5/s shape shape leaky_bucket", "shape given twice"},
		{"5/s burst", "unknown option \"burst\""},
		{"5/s stepped=1", "unknown option \"stepped=1\""},
		{"1/m sliding_log burst=2", "burst 2 must be 0 or equal to rate 1"},
	}
	for _, tt := range tests {
		_, err := core.ParseLimit(tt.in)
		if !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q): err %v, want ErrInvalidLimit", tt.in, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ParseLimit(%q): %q does not say %q", tt.in, err, tt.says)
		}
	}
}

// TestParseLimitWordsAsValidate: a limit ParseLimit reads but Validate
// refuses is refused in Validate's words, whichever way it was written:
// ParseLimit adds only the text it read.
func TestParseLimitWordsAsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		l  core.Limit // what in says
	}{
		{"0/s", core.Limit{Period: time.Second}},
		{"00/m gcra", core.Limit{Algorithm: core.GCRA, Period: time.Minute}},
		{"0 concurrent", core.Limit{Algorithm: core.Concurrency, Period: time.Minute}},
		{"5/0s", core.Limit{Rate: 5}},
		{"5/0d", core.Limit{Rate: 5}},
		{"5/-1s", core.Limit{Rate: 5, Period: -time.Second}},
		{"5/-2d", core.Limit{Rate: 5, Period: -48 * time.Hour}},
		{"5/1us", core.Limit{Rate: 5, Period: time.Microsecond}},
		{"3 concurrent lease=0s", core.Limit{Algorithm: core.Concurrency, Rate: 3}},
		{"5/s unit=Tokens", core.Limit{Rate: 5, Period: time.Second, Unit: "Tokens"}},
		{"5/s unit=" + strings.Repeat("t", 33), core.Limit{Rate: 5, Period: time.Second, Unit: strings.Repeat("t", 33)}},
		{"2/s leaky_bucket shape max_delay=-1s", core.Limit{Algorithm: core.LeakyBucket, Rate: 2, Period: time.Second, Shape: true, MaxDelay: -time.Second}},
		{"5/s max_debt=-1s", core.Limit{Rate: 5, Period: time.Second, MaxDebt: -time.Second}},
		{"5/s fixed_window burst=6", core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: time.Second, Burst: 6}},
	}
	if above := int64(core.MaxCount) + 1; above <= math.MaxInt { // on 64-bit platforms
		n := strconv.FormatInt(above, 10)
		tests = append(tests,
			struct {
				in string
				l  core.Limit
			}{n + "/s", core.Limit{Rate: int(above), Period: time.Second}},
			struct {
				in string
				l  core.Limit
			}{"5/s burst=" + n, core.Limit{Rate: 5, Period: time.Second, Burst: int(above)}})
	}
	for _, tt := range tests {
		verr := tt.l.Validate()
		if verr == nil {
			t.Fatalf("%+v validates; the test wants an invalid limit", tt.l)
		}
		why := strings.TrimPrefix(verr.Error(), core.ErrInvalidLimit.Error()+": ")
		_, err := core.ParseLimit(tt.in)
		if want := fmt.Sprintf("%v: %q: %s", core.ErrInvalidLimit, tt.in, why); err == nil || err.Error() != want {
			t.Errorf("ParseLimit(%q): %v\nwant %s (Validate's words)", tt.in, err, want)
		}
	}
}

// TestParseLimitHugeCount: a count too long for an int is refused in
// Validate's words for a count above the maximum.
func TestParseLimitHugeCount(t *testing.T) {
	t.Parallel()
	_, err := core.ParseLimit("99999999999999999999999/s")
	if want := fmt.Sprintf(`%v: "99999999999999999999999/s": rate 99999999999999999999999 is above the maximum %d`, core.ErrInvalidLimit, core.MaxCount); err == nil || err.Error() != want {
		t.Errorf("ParseLimit: %v, want %s", err, want)
	}
}

func TestLimitString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		l    core.Limit
		want string
	}{
		{core.PerSecond(20), "20/s"},
		{core.PerMinute(100), "100/m"},
		{core.PerHour(1), "1/h"},
		{core.Limit{Rate: 5, Period: 10 * time.Second}, "5/10s"},
		{core.Limit{Rate: 5, Period: 90 * time.Second}, "5/90s"},
		{core.Limit{Rate: 3, Period: 500 * time.Millisecond}, "3/500ms"},
		{core.Limit{Rate: 3, Period: 1500 * time.Microsecond}, "3/1500us"},
		{core.Limit{Rate: 3, Period: 2 * time.Hour}, "3/2h"},
		{core.Limit{Rate: 3, Period: 24 * time.Hour}, "3/d"},
		{core.Limit{Rate: 3, Period: 72 * time.Hour}, "3/3d"},
		{core.Limit{Rate: 3, Period: 36 * time.Hour}, "3/36h"},
		{core.Limit{Algorithm: core.TokenBucket, Rate: 20, Period: time.Second, Burst: 40}, "20/s token_bucket burst=40"},
		{core.Limit{Algorithm: core.GCRA, Rate: 1, Period: time.Minute}, "1/m gcra"},
		{core.Limit{Algorithm: core.SlidingWindow, Rate: 60, Period: time.Minute, Buckets: 12}, "60/m sliding_window buckets=12"},
		{core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Minute, Burst: 15, Stepped: true}, "10/m token_bucket burst=15 stepped"},
		{core.Limit{Algorithm: core.LeakyBucket, Rate: 2, Period: time.Second, Shape: true, MaxDelay: 2500 * time.Millisecond}, "2/s leaky_bucket shape max_delay=2500ms"},
	}
	for _, tt := range tests {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.l, got, tt.want)
		}
		back, err := core.ParseLimit(tt.l.String())
		if err != nil || back != tt.l {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", tt.l.String(), back, err, tt.l)
		}
	}
}

// FuzzParseLimit: ParseLimit never panics, whatever it accepts is valid, and
// String of it parses back to the same Limit.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"100/m", "5/10s", "3/500ms", "1/h", "20/s token_bucket burst=40",
		"60/m fixed_window", "7/1m30s", "1/1.000001s", "0-M", "5/-s", "1/9223372036s",
		"100/m sliding_window buckets=6", "10/m token_bucket stepped", "2/s leaky_bucket shape max_delay=3s",
		"5000/d", "1/2d", "1/0d", "1/1d1h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := core.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, core.ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q): error %v does not wrap ErrInvalidLimit", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %+v, which does not validate: %v", s, l, err)
		}
		back, err := core.ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLimit(%q) = %+v; its String %q parses to %+v, %v", s, l, l.String(), back, err)
		}
	})
}

func TestValidate(t *testing.T) {
	t.Parallel()
	valid := []core.Limit{
		core.PerSecond(1),
		{Rate: 1, Period: core.MinPeriod},
		{Algorithm: core.TokenBucket, Rate: 3, Period: time.Second, Burst: 1},
		{Algorithm: core.FixedWindow, Rate: 3, Period: time.Second, Burst: 3},
		{Algorithm: core.TokenBucket, Rate: core.MaxCount, Period: time.Second, Burst: core.MaxCount}, // gcd keeps it exact
	}
	for _, l := range valid {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v, want nil", l, err)
		}
	}
	invalid := []struct {
		l    core.Limit
		says string
	}{
		{core.Limit{}, "rate 0 must be positive"},
		{core.Limit{Rate: 1}, "period 0s must be at least 1ms"},
		{core.Limit{Rate: 1, Period: time.Second + time.Nanosecond}, "whole microseconds"},
		{core.Limit{Rate: 1, Period: time.Second, Burst: -2}, "burst -2 must not be negative"},
		// Rate and Burst above the maximum: TestMaxCountValidate.
		{core.Limit{Algorithm: "leaky", Rate: 1, Period: time.Second}, `unknown algorithm "leaky"`},
		{core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: time.Second, Burst: 10}, "must be 0 or equal to rate"},
		{core.Limit{Rate: 1, Period: 1000 * 24 * time.Hour, Burst: core.MaxCount}, "cannot be counted exactly"},
		{core.Limit{Algorithm: core.Concurrency, Rate: core.MaxSlots + 1, Period: time.Minute}, "at most 10000 slots"},
		{core.Limit{Algorithm: core.SlidingLog, Rate: core.MaxSlots + 1, Period: time.Hour}, "at most 10000, not 10001 (for more, use sliding_window or gcra)"},
		{core.Limit{Rate: 10, Period: time.Second, MaxDebt: -time.Second}, "max_debt -1s must be whole microseconds"},
		{core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Second, MaxDebt: time.Hour}, "a fixed_window's debt ends with its window"},
	}
	for _, tt := range invalid {
		err := tt.l.Validate()
		if !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidLimit saying %q", tt.l, err, tt.says)
		}
	}
}

// TestDayKeys: a period of days is written in hours in its Redis key, as
// it was before "d" was a unit, so that state written then is found now.
func TestDayKeys(t *testing.T) {
	t.Parallel()
	lim, m, _ := miniLimiter(t)
	for _, c := range []struct{ limit, key string }{
		{"5/d", "redlimit:{k}:gcra:24h"},
		{"5/24h", "redlimit:{k}:gcra:24h"},
		{"5/2d fixed_window", "redlimit:{k}:fixed_window:48h"},
	} {
		l, err := core.ParseLimit(c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Allow(context.Background(), "k", l); err != nil {
			t.Fatal(err)
		}
		if !m.Exists(c.key) {
			t.Errorf("%s: no key %s; keys: %v", c.limit, c.key, m.Keys())
		}
	}
}

// TestUnit: a limit's unit is part of its state's identity (two limits of
// one algorithm and period may count requests and tokens on one key), it
// round-trips through ParseLimit, and a bad name is refused.
func TestUnit(t *testing.T) {
	t.Parallel()
	limits, err := core.ParseLimits("60/m, 100000/m unit=tokens, 5 concurrent unit=jobs")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := limits[1].Unit, "tokens"; got != want {
		t.Fatalf("unit %q, want %q", got, want)
	}
	for _, l := range limits {
		back, err := core.ParseLimit(l.String())
		if err != nil || back != l {
			t.Errorf("%q: ParseLimit(String()) = %+v, %v; want %+v", l.String(), back, err, l)
		}
	}
	if _, err := core.ParseLimits("60/m unit=tokens, 70/m unit=tokens"); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("two limits of one unit, algorithm and period: %v, want ErrInvalidLimit", err)
	}
	for _, bad := range []string{"1/s unit=", "1/s unit=Tokens", "1/s unit=a:b", "1/s unit=" + strings.Repeat("x", 33), "1/s unit=a unit=b"} {
		if _, err := core.ParseLimit(bad); !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("%q: %v, want ErrInvalidLimit", bad, err)
		}
	}
	if err := (core.Limit{Rate: 1, Period: time.Second, Unit: "a b"}).Validate(); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("Unit %q: %v, want ErrInvalidLimit", "a b", err)
	}

	// Requests and tokens on one key, one algorithm and period: apart.
	lim, m, _ := miniLimiter(t)
	requests, tokens := limits[0], limits[1]
	check(t, "a request", allowN(t, lim, "k", requests, 1), true, 59)
	check(t, "900 tokens", allowN(t, lim, "k", tokens, 900), true, 99100)
	check(t, "requests untouched by tokens", allowN(t, lim, "k", requests, 0), true, 59)
	if !m.Exists("redlimit:{k}:gcra:1m:tokens") || !m.Exists("redlimit:{k}:gcra:1m") {
		t.Fatalf("keys %v; want the tokens' apart from the requests'", m.Keys())
	}
}
