package redlimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

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
	// allowance is back.
	HeaderReset = "X-RateLimit-Reset"
	// HeaderPolicy is the IETF draft's RateLimit-Policy field:
	// "name";q=<rate>;w=<period in seconds>.
	HeaderPolicy = "RateLimit-Policy"
	// HeaderRateLimit is the IETF draft's RateLimit field:
	// "name";r=<remaining>;t=<seconds until reset>.
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
	limit    core.Limit
	capacity []string // X-RateLimit-Limit
	member   string   // the draft's list member name, a structured-field string
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
		q := sfString(member)
		quotas[i] = quota{scope: name, limit: l, member: q,
			capacity: []string{strconv.Itoa(l.Capacity())},
			policy:   []string{q + ";q=" + strconv.Itoa(l.Rate) + ";w=" + strconv.FormatInt(seconds(l.Period), 10)},
		}
	}
	return quotas
}

// setHeaders writes the rate-limit fields of a decision under quotas,
// whose limits answered each and together res, and Retry-After when
// denied. The X-RateLimit fields describe the binding limit; the draft's
// list every quota.
func setHeaders(h http.Header, profile HeaderProfile, quotas []quota, each []core.Result, res core.Result) {
	denied := !res.Allowed
	if denied {
		setRetryAfter(h, res.RetryAfter)
	}
	if profile == HeadersNone {
		return
	}
	if (profile == HeadersXRateLimit || profile == HeadersBoth) && (denied || !moreRestrictive(h, res.Remaining)) {
		vals := []string{strconv.Itoa(max(0, res.Remaining)), strconv.FormatInt(seconds(res.ResetAfter), 10)}
		h[keyLimit] = quotas[binding(each, res)].capacity
		h[keyRemaining] = vals[0:1:1]
		h[keyReset] = vals[1:2:2]
	}
	if profile == HeadersDraft || profile == HeadersBoth {
		items := make([]string, len(quotas))
		for i, q := range quotas {
			items[i] = q.member + ";r=" + strconv.Itoa(max(0, each[i].Remaining)) + ";t=" + strconv.FormatInt(seconds(each[i].ResetAfter), 10)
		}
		if _, seen := h[keyRateLimit]; seen { // another policy answered first
			h[keyRateLimit] = append(h[keyRateLimit], items...)
			for _, q := range quotas {
				h[keyPolicy] = append(h[keyPolicy], q.policy...)
			}
			return
		}
		h[keyRateLimit] = items
		if len(quotas) == 1 {
			h[keyPolicy] = quotas[0].policy
			return
		}
		policies := make([]string, len(quotas))
		for i, q := range quotas {
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

// sfString quotes s as a structured-field string (RFC 8941): printable
// ASCII only, with '"' and '\' escaped; other bytes become '?'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
