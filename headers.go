package redlimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/redlimit/redlimit/core"
)

// Response header names.
const (
	// HeaderRetryAfter is sent on every 429 and 503 answer: delay-seconds,
	// rounded up, at least 1.
	HeaderRetryAfter = "Retry-After"
	// HeaderLimit is the most requests that can pass at once: the limit's
	// burst (its Rate unless Burst is set).
	HeaderLimit = "X-RateLimit-Limit"
	// HeaderRemaining is how many more requests would pass right now.
	HeaderRemaining = "X-RateLimit-Remaining"
	// HeaderReset is the number of seconds, rounded up, until the full
	// allowance is back; with WithResetUnix, the Unix time then.
	HeaderReset = "X-RateLimit-Reset"
	// HeaderPolicy is the IETF draft's RateLimit-Policy field, one list
	// member per limit: "name";q=<quota>;w=<window in whole seconds>, and
	// ;redlimit-burst=<n> where the most that can pass at once differs
	// from q.
	HeaderPolicy = "RateLimit-Policy"
	// HeaderRateLimit is the IETF draft's RateLimit field, one list member
	// per limit: "name";r=<remaining>;t=<seconds until more quota is
	// available>, and ;pk=:<partition key>: with WithPartitionKey.
	HeaderRateLimit = "RateLimit"
)

// HeaderProfile chooses which rate-limit fields answers carry.
// Retry-After is sent on 429 and 503 answers whatever the profile.
type HeaderProfile int

const (
	// HeadersXRateLimit sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset on every answer. It is the default.
	HeadersXRateLimit HeaderProfile = iota
	// HeadersDraft sends the IETF draft's RateLimit-Policy and RateLimit
	// fields (draft-ietf-httpapi-ratelimit-headers) instead.
	HeadersDraft
	// HeadersBoth sends both sets.
	HeadersBoth
	// HeadersNone sends no rate-limit fields, only Retry-After on denials.
	HeadersNone
)

// The canonical forms used as http.Header map keys, so Header.Get finds them.
var (
	keyRetryAfter = http.CanonicalHeaderKey(HeaderRetryAfter)
	keyLimit      = http.CanonicalHeaderKey(HeaderLimit)
	keyRemaining  = http.CanonicalHeaderKey(HeaderRemaining)
	keyReset      = http.CanonicalHeaderKey(HeaderReset)
	keyPolicy     = http.CanonicalHeaderKey(HeaderPolicy)
	keyRateLimit  = http.CanonicalHeaderKey(HeaderRateLimit)
)

// quota is one limit of a request's decision as the headers show it, its
// fixed fields built once. Each slice has len == cap, so a later
// Header.Add copies instead of writing into the shared array.
type quota struct {
	scope    string
	name     string // the draft's list member
	limit    core.Limit
	capacity []string // X-RateLimit-Limit
	member   string   // the draft's list member: the policy's name as a structured-field string
	policy   []string // its RateLimit-Policy item
}

// quotasOf returns the quotas of a policy's limits. The first is named as
// the policy; the others add their period, and their algorithm where two
// share a period: "api", "api-1h", "api-1h-fixed_window".
func quotasOf(name string, limits []core.Limit) []quota {
	quotas := make([]quota, len(limits))
	for i, l := range limits {
		member := name
		if i > 0 {
			period := strings.TrimPrefix(core.Limit{Rate: 1, Period: l.Period}.String(), "1/")
			if period[0] < '0' || period[0] > '9' {
				period = "1" + period
			}
			member += "-" + period
			for _, m := range limits[:i] {
				if m.Period == l.Period {
					member += "-" + string(l.Algorithm)
					break
				}
			}
		}
		quotas[i] = quota{scope: name, name: member, limit: l, member: sfMember(member),
			capacity: []string{strconv.Itoa(l.Capacity())},
			policy:   []string{policyItem(member, l)},
		}
	}
	return quotas
}

// sfMember writes a policy name as a structured-field String (RFC 9651,
// with github.com/dunglas/httpsfv). Names are checked to be printable ASCII
// when the policy is built, so this cannot fail.
func sfMember(name string) string {
	s, err := httpsfv.Marshal(httpsfv.NewItem(name))
	if err != nil {
		panic(fmt.Sprintf("redlimit: policy name %q: %v", name, err))
	}
	return s
}

// maxWindow bounds the whole-second window a sub-second or fractional
// period is scaled up to in RateLimit-Policy.
const maxWindow = time.Hour

// policyItem is the RateLimit-Policy list member of a limit named name:
// "name";q=<quota>;w=<window in seconds>, with ;redlimit-burst=<capacity>
// where the capacity differs from q. The draft's window is a positive whole
// number of seconds: a period that is not one is scaled up to the shortest
// whole-second window it divides (3 per 500ms is q=6;w=1); if that is
// longer than maxWindow, the window is the period rounded up and q the
// most that window surely allows, rounded down.
func policyItem(name string, l core.Limit) string {
	period, second := int64(l.Period/time.Microsecond), int64(time.Second/time.Microsecond)
	window := period / gcd(period, second) * second // lcm(period, 1s), in µs
	q := int64(l.Rate) * (window / period)
	if window > int64(maxWindow/time.Microsecond) {
		window = (period + second - 1) / second * second
		q = int64(l.Rate) * window / period
	}
	item := httpsfv.NewItem(name)
	item.Params.Add("q", q)
	item.Params.Add("w", window/second)
	if c := int64(l.Capacity()); c != q {
		item.Params.Add("redlimit-burst", c)
	}
	s, err := httpsfv.Marshal(httpsfv.List{item})
	if err != nil {
		panic(fmt.Sprintf("redlimit: RateLimit-Policy of %q: %v", name, err))
	}
	return s
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// answer is what a decision's headers say: the binding result, each
// quota's, and the Retry-After of a denial, in seconds.
type answer struct {
	quotas     []quota
	each       []core.Result
	res        core.Result
	retryAfter int64 // 0 when allowed
	pk         string
}

// setHeaders writes the rate-limit fields of a under p's profile. The
// X-RateLimit fields describe the binding limit; the draft's list every
// quota, with t (the seconds until more quota is available) left out
// where it is 0 on an allowed answer (nothing more to come) or, on a
// denial, would be later than Retry-After.
func (p *Policy) setHeaders(h http.Header, a answer) {
	denied := !a.res.Allowed
	if denied {
		h[keyRetryAfter] = []string{strconv.FormatInt(a.retryAfter, 10)}
	}
	if p.profile == HeadersNone {
		return
	}
	if (p.profile == HeadersXRateLimit || p.profile == HeadersBoth) && (denied || !moreRestrictive(h, a.res.Remaining)) {
		// All three describe the binding limit, its reset included (the
		// Result's ResetAfter is the longest of all the limits').
		i := binding(a.each, a.res)
		reset := seconds(a.each[i].ResetAfter)
		if p.resetUnix {
			reset = time.Now().Add(a.each[i].ResetAfter + time.Second - 1).Unix()
		}
		vals := []string{strconv.Itoa(max(0, a.res.Remaining)), strconv.FormatInt(reset, 10)}
		h[keyLimit] = a.quotas[i].capacity
		h[keyRemaining] = vals[0:1:1]
		h[keyReset] = vals[1:2:2]
	}
	if p.profile == HeadersDraft || p.profile == HeadersBoth {
		items := make([]string, len(a.quotas))
		for i, q := range a.quotas {
			r := a.each[i]
			item := q.member + ";r=" + strconv.Itoa(max(0, r.Remaining))
			if t := seconds(r.NextAfter); t > 0 && (!denied || t <= a.retryAfter) {
				item += ";t=" + strconv.FormatInt(t, 10)
			}
			items[i] = item + a.pk
		}
		if _, seen := h[keyRateLimit]; seen { // another policy answered first: add to its lists
			h[keyRateLimit] = append(h[keyRateLimit], items...)
			for _, q := range a.quotas {
				h[keyPolicy] = append(h[keyPolicy], q.policy...)
			}
			return
		}
		h[keyRateLimit] = items
		if len(a.quotas) == 1 {
			h[keyPolicy] = a.quotas[0].policy
			return
		}
		policies := make([]string, len(a.quotas))
		for i, q := range a.quotas {
			policies[i] = q.policy[0]
		}
		h[keyPolicy] = policies
	}
}

// binding returns the index of the binding limit's result in each: the
// first that matches res.
func binding(each []core.Result, res core.Result) int {
	for i, r := range each {
		if r.Limit == res.Limit && r.Allowed == res.Allowed && r.Remaining == res.Remaining && r.RetryAfter == res.RetryAfter {
			return i
		}
	}
	return 0
}

// moreRestrictive reports whether h already carries an X-RateLimit-Remaining
// no greater than remaining, from a policy that answered first.
func moreRestrictive(h http.Header, remaining int) bool {
	prev, ok := h[keyRemaining]
	if !ok || len(prev) != 1 {
		return false
	}
	n, err := strconv.Atoi(prev[0])
	return err == nil && n <= remaining
}

// setRetryAfter writes d as delay-seconds, rounded up, never 0.
func setRetryAfter(h http.Header, d time.Duration) {
	h[keyRetryAfter] = []string{strconv.FormatInt(max(1, seconds(d)), 10)}
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > core.InfDuration-time.Second {
		return int64(core.InfDuration / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}
