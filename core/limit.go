package core

import (
	"errors"
	"fmt"
	"math"
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

// MaxCount bounds a Limit's Rate and Burst, and a settlement's cost: a
// uint32's range (Envoy's requests_per_unit is one), or int's where int is
// smaller. Validate refuses the limits whose state the scripts cannot
// count exactly. It is also the most the HTTP layer charges one request
// (WithMaxCost's default) and envoyrls one descriptor.
const MaxCount = min(math.MaxInt, math.MaxUint32)

// Bounds of a Limit's other fields.
const (
	// maxMembers bounds what one script call may add to or take from a
	// sorted set, and so the server's time for it (about 1 µs a member,
	// docs/algorithms.md#the-cost-of-one-call): a Concurrency limit's Rate
	// (each slot held is a member), a SlidingLog's Rate (each event in the
	// window is one), and the slots and log entries one decision takes.
	maxMembers     = 10_000
	maxDebt        = 1 << 50 * time.Microsecond // MaxDebt's bound, about 35 years: keeps every value exact
	minPeriod      = time.Millisecond           // Redis key TTLs are whole milliseconds
	defaultBuckets = 10                         // a SlidingWindow's Buckets when 0
	defaultLease   = time.Minute                // a Concurrency limit's Period when ParseLimit reads none
	maxBuckets     = 100                        // bounds a SlidingWindow key's size and the script's work
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
// ErrInvalidLimit and say what is wrong, in the words ParseLimit uses for
// a limit so written.
func (l Limit) Validate() error {
	if err := l.problem(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidLimit, err)
	}
	return nil
}

// problem returns what makes the limit invalid, or nil: the one wording
// of each rule on a Limit's values, which Validate and ParseLimit both
// report.
func (l Limit) problem() error {
	d := l.descriptor()
	var err error
	switch {
	case d == nil:
		err = fmt.Errorf("unknown algorithm %q (want one of %s)", l.Algorithm, algorithmNames())
	case l.Rate <= 0:
		err = errNotPositive("rate", l.Rate)
	case l.Rate > MaxCount:
		err = errAboveMaxCount("rate", l.Rate)
	case l.Period < minPeriod:
		err = fmt.Errorf("period %v must be at least %v", l.Period, minPeriod)
	case l.Period%time.Microsecond != 0:
		err = fmt.Errorf("period %v must be whole microseconds", l.Period)
	case l.Burst < 0:
		err = fmt.Errorf("burst %d must not be negative (0 means rate)", l.Burst)
	case l.Burst > MaxCount:
		err = errAboveMaxCount("burst", l.Burst)
	case l.Prefetch < 0:
		err = fmt.Errorf("prefetch %d must not be negative (0 means none)", l.Prefetch)
	case l.Prefetch > l.Capacity():
		err = fmt.Errorf("prefetch %d is above the %d events that can pass at once", l.Prefetch, l.Capacity())
	case !validUnit(l.Unit):
		err = fmt.Errorf("unit %q must be lowercase letters, digits, '_' or '-', at most %d bytes", l.Unit, maxUnitLen)
	case l.Algorithm == Concurrency && l.Rate > maxMembers:
		err = fmt.Errorf("a concurrency limit holds at most %d slots, not %d (each is a member of a sorted set that one script call may have to add or remove)", maxMembers, l.Rate)
	case l.Algorithm == SlidingLog && l.Rate > maxMembers:
		err = fmt.Errorf("a sliding_log keeps one entry per event in its window: at most %d, not %d (for more, use sliding_window or gcra)", maxMembers, l.Rate)
	case l.MaxDebt < 0 || l.MaxDebt > maxDebt || l.MaxDebt%time.Microsecond != 0:
		err = fmt.Errorf("max_debt %v must be whole microseconds from 0 (one period) to %v", l.MaxDebt, maxDebt)
	case d.window && l.Burst != 0 && l.Burst != l.Rate:
		err = fmt.Errorf("%s allows rate events per window; burst %d must be 0 or equal to rate %d",
			l.algorithm(), l.Burst, l.Rate)
	default:
		err = l.checkKnobs(d)
		if err == nil && d.check != nil {
			err = d.check(l)
		}
		if span := d.span(l); err == nil && span > exactMax {
			err = spanError(l, d, span)
		}
	}
	return err
}

// errNotPositive says that the field name, v, must be above zero.
func errNotPositive(name string, v any) error {
	return fmt.Errorf("%s %v must be positive", name, v)
}

// errAboveMaxCount says that the count name, n, is above MaxCount.
func errAboveMaxCount(name string, n any) error {
	return fmt.Errorf("%s %v is above the maximum %d", name, n, MaxCount)
}

// debt returns how long, in µs, one charge may leave the limit's state in
// debt past its full allowance coming back: MaxDebt, or one Period.
func (l Limit) debt() int64 {
	if l.MaxDebt == 0 {
		return micros(l.Period)
	}
	return micros(l.MaxDebt)
}

// spanError says why l, whose state would hold span, is refused (its
// script cannot count it exactly), and how to fix it.
func spanError(l Limit, d *descriptor, span float64) error {
	p := micros(l.Period)
	var why, fix string
	switch {
	case !d.window: // the buckets and GCRA count time: period/gcd units an event
		g := gcd(p, int64(l.Rate))
		why = fmt.Sprintf("burst %d times the %d units each event counts: the period, %d µs, over its common factor with the rate, %d",
			l.Capacity(), p/g, p, g)
		fix = "a shorter period with a rate to match"
		if perSecond := float64(l.Rate) * 1e6 / float64(p); l.Period > time.Second && perSecond >= 1 {
			fix += fmt.Sprintf(" (%d/s is about the same rate)", int64(perSecond))
		}
		fix += ", a smaller burst, or a fixed_window, which counts events, not time"
	case l.algorithm() == SlidingWindow && float64(p) < span:
		why = fmt.Sprintf("three times rate %d (the most a window holds in debt) times a sub-bucket's %d µs", l.Rate, p/int64(l.buckets()))
		fix = "more buckets, a shorter period or a lower rate"
	default:
		why = fmt.Sprintf("the period, %d µs", p)
		fix = "a shorter period"
	}
	return fmt.Errorf("%v cannot be counted exactly: its state would reach %.4g (%s), above 2^52; Lua counts exactly only up to 2^53, its numbers being doubles, and the clock takes the rest. Take %s",
		l, span, why, fix)
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
	switch {
	case l.Algorithm == Concurrency:
		b.WriteString(" concurrent")
		if l.Period != defaultLease {
			b.WriteString(" lease=")
			b.WriteString(formatPeriod(l.Period, periodUnits))
		}
	case l.Calendar != "" && l.Period == month:
		b.WriteString("/month") // not a duration: the calendar's
	default:
		b.WriteByte('/')
		b.WriteString(formatPeriod(l.Period, periodUnits))
	}
	if l.Algorithm != "" && l.Algorithm != Concurrency {
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
	switch l.Calendar {
	case "":
	case "UTC":
		b.WriteString(" calendar")
	default:
		b.WriteString(" calendar=")
		b.WriteString(l.Calendar)
	}
	if l.Prefetch != 0 {
		b.WriteString(" prefetch=")
		b.WriteString(strconv.Itoa(l.Prefetch))
	}
	if l.Unit != "" {
		b.WriteString(" unit=")
		b.WriteString(l.Unit)
	}
	if l.MaxDebt != 0 {
		b.WriteString(" max_debt=")
		b.WriteString(formatPeriod(l.MaxDebt, periodUnits))
	}
	return b.String()
}

// maxUnitLen bounds a Unit's name, which every key of the limit carries.
const maxUnitLen = 32

// validUnit reports whether u can name a Limit's unit: "" or a word of
// lowercase letters, digits, '_' and '-'.
func validUnit(u string) bool {
	if len(u) > maxUnitLen {
		return false
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// periodUnit is a period unit of the grammar.
type periodUnit struct {
	name string
	d    time.Duration
}

// Calendar periods: a day, a week, and the mean Gregorian month (365.2425
// days / 12), which is what a "month" Limit's Period holds.
const (
	day   = 24 * time.Hour
	week  = 7 * day
	month = 2_629_746 * time.Second
)

// periodUnits are the units String writes, tried largest first. keyUnits
// are the units of a period in a Redis key: no weeks or days, so that the
// keys of a "24h" limit written before "d" existed stay the same.
var (
	periodUnits = []periodUnit{{"w", week}, {"d", day}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}, {"us", time.Microsecond}}
	keyUnits    = periodUnits[2:]
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
// The result is validated: errors wrap ErrInvalidLimit, quote s and say
// what is wrong; a value the grammar reads but Validate refuses (a rate of
// 0, a period under a millisecond) in Validate's words.
func ParseLimit(s string) (Limit, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Limit{}, fmt.Errorf("%w: empty limit (want RATE/PERIOD, e.g. \"100/m\")", ErrInvalidLimit)
	}
	p := limitParser{seen: make(map[string]bool, len(fields)-1)}
	options, err := p.head(fields)
	for i := 0; err == nil && i < len(options); i++ {
		err = p.option(options[i])
	}
	if err == nil {
		err = p.finish()
	}
	if err == nil {
		err = p.l.problem()
	}
	if err != nil {
		return Limit{}, fmt.Errorf("%w: %q: %v", ErrInvalidLimit, s, err)
	}
	return p.l, nil
}

// limitParser is ParseLimit's state while it reads one limit: the Limit so
// far, and what the head said that the options may change the meaning of.
// It judges the grammar only: what the values may be is Validate's to say
// (problem), except that an option is not written with the value that
// leaving it out means (burst=0). Its errors say what is wrong without
// the limit's text, which ParseLimit adds.
type limitParser struct {
	l       Limit
	rate    string          // RATE as written
	monthly bool            // PERIOD is "month": the calendar must say so
	seen    map[string]bool // the options read, each at most once
}

// head reads the limit's head, "RATE/PERIOD" or "RATE concurrent", and
// returns the fields after it: the options.
func (p *limitParser) head(fields []string) ([]string, error) {
	rate, period, perPeriod := strings.Cut(fields[0], "/")
	options := fields[1:]
	switch {
	case !perPeriod && len(fields) > 1 && fields[1] == "concurrent":
		p.l.Algorithm, p.l.Period = Concurrency, defaultLease
		options = fields[2:]
	case !perPeriod:
		return nil, errors.New("want RATE/PERIOD, e.g. \"100/m\", or RATE concurrent")
	}
	var err error
	p.rate = rate
	if p.l.Rate, err = parseCount("rate", rate); err != nil {
		return nil, err
	}
	p.monthly = perPeriod && (period == "month" || period == "1month")
	switch {
	case p.monthly:
		p.l.Period = month
	case perPeriod:
		if p.l.Period, err = parsePeriod("period", period); err != nil {
			return nil, err
		}
	}
	return options, nil
}

// option reads one option: an algorithm's name, a flag (stepped, shape,
// calendar) or a setting (NAME=VALUE), each at most once.
func (p *limitParser) option(f string) error {
	name, value, hasValue := strings.Cut(f, "=")
	if _, known := algorithms[Algorithm(f)]; known && f != string(Concurrency) {
		name = "algorithm"
	}
	if p.seen[name] {
		return fmt.Errorf("%s given twice", name)
	}
	p.seen[name] = true
	known, err := false, error(nil)
	switch {
	case name == "algorithm" && p.l.Algorithm == Concurrency:
		return fmt.Errorf("%q: a concurrency limit has no other algorithm", f)
	case name == "algorithm":
		p.l.Algorithm, known = Algorithm(f), true
	case hasValue:
		known, err = p.setting(name, value)
	default:
		known = p.flag(f)
	}
	if !known {
		return fmt.Errorf("unknown option %q (want an algorithm: %s; or burst=N, buckets=N, stepped, shape, max_delay=DURATION, calendar[=ZONE], prefetch=N, unit=NAME, max_debt=DURATION; a concurrency limit takes lease=DURATION)", f, algorithmNames())
	}
	return err
}

// setting reads the option name=value into the Limit. It reports whether
// the limit takes such a setting.
func (p *limitParser) setting(name, value string) (known bool, err error) {
	l := &p.l
	switch {
	case name == "burst":
		l.Burst, err = optionCount(name, value)
	case name == "buckets":
		l.Buckets, err = optionCount(name, value)
	case name == "max_delay":
		l.MaxDelay, err = optionDuration(name, value)
	case name == "max_debt":
		l.MaxDebt, err = optionDuration(name, value)
	case name == "prefetch":
		l.Prefetch, err = optionCount(name, value)
	case name == "unit":
		if l.Unit = value; value == "" {
			err = errors.New("unit is missing (want e.g. \"unit=tokens\")")
		}
	case name == "lease" && l.Algorithm == Concurrency:
		l.Period, err = parsePeriod(name, value)
	case name == "calendar" && value != "":
		l.Calendar = value
	default:
		return false, nil
	}
	return true, err
}

// optionCount reads the value of the count option name: not 0, which is
// what leaving the option out means.
func optionCount(name, value string) (int, error) {
	n, err := parseCount(name, value)
	if err == nil && n == 0 {
		err = errNotPositive(name, n)
	}
	return n, err
}

// optionDuration reads the value of the duration option name: not 0,
// which is what leaving the option out means.
func optionDuration(name, value string) (time.Duration, error) {
	d, err := parsePeriod(name, value)
	if err == nil && d == 0 {
		err = errNotPositive(name, d)
	}
	return d, err
}

// flag reads the option f, written without a value, into the Limit. It
// reports whether f is a flag.
func (p *limitParser) flag(f string) bool {
	switch f {
	case "calendar":
		p.l.Calendar = "UTC"
	case "stepped":
		p.l.Stepped = true
	case "shape":
		p.l.Shape = true
	default:
		return false
	}
	return true
}

// finish applies what the options mean together: a calendar without an
// algorithm is a fixed window, and a month is a period only on the
// calendar.
func (p *limitParser) finish() error {
	switch {
	case p.l.Calendar != "" && p.l.Algorithm == "":
		p.l.Algorithm = FixedWindow
	case p.monthly && p.l.Calendar == "":
		return fmt.Errorf("a month is a period only on the calendar: add \"calendar\" (\"%s/month fixed_window calendar\")", p.rate)
	}
	return nil
}

// parseCount reads the count name, written in decimal digits. What the
// count may be is Validate's to say (or optionCount's), but for one too
// large for an int, refused in Validate's words.
func parseCount(name, s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%s %q must be a positive integer", name, s)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errAboveMaxCount(name, s)
	}
	return n, nil
}

// parsePeriod reads the duration name: a Go duration, or a whole number
// of days or weeks, whose leading 1 may be omitted, and which may be
// negative. What the duration may be is Validate's to say (or
// optionDuration's).
func parsePeriod(name, s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("%s is missing (want e.g. \"s\", \"10s\", \"500ms\", \"d\", \"w\")", name)
	}
	abs, negative := strings.CutPrefix(s, "-")
	if abs == "" || strings.ContainsRune("-+.", rune(abs[0])) { // a sign or a leading dot
		return 0, fmt.Errorf("%s %q must be a positive duration", name, s)
	}
	d, err := parseDuration(abs)
	if err != nil {
		return 0, fmt.Errorf("%s %q %v", name, s, err)
	}
	if negative {
		d = -d
	}
	return d, nil
}

// parseDuration reads an unsigned duration, of Go's syntax or of whole
// days or weeks, whose leading 1 may be omitted.
func parseDuration(s string) (time.Duration, error) {
	if c := s[0]; c < '0' || c > '9' {
		s = "1" + s
	}
	for _, u := range periodUnits[:2] { // days and weeks: whole numbers of them
		count, ok := strings.CutSuffix(s, u.name)
		if !ok || strings.TrimLeft(count, "0123456789") != "" {
			continue
		}
		n, err := strconv.ParseInt(count, 10, 64)
		if err != nil || n > int64(maxPeriod/u.d) {
			return 0, errors.New("is too long")
		}
		return time.Duration(n) * u.d, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("is not a duration with a unit (us, ms, s, m, h, d, w)")
	}
	return d, nil
}

// maxPeriod bounds a period in days so that the count cannot overflow;
// Validate bounds it more tightly.
const maxPeriod = time.Duration(1<<63 - 1)

// ParseLimits reads several limits for one key, separated by commas, each
// in ParseLimit's grammar: "10/s, 1000/h", "20/s token_bucket burst=40,
// 5000/d fixed_window". It accepts what AllowAll does: 1 to 16 limits, no
// two of which would share state (the same algorithm, period and unit). Errors
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
	if err := CheckLimits(nil, limits); err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	return limits, nil
}
