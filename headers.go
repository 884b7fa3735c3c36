package redlimit

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/redlimit/redlimit/core"
)

// The rate-limit fields of a verdict: their values, worked out here once
// per policy, and the names they are written under (answerer.headers,
// answer.go, writes them): HTTP's header names (http.Header) or gRPC's
// metadata keys (metadata.MD), which are both a map of name to values.

// HeaderProfile chooses which rate-limit fields answers carry. Retry-After
// is sent on 429 and 503 answers whatever the profile.
type HeaderProfile int

const (
	// HeadersXRateLimit sends X-RateLimit-Limit (the binding limit's
	// burst), X-RateLimit-Remaining and X-RateLimit-Reset (seconds until
	// the allowance is full) on every decided answer. It is the default.
	// Limit and Remaining count the limit's units, of which a request uses
	// WithCost's n (1 by default): with WithCost(100) under 150 a minute, a
	// request leaves Remaining 50, and the next is denied with Remaining
	// 50, fewer than it needs.
	HeadersXRateLimit HeaderProfile = iota
	// HeadersDraft sends the IETF draft's RateLimit-Policy and RateLimit
	// fields (draft-ietf-httpapi-ratelimit-headers) instead, one list
	// member per limit; their q and r count the limit's units too.
	HeadersDraft
	// HeadersBoth sends both sets.
	HeadersBoth
	// HeadersNone sends no rate-limit fields, only Retry-After on denials.
	HeadersNone
)

// fieldNames are the names a protocol gives the rate-limit fields.
type fieldNames struct {
	retryAfter, limit, remaining, reset, policy, rateLimit string
}

// The fields' names: HTTP's, in the canonical form of http.Header's keys,
// and gRPC's, as metadata keys (lowercase).
var (
	httpFields     = &fieldNames{"Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit"}
	metadataFields = &fieldNames{"retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy", "ratelimit"}
)

// quota is one limit of a request's decision, kept in its policy's scope,
// with what the headers say of it, built once. Each slice has len == cap,
// so a later Header.Add copies instead of writing into the shared array.
// pays: BenchmarkPolicyItem, 13 allocations and 2–3 µs a RateLimit-Policy
// member written per request; nethttp's BenchmarkMiddleware, 15 → 17
// allocations a request writing X-RateLimit-Limit's per request
// (docs/performance.md, issue 33).
type quota struct {
	scope    string
	limit    core.Limit
	name     string          // the draft's list member name
	member   string          // the same, as a structured-field string
	capacity []string        // X-RateLimit-Limit
	policy   string          // its RateLimit-Policy list member
	calendar *calendarPolicy // for a calendar limit, whose window's length changes, its member now; nil for others

	key int // the request's key it is decided for: 0 the policy's, i WithAlsoKey's i-th
}

// quotasOf returns the quotas of a policy's limits. The first is named as
// the policy; the others add the period their state is kept under, their
// algorithm where two of one unit share a period, and their unit if it is
// not requests: "api", "api-1h", "api-1h-fixed_window", "api-1m-tokens".
func quotasOf(scope string, limits []core.Limit) []quota {
	quotas := make([]quota, len(limits))
	for i, l := range limits {
		name := scope
		if i > 0 {
			variant, period := l.StateName()
			name += "-" + period
			for _, m := range limits[:i] {
				if m.Period == l.Period && m.Unit == l.Unit {
					name += "-" + strings.ReplaceAll(variant, ":", "-")
					break
				}
			}
			if l.Unit != "" {
				name += "-" + l.Unit
			}
		}
		quotas[i] = quota{scope: scope, limit: l, name: name, member: sfString(name),
			capacity: []string{strconv.Itoa(l.Capacity())},
			policy:   policyItem(name, l, l.Period),
		}
		if l.Calendar != "" {
			quotas[i].calendar = &calendarPolicy{name: name, limit: l}
		}
	}
	return quotas
}

// sfString writes a name as a structured-field String (RFC 9651, with
// github.com/dunglas/httpsfv). Names are checked to be printable ASCII
// when the policy is built, so this cannot fail.
func sfString(name string) string {
	s, err := httpsfv.Marshal(httpsfv.NewItem(name))
	if err != nil {
		panic(fmt.Sprintf("redlimit: policy name %q: %v", name, err))
	}
	return s
}

// maxWindow bounds the whole-second window a sub-second or fractional
// period is scaled up to in RateLimit-Policy.
const maxWindow = time.Hour

// sfMaxInteger is the largest Integer a structured field carries (RFC
// 9651, 3.3.1).
const sfMaxInteger = 999_999_999_999_999

// policyItem is the RateLimit-Policy list member of a limit named name
// whose window is period long (a calendar limit's: the window's own
// length, calendarPolicy):
// "name";q=<quota>;w=<window in seconds>, with ;redlimit-burst=<capacity>
// where the capacity differs from q; for a Concurrency limit
// "name";q=<in flight>;qu="concurrent-requests". The draft's window is a
// positive whole number of seconds: a period that is not one is scaled up
// to the shortest whole-second window it divides (3 per 500ms is
// q=6;w=1); if that is longer than maxWindow, or its quota more than a
// structured field's integer holds, the window is the period rounded up
// to whole seconds and q the most that window surely allows, rounded
// down. The arithmetic is exact for every valid limit: a period is at
// most 2^63 ns, a rate at most 2^32, and their products are worked out
// in 128 bits.
func policyItem(name string, l core.Limit, period time.Duration) string {
	item := httpsfv.NewItem(name)
	if l.Algorithm == core.Concurrency { // no window: requests in flight
		item.Params.Add("q", sfInteger(int64(l.Rate)))
		item.Params.Add("qu", "concurrent-requests")
		return sfList(name, item)
	}
	q, window := policyWindow(l.Rate, period)
	item.Params.Add("q", q)
	if l.Unit != "" { // the registry's units name none of these: the limit's own word
		item.Params.Add("qu", l.Unit)
	}
	item.Params.Add("w", window)
	if c := int64(l.Capacity()); c != q {
		item.Params.Add("redlimit-burst", sfInteger(c))
	}
	return sfList(name, item)
}

// calendarPolicy is the RateLimit-Policy member of a calendar limit,
// whose window is as long as the calendar says: w is the length of the
// window now is in (2 592 000 s in November, 2 678 400 in December, 82 800
// for a day that loses an hour), worked out once per window (pays:
// BenchmarkCalendarPolicy, 0 allocations and about 50 ns a request,
// against BenchmarkPolicyItem's). It is safe for concurrent use.
type calendarPolicy struct {
	name  string
	limit core.Limit
	cur   atomic.Pointer[calendarItem] // the last window's member; nil before the first
}

// calendarItem is a calendar limit's member in one window, [from, to).
type calendarItem struct {
	from, to time.Time
	member   string
}

// at returns the member of the window that holds now.
func (c *calendarPolicy) at(now time.Time) string {
	if it := c.cur.Load(); it != nil && !now.Before(it.from) && now.Before(it.to) {
		return it.member
	}
	from, to, ok := c.limit.Window(now)
	if !ok { // not reached: the limit was checked
		return policyItem(c.name, c.limit, c.limit.Period)
	}
	it := &calendarItem{from: from, to: to, member: policyItem(c.name, c.limit, to.Sub(from))}
	c.cur.Store(it)
	return it.member
}

// sfInteger bounds n to a structured field's Integer. Every valid limit's
// numbers are far inside; only a limit the engine refuses, which a
// request may pick (WithRequestLimits) and the headers never describe,
// reaches the bound, which keeps working out its fields from panicking.
func sfInteger(n int64) int64 { return max(-sfMaxInteger, min(n, sfMaxInteger)) }

// policyWindow returns RateLimit-Policy's q and w (in seconds) for rate
// events per d: the shortest whole-second window of whole periods, if it
// is at most maxWindow and its quota fits a structured field; else the
// period rounded up to whole seconds, and the quota of that window
// rounded down. For a valid limit (a period of at least 1 ms) that quota
// is below 1001 × rate, and fits. A limit the engine refuses (a request's
// own, WithRequestLimits) gets a harmless answer, never a panic: the
// headers never describe it.
func policyWindow(rate int, d time.Duration) (q, window int64) {
	if rate <= 0 || d < time.Microsecond {
		return 0, 1
	}
	const second = uint64(time.Second / time.Microsecond)
	r, period := uint64(rate), uint64(d/time.Microsecond)
	periods := second / gcd(period, second) // in lcm(period, 1 s)
	if period <= uint64(maxWindow/time.Microsecond)/periods && r <= sfMaxInteger/periods {
		return int64(r * periods), int64(period * periods / second)
	}
	w := (period + second - 1) / second // period < 2^63 µs: no overflow
	hi, lo := bits.Mul64(r, w*second)
	if hi >= period { // a quotient past 2^64: only a limit the engine refuses
		return sfMaxInteger, int64(w)
	}
	n, _ := bits.Div64(hi, lo, period)
	return int64(min(n, sfMaxInteger)), int64(w)
}

// gcd is the greatest common divisor of a and b.
func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// sfList writes item as a structured-field list of one member.
func sfList(name string, item httpsfv.Item) string {
	s, err := httpsfv.Marshal(httpsfv.List{item})
	if err != nil {
		panic(fmt.Sprintf("redlimit: RateLimit-Policy of %q: %v", name, err))
	}
	return s
}
