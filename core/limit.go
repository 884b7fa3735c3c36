package core

import (
	"time"

	"github.com/redlimit/redlimit/internal/engine"
)

// Algorithm names a rate-limiting algorithm. It is also part of the Redis key,
// so switching a limit's algorithm starts from fresh state.
type Algorithm = engine.Algorithm

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
	// with Rate, which is at most 10 000 (one call must not hold Redis for
	// long: docs/algorithms.md).
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
	// Concurrency limits events in flight, not events per period: at most
	// Rate Reservations of a key hold a slot at once. A slot is freed when
	// its Reservation is settled or released, or Period after it was taken
	// if its holder never says (a process that dies leaks nothing for
	// longer). Only Reserve takes it; Allow, AllowN and AllowAll refuse a
	// Concurrency limit with an error wrapping ErrInvalidLimit. Its Rate is
	// at most 10 000 slots. A denial's RetryAfter is when a slot is likely
	// free, from how long the key's slots were held lately, never later
	// than the lease end that frees one (docs/lifecycle.md).
	Concurrency Algorithm = "concurrency"
)

// Limit says how many events are allowed over what time, and how.
//
// The zero Limit is invalid: Rate and Period must be set. Limit is a small,
// comparable value; copy it freely.
type Limit struct {
	// Algorithm decides how events are counted; "" means GCRA.
	Algorithm Algorithm
	// Rate is the number of events allowed per Period: 1 to 4294967295
	// (a uint32's range; on 32-bit platforms, int's). Validate refuses a
	// limit whose state its script cannot count exactly (Lua's numbers are
	// doubles), saying why: a bucket of a huge rate over a long period.
	Rate int
	// Period is the time Rate events are spread over: at least a
	// millisecond, in whole microseconds.
	Period time.Duration
	// Burst is how many events may pass at once (the bucket capacity of
	// GCRA, TokenBucket and LeakyBucket); 0 means Rate; at most Rate's
	// maximum. Window algorithms allow Rate per window: Burst must be 0 or
	// equal to Rate for them.
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
	// Calendar makes a FixedWindow's windows follow the calendar in this
	// IANA time zone ("UTC", "Europe/Berlin") instead of starting at a
	// key's first event: with a Period of 24 hours a window is a day from
	// local midnight (23 or 25 hours long across a DST change), of 7 days a
	// week from Monday midnight, of a month (2 629 746 s, the mean Gregorian
	// month: ParseLimit's "month") a month from the first. "" (the default)
	// means none. Other algorithms: must be "". A binary on a system without
	// the zone database (/usr/share/zoneinfo) imports time/tzdata.
	Calendar string
	// Prefetch lets each Limiter take up to Prefetch events more than a
	// decision asks for, when they fit, and admit them in process
	// afterwards: for a hot key, most decisions then make no round trip.
	// What it takes and does not use in time it gives back. Admissions
	// stay exact: summed over every instance, nothing is admitted that the
	// limit would not have admitted without it; what it may cost is
	// admitting less, at most Prefetch events per Limiter at a time.
	// docs/lifecycle.md#prefetch says how. 0 (the default) means none; at
	// most the limit's Capacity. Only GCRA, TokenBucket (not Stepped) and
	// FixedWindow (calendar included) read it; in a decision of several
	// limits it applies only when every limit sets it, and Reserve ignores
	// it. It is not part of the state's key.
	Prefetch int
	// Unit is what the limit counts: "" (the default) counts requests,
	// any other word (lowercase letters, digits, '_' or '-', at most 32
	// bytes) names another unit, such as "tokens". A limit's unit is part
	// of its state's identity, so limits of different units on one key may
	// share algorithm and period ("60/m, 100000/m unit=tokens"). ReserveEach
	// charges each limit in its own unit.
	Unit string
	// MaxDebt bounds how long one charge of a settlement (Settle or
	// SettleEach above what was reserved) may leave the limit's state in
	// debt: past MaxDebt beyond the time its full allowance takes to come
	// back, the rest of the charge is dropped. 0 (the default) means one
	// Period, so that one request, however large its cost, never locks a
	// key for longer than about one Period; at most about 35 years (2^50
	// µs). Only GCRA, TokenBucket and LeakyBucket read it: a window's debt
	// ends with its window (a SlidingWindow holds at most three times Rate
	// in debt, a SlidingLog's adds at most Rate entries). It is not part of
	// the state's key.
	MaxDebt time.Duration
}

// PerSecond returns a GCRA limit of rate events per second, bursts up to rate.
func PerSecond(rate int) Limit { return Limit{Rate: rate, Period: time.Second} }

// PerMinute returns a GCRA limit of rate events per minute, bursts up to rate.
func PerMinute(rate int) Limit { return Limit{Rate: rate, Period: time.Minute} }

// PerHour returns a GCRA limit of rate events per hour, bursts up to rate.
func PerHour(rate int) Limit { return Limit{Rate: rate, Period: time.Hour} }

// Capacity returns how many events can pass at once: Burst, or Rate when
// Burst is 0. It is the most Result.Remaining can be, and what the HTTP
// layer sends as X-RateLimit-Limit.
func (l Limit) Capacity() int { return engine.Limit(l).Capacity() }

// Validate reports whether the limit can be enforced. Its errors wrap
// ErrInvalidLimit and say what is wrong.
func (l Limit) Validate() error { return engine.Limit(l).Validate() }

// String formats the limit in the grammar ParseLimit reads, so that
// ParseLimit(l.String()) returns l for every valid l.
func (l Limit) String() string { return engine.Limit(l).String() }

// ParseLimit reads a limit written as
//
//	RATE/PERIOD [ALGORITHM] [burst=N] [buckets=N] [stepped] [shape] [max_delay=DURATION] [calendar[=ZONE]] [prefetch=N] [unit=NAME]
//	RATE concurrent [lease=DURATION] [unit=NAME]
//
// RATE is a positive decimal integer. PERIOD is a duration in Go's syntax
// (time.ParseDuration: "10s", "500ms", "1m30s", "2h"), or a whole number of
// days ("d", 24 hours) or weeks ("w", 7 days); its count may be left out
// when it is 1 ("s", "m", "h", "d", "w"). ALGORITHM is one of the Algorithm
// names ("gcra", "token_bucket", "leaky_bucket", "fixed_window",
// "sliding_window", "sliding_log"); without it the limit is GCRA. The other
// options set the Limit fields of the same names. calendar makes a fixed
// window follow the calendar in ZONE (an IANA name; UTC without one): its
// period is then "d", "w" or "month", and without an algorithm the limit
// is a fixed window. "RATE concurrent" is a Concurrency limit of RATE in
// flight, whose lease (its Period) is 1 minute unless lease= says
// otherwise. Fields are separated by spaces; options may come in any
// order, each at most once.
//
// Examples: "100/m", "5/10s", "5000/d", "20/s token_bucket burst=40",
// "100/m sliding_window buckets=6", "2/s leaky_bucket burst=10 shape max_delay=3s",
// "1000/d calendar=Europe/Berlin", "100000/month fixed_window calendar",
// "10 concurrent", "3 concurrent lease=30s", "50000/s prefetch=100",
// "100000/m unit=tokens".
//
// The result is validated: errors wrap ErrInvalidLimit and name the part of
// s that is wrong.
func ParseLimit(s string) (Limit, error) {
	l, err := engine.ParseLimit(s)
	return Limit(l), err
}

// ParseLimits reads several limits for one key, separated by commas, each
// in ParseLimit's grammar: "10/s, 1000/h", "20/s token_bucket burst=40,
// 5000/d fixed_window". It accepts what AllowAll does: 1 to 16 limits, no
// two of which would share state (the same algorithm, period and unit). Errors
// wrap ErrInvalidLimit and name the limit that is wrong.
func ParseLimits(s string) ([]Limit, error) {
	limits, err := engine.ParseLimits(s)
	if err != nil {
		return nil, err
	}
	out := make([]Limit, len(limits))
	for i, l := range limits {
		out[i] = Limit(l)
	}
	return out, nil
}

// convert converts limits for the engine: into buf when they fit.
func convert(ls []Limit, buf *[engine.MaxLimits]engine.Limit) []engine.Limit {
	out := buf[:0]
	if len(ls) > len(buf) {
		out = make([]engine.Limit, 0, len(ls))
	}
	for _, l := range ls {
		out = append(out, engine.Limit(l))
	}
	return out
}
