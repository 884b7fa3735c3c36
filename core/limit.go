package core

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Algorithm names a rate-limiting algorithm. It is also part of the Redis key,
// so switching a limit's algorithm starts from fresh state.
type Algorithm string

// The algorithms. The zero Algorithm ("") means GCRA.
const (
	// FixedWindow counts events in windows of Period; a window starts with
	// the first event after the previous window ended. At most Rate events
	// per window, so up to 2*Rate can pass around a window edge.
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindow counts events in Buckets sub-buckets of Period and
	// weighs the oldest, partly covered one by its overlap with the window.
	// No span of Period*(Buckets-1)/Buckets ever admits more than Rate.
	SlidingWindow Algorithm = "sliding_window"
	// SlidingLog keeps every admitted event of the last Period in a sorted
	// set: exact, no span of Period ever admits more than Rate; memory grows
	// with Rate.
	SlidingLog Algorithm = "sliding_log"
	// TokenBucket holds up to Burst tokens, refilled continuously at Rate per
	// Period (or Rate at once every Period with Stepped); each event takes
	// one token.
	TokenBucket Algorithm = "token_bucket"
	// LeakyBucket fills by one per event and drains at Rate per Period; an
	// event that would overflow Burst is rejected. With Shape, admitted
	// events are queued: Result.Delay says how long each must wait.
	LeakyBucket Algorithm = "leaky_bucket"
	// GCRA (generic cell rate algorithm) spaces events Period/Rate apart and
	// lets Burst of them arrive at once. It stores one timestamp per key.
	// It is the default.
	GCRA Algorithm = "gcra"
)

// Bounds of a Limit's fields.
const (
	maxCount       = 1_000_000_000    // Rate and Burst
	minPeriod      = time.Millisecond // Redis key TTLs are whole milliseconds
	defaultBuckets = 10               // a SlidingWindow's Buckets when 0
	maxBuckets     = 100              // bounds a SlidingWindow key's size and the script's work
	// exactMax bounds every integer the scripts hold: Lua numbers are
	// doubles, exact up to 2^53. Half of that leaves room for the clock
	// (about 2^51 µs since 1970).
	exactMax = 1 << 52
)

// Limit says how many events are allowed over what time, and how.
//
// The zero Limit is invalid: Rate and Period must be set. Limit is a small,
// comparable value; copy it freely.
type Limit struct {
	// Algorithm decides how events are counted; "" means GCRA.
	Algorithm Algorithm
	// Rate is the number of events allowed per Period: 1 to 1e9.
	Rate int
	// Period is the time Rate events are spread over: at least a
	// millisecond, in whole microseconds.
	Period time.Duration
	// Burst is how many events may pass at once (the bucket capacity of
	// GCRA, TokenBucket and LeakyBucket); 0 means Rate. Window algorithms
	// allow Rate per window: Burst must be 0 or equal to Rate for them.
	Burst int

	// Buckets is the number of sub-buckets per Period of a SlidingWindow:
	// more is closer to exact, and costs more memory (one hash field each)
	// and script time. 0 means 10; at most 100; it must divide Period (in
	// microseconds) evenly. 1 is the classic estimate from the current and
	// previous window. Other algorithms: must be 0.
	Buckets int
	// Stepped makes a TokenBucket add Rate tokens at once every Period,
	// counted from the bucket's first use, instead of continuously. Its
	// state is kept apart from the continuous bucket's. Other algorithms:
	// must be false.
	Stepped bool
	// Shape makes a LeakyBucket queue events instead of only admitting or
	// rejecting them: an admitted event must wait Result.Delay before it is
	// served, so served events are Period/Rate apart; the queue holds Burst.
	// Other algorithms: must be false.
	Shape bool
	// MaxDelay, with Shape, rejects events that would wait longer than it.
	// 0 means the queue's length (Burst) is the only bound.
	MaxDelay time.Duration
}

// PerSecond returns a GCRA limit of rate events per second, bursts up to rate.
func PerSecond(rate int) Limit { return Limit{Rate: rate, Period: time.Second} }

// PerMinute returns a GCRA limit of rate events per minute, bursts up to rate.
func PerMinute(rate int) Limit { return Limit{Rate: rate, Period: time.Minute} }

// PerHour returns a GCRA limit of rate events per hour, bursts up to rate.
func PerHour(rate int) Limit { return Limit{Rate: rate, Period: time.Hour} }

// algorithm returns the effective algorithm: "" is GCRA.
func (l Limit) algorithm() Algorithm {
	if l.Algorithm == "" {
		return GCRA
	}
	return l.Algorithm
}

// Capacity returns how many events can pass at once: Burst, or Rate when
// Burst is 0. It is the most Result.Remaining can be, and what the HTTP
// layer sends as X-RateLimit-Limit.
func (l Limit) Capacity() int {
	if l.Burst == 0 {
		return l.Rate
	}
	return l.Burst
}

// Validate reports whether the limit can be enforced. Its errors wrap
// ErrInvalidLimit and say what is wrong.
func (l Limit) Validate() error {
	d := l.descriptor()
	var err error
	switch {
	case d == nil:
		err = fmt.Errorf("unknown algorithm %q (want one of %s)", l.Algorithm, algorithmNames())
	case l.Rate <= 0:
		err = fmt.Errorf("rate %d must be positive", l.Rate)
	case l.Rate > maxCount:
		err = fmt.Errorf("rate %d is above the maximum %d", l.Rate, maxCount)
	case l.Period < minPeriod:
		err = fmt.Errorf("period %v must be at least %v", l.Period, minPeriod)
	case l.Period%time.Microsecond != 0:
		err = fmt.Errorf("period %v must be whole microseconds", l.Period)
	case l.Burst < 0:
		err = fmt.Errorf("burst %d must not be negative (0 means rate)", l.Burst)
	case l.Burst > maxCount:
		err = fmt.Errorf("burst %d is above the maximum %d", l.Burst, maxCount)
	case d.window && l.Burst != 0 && l.Burst != l.Rate:
		err = fmt.Errorf("%s allows rate events per window; burst %d must be 0 or equal to rate %d",
			l.algorithm(), l.Burst, l.Rate)
	default:
		err = l.checkKnobs(d)
		if err == nil && d.check != nil {
			err = d.check(l)
		}
		if err == nil && d.span(l) > exactMax {
			err = fmt.Errorf("%v is too large to count exactly (burst times period in microseconds, over the rate's common factor, exceeds 2^52)", l)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidLimit, err)
	}
	return nil
}

// buckets returns the effective SlidingWindow sub-bucket count.
func (l Limit) buckets() int {
	if l.Buckets == 0 {
		return defaultBuckets
	}
	return l.Buckets
}

// String formats the limit in the grammar ParseLimit reads, so that
// ParseLimit(l.String()) returns l for every valid l.
func (l Limit) String() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(l.Rate))
	b.WriteByte('/')
	b.WriteString(formatPeriod(l.Period, periodUnits))
	if l.Algorithm != "" {
		b.WriteByte(' ')
		b.WriteString(string(l.Algorithm))
	}
	if l.Burst != 0 {
		b.WriteString(" burst=")
		b.WriteString(strconv.Itoa(l.Burst))
	}
	if l.Buckets != 0 {
		b.WriteString(" buckets=")
		b.WriteString(strconv.Itoa(l.Buckets))
	}
	if l.Stepped {
		b.WriteString(" stepped")
	}
	if l.Shape {
		b.WriteString(" shape")
	}
	if l.MaxDelay != 0 {
		b.WriteString(" max_delay=")
		b.WriteString(formatPeriod(l.MaxDelay, periodUnits))
	}
	return b.String()
}

// periodUnit is a period unit of the grammar.
type periodUnit struct {
	name string
	d    time.Duration
}

const day = 24 * time.Hour

// periodUnits are the units String writes, tried largest first.
// keyUnits are the units of a period in a Redis key: no days, so that the
// keys of a "24h" limit written before "d" existed stay the same.
var (
	periodUnits = []periodUnit{{"d", day}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}, {"us", time.Microsecond}}
	keyUnits    = periodUnits[1:]
)

// formatPeriod writes d in the largest of units that divides it, omitting
// a count of 1: "h", "10s", "1500us". Other durations use time.Duration's
// form.
func formatPeriod(d time.Duration, units []periodUnit) string {
	for _, u := range units {
		if d > 0 && d%u.d == 0 {
			if n := d / u.d; n != 1 {
				return strconv.FormatInt(int64(n), 10) + u.name
			}
			return u.name
		}
	}
	return d.String()
}

// ParseLimit reads a limit written as
//
//	RATE/PERIOD [ALGORITHM] [burst=N] [buckets=N] [stepped] [shape] [max_delay=DURATION]
//
// RATE is a positive decimal integer. PERIOD is a duration in Go's syntax
// (time.ParseDuration: "10s", "500ms", "1m30s", "2h") or a whole number of
// days of 24 hours ("d", "2d"); its count may be left out when it is 1 ("s",
// "m", "h", "d"). ALGORITHM is one of the Algorithm names ("gcra",
// "token_bucket", "leaky_bucket", "fixed_window", "sliding_window",
// "sliding_log"); without it the limit is GCRA. The other options set the
// Limit fields of the same names. Fields are separated by spaces; options
// may come in any order, each at most once.
//
// Examples: "100/m", "5/10s", "3/500ms", "5000/d", "20/s token_bucket burst=40",
// "100/m sliding_window buckets=6", "2/s leaky_bucket burst=10 shape max_delay=3s".
//
// The result is validated: errors wrap ErrInvalidLimit and name the part of
// s that is wrong.
func ParseLimit(s string) (Limit, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Limit{}, fmt.Errorf("%w: empty limit (want RATE/PERIOD, e.g. \"100/m\")", ErrInvalidLimit)
	}
	bad := func(format string, args ...any) (Limit, error) {
		return Limit{}, fmt.Errorf("%w: %q: %s", ErrInvalidLimit, s, fmt.Sprintf(format, args...))
	}

	rate, period, ok := strings.Cut(fields[0], "/")
	if !ok {
		return bad("want RATE/PERIOD, e.g. \"100/m\"")
	}
	var l Limit
	var err error
	if l.Rate, err = parseCount(rate); err != nil {
		return bad("rate %v", err)
	}
	if l.Period, err = parsePeriod(period); err != nil {
		return bad("period %v", err)
	}
	seen := make(map[string]bool, len(fields)-1)
	for _, f := range fields[1:] {
		name, value, hasValue := strings.Cut(f, "=")
		if _, known := algorithms[Algorithm(f)]; known {
			name = "algorithm"
		}
		if seen[name] {
			return bad("%s given twice", name)
		}
		seen[name] = true
		switch {
		case name == "algorithm":
			l.Algorithm = Algorithm(f)
		case name == "burst" && hasValue:
			l.Burst, err = parseCount(value)
		case name == "buckets" && hasValue:
			l.Buckets, err = parseCount(value)
		case name == "max_delay" && hasValue:
			l.MaxDelay, err = parsePeriod(value)
		case f == "stepped":
			l.Stepped = true
		case f == "shape":
			l.Shape = true
		default:
			return bad("unknown option %q (want an algorithm: %s; or burst=N, buckets=N, stepped, shape, max_delay=DURATION)", f, algorithmNames())
		}
		if err != nil {
			return bad("%s %v", name, err)
		}
	}
	if err := l.Validate(); err != nil {
		return Limit{}, fmt.Errorf("%q: %w", s, err)
	}
	return l, nil
}

// parseCount reads a positive decimal integer no larger than maxCount.
func parseCount(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q must be a positive integer", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxCount {
		return 0, fmt.Errorf("%q is above the maximum %d", s, maxCount)
	}
	if n == 0 {
		return 0, fmt.Errorf("must be positive, not 0")
	}
	return n, nil
}

// parsePeriod reads a positive Go duration, or a whole number of days,
// whose leading 1 may be omitted.
func parsePeriod(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("is missing (want e.g. \"s\", \"10s\", \"500ms\", \"d\")")
	}
	if c := s[0]; c < '0' || c > '9' {
		if c == '-' || c == '+' || c == '.' {
			return 0, fmt.Errorf("%q must be a positive duration", s)
		}
		s = "1" + s
	}
	if days, ok := strings.CutSuffix(s, "d"); ok && strings.TrimLeft(days, "0123456789") == "" {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n > int64(maxPeriod/day) {
			return 0, fmt.Errorf("%q is too long", s)
		}
		if n == 0 {
			return 0, fmt.Errorf("%q must be positive", s)
		}
		return time.Duration(n) * day, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration with a unit (us, ms, s, m, h, d)", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q must be positive", s)
	}
	return d, nil
}

// maxPeriod bounds a period in days so that the count cannot overflow;
// Validate bounds it more tightly.
const maxPeriod = time.Duration(1<<63 - 1)

// ParseLimits reads several limits for one key, separated by commas, each
// in ParseLimit's grammar: "10/s, 1000/h", "20/s token_bucket burst=40,
// 5000/d fixed_window". It accepts what AllowAll does: 1 to 16 limits, no
// two of which would share state (the same algorithm and period). Errors
// wrap ErrInvalidLimit and name the limit that is wrong.
func ParseLimits(s string) ([]Limit, error) {
	parts := strings.Split(s, ",")
	limits := make([]Limit, 0, len(parts))
	for i, part := range parts {
		if strings.TrimSpace(part) == "" {
			return nil, fmt.Errorf("%w: %q: limit %d of %d is empty (want e.g. \"10/s, 1000/h\")", ErrInvalidLimit, s, i+1, len(parts))
		}
		l, err := ParseLimit(part)
		if err != nil {
			return nil, err
		}
		limits = append(limits, l)
	}
	if err := checkLimits(nil, limits); err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	return limits, nil
}
