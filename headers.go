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

// headerValues are the fields that never change for one policy, built once.
// Each slice has len == cap, so a later Header.Add copies instead of
// writing into the shared array.
type headerValues struct {
	profile HeaderProfile
	limit   []string // X-RateLimit-Limit
	policy  []string // RateLimit-Policy
	quoted  string   // the policy name as a structured-field string
}

func newHeaderValues(profile HeaderProfile, name string, l core.Limit) headerValues {
	q := sfString(name)
	return headerValues{
		profile: profile,
		limit:   []string{strconv.Itoa(l.Capacity())},
		policy:  []string{q + ";q=" + strconv.Itoa(l.Rate) + ";w=" + strconv.FormatInt(seconds(l.Period), 10)},
		quoted:  q,
	}
}

// set writes the rate-limit fields of res, and Retry-After when denied.
func (v *headerValues) set(h http.Header, res core.Result, denied bool) {
	if v.profile == HeadersNone {
		if denied {
			setRetryAfter(h, res.RetryAfter)
		}
		return
	}
	remaining := strconv.Itoa(max(0, res.Remaining))
	reset := strconv.FormatInt(seconds(res.ResetAfter), 10)
	// One backing array for every value; each header gets a full slice of
	// it (len == cap), so appending to one cannot overwrite another.
	vals := make([]string, 0, 3)
	// Another policy may have answered this request already (a global and
	// a per-route limit): X-RateLimit-* then describe the more restrictive
	// of the two, or the one that denies, and the draft's fields, which are
	// lists, get one item each.
	if (v.profile == HeadersXRateLimit || v.profile == HeadersBoth) && (denied || !moreRestrictive(h, res.Remaining)) {
		vals = append(vals, remaining, reset)
		h[keyLimit] = v.limit
		h[keyRemaining] = vals[0:1:1]
		h[keyReset] = vals[1:2:2]
	}
	if v.profile == HeadersDraft || v.profile == HeadersBoth {
		vals = append(vals, v.quoted+";r="+remaining+";t="+reset)
		item := vals[len(vals)-1 : len(vals) : len(vals)]
		if _, seen := h[keyRateLimit]; seen {
			h[keyPolicy] = append(h[keyPolicy], v.policy...)
			h[keyRateLimit] = append(h[keyRateLimit], item...)
		} else {
			h[keyPolicy] = v.policy
			h[keyRateLimit] = item
		}
	}
	if denied {
		setRetryAfter(h, res.RetryAfter)
	}
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
