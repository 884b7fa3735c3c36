package redlimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/redlimit/redlimit/core"
)

// A Decision and how it is answered: the rate-limit fields of every
// verdict (their values are worked out once per policy, in headers.go),
// how long a denied request should wait (RetryAfter, Seconds: the one
// place of that rule, whatever the protocol), and the status and body of
// a request that may not proceed.

// Decision is what a policy decided for one request. Observers
// (WithObserver) and deny handlers (WithDenyHandler) receive it.
type Decision struct {
	// Policy is the name of the policy that decided.
	Policy string
	// Key is the request's key, from the key function (hashed when longer
	// than 128 bytes); "" when skipped or when the key function failed.
	Key string
	// Outcome is what became of the request.
	Outcome Outcome
	// Result is the limiter's answer: the binding limit's. It is zero when
	// the request was skipped or had no key, or when Redis failed and the
	// failure policy is FailOpen or FailClosed.
	Result core.Result
	// Status is 0 when the request may proceed. Otherwise it is the status
	// it is answered with: 429 Too Many Requests, 503 Service Unavailable
	// (Redis failing under FailClosed, or the client left while a shaping
	// limit queued it) or 400 Bad Request (no key, or limits that cannot
	// decide the request: invalid, or a burst below its cost).
	Status int
	// Err is the Redis error, the key function's error, the configuration
	// error of limits that cannot decide the request (wrapping
	// core.ErrInvalidLimit or core.ErrInvalidCost), or the context's error
	// when the client left; nil otherwise.
	Err error
	// Duration is how long the decision took, Redis included (and a
	// shaping limit's wait). It is measured only for observers.
	Duration time.Duration
	// RetryAfter is how long the answer tells the client to wait: for a
	// 429, RetryAfter(Result, the policy's WithRetryAfterJitter); a second
	// for a 503; 0 otherwise. Retry-After carries it in whole seconds,
	// rounded up (Seconds, at least 1), grpclimit's RetryInfo to the
	// millisecond.
	RetryAfter time.Duration

	binding  int      // the index of the binding limit among the request's
	violated []string // with WithProblemDetails: the list members that denied
	problem  bool     // WithProblemDetails: Answer is an RFC 9457 problem
}

// Allowed reports whether the request may proceed.
func (d Decision) Allowed() bool { return d.Status == 0 }

// Outcome names what became of a request, for metrics: one of the Outcome
// constants.
type Outcome string

// The outcomes, each request exactly one.
const (
	// OutcomeAllowed: Redis allowed the request.
	OutcomeAllowed Outcome = "allowed"
	// OutcomeDenied: Redis denied it (429).
	OutcomeDenied Outcome = "denied"
	// OutcomeCached: the Limiter's deny cache denied it, without asking
	// Redis (429).
	OutcomeCached Outcome = "denied_cached"
	// OutcomeDryRun: a dry run would have denied it; it passed.
	OutcomeDryRun Outcome = "dry_run_denied"
	// OutcomeLocal: Redis failed and FailLocal decided, allowing or denying
	// (see Status).
	OutcomeLocal Outcome = "local"
	// OutcomeError: Redis failed or was too slow, and FailOpen let it
	// through or FailClosed refused it (503); or its client left.
	OutcomeError Outcome = "error"
	// OutcomeInvalid: it had no key, or limits it picked were invalid or
	// could not admit its cost (400, or a pass in a dry run).
	OutcomeInvalid Outcome = "invalid"
	// OutcomeSkipped: WithSkip exempted it.
	OutcomeSkipped Outcome = "skipped"
)

// outcomes lists every Outcome once, in the order of Outcomes.
var outcomes = [...]Outcome{OutcomeAllowed, OutcomeDenied, OutcomeCached, OutcomeDryRun,

	OutcomeLocal, OutcomeError, OutcomeInvalid, OutcomeSkipped}

// Outcomes returns every Outcome, each once, in a fixed order: for metrics
// that make their series up front.
func Outcomes() []Outcome { return outcomes[:] }

// answerer is how a policy answers: the options that shape its headers and
// its denials.
type answerer struct {
	profile   HeaderProfile
	resetUnix bool
	jitter    time.Duration
	pkSecret  []byte
	problem   bool
	handler   func(http.ResponseWriter, *http.Request, Decision) // WithDenyHandler's
}

func (a *answerer) check() error {
	switch {
	case a.profile < HeadersXRateLimit || a.profile > HeadersNone:
		return fmt.Errorf("redlimit: unknown header profile %d", a.profile)
	case a.jitter < 0:
		return fmt.Errorf("redlimit: negative Retry-After jitter %v", a.jitter)
	case a.pkSecret != nil && len(a.pkSecret) < 16:
		return fmt.Errorf("redlimit: WithPartitionKey: a secret of %d bytes; want at least 16", len(a.pkSecret))
	}
	return nil
}

// headers writes the rate-limit fields of d, decided under quotas with
// each one's result in each, to h under the names n: an http.Header with
// httpFields, gRPC metadata with metadataFields. The X-RateLimit fields describe the binding
// limit; the draft's list every quota, in one field line each, with t (the
// seconds until more quota is available) left out where it is 0 on an
// allowed answer (nothing more to come) or, on a denial, would be later
// than Retry-After. A policy that answers after another on the same
// request (nested middleware) adds its members to the draft's lists, and
// its X-RateLimit fields replace the others' only if it has fewer
// remaining.
func (a *answerer) headers(h map[string][]string, n *fieldNames, d *Decision, quotas []quota, each []core.Result) {
	denied := !d.Result.Allowed
	if denied {
		h[n.retryAfter] = []string{strconv.FormatInt(retryAfterSeconds(d.RetryAfter), 10)}
	}
	if a.profile == HeadersNone {
		return
	}
	if (a.profile == HeadersXRateLimit || a.profile == HeadersBoth) && (denied || !moreRestrictive(h, n, d.Result.Remaining)) {
		b := d.binding
		reset := Seconds(each[b].ResetAfter)
		if a.resetUnix {
			reset = time.Now().Add(each[b].ResetAfter + time.Second - 1).Unix()
		}
		vals := []string{strconv.Itoa(max(0, d.Result.Remaining)), strconv.FormatInt(reset, 10)}
		h[n.limit] = quotas[b].capacity
		h[n.remaining] = vals[0:1:1]
		h[n.reset] = vals[1:2:2]
	}
	if a.profile == HeadersDraft || a.profile == HeadersBoth {
		pk := ""
		if a.pkSecret != nil {
			pk = a.partitionKey(d.Key)
		}
		var rl, pol strings.Builder
		for i, q := range quotas {
			if i > 0 {
				rl.WriteString(", ")
				pol.WriteString(", ")
			}
			r := each[i]
			rl.WriteString(q.member)
			rl.WriteString(";r=")
			rl.WriteString(strconv.Itoa(max(0, r.Remaining)))
			if t := Seconds(r.NextAfter); t > 0 && (!denied || t <= retryAfterSeconds(d.RetryAfter)) {
				rl.WriteString(";t=")
				rl.WriteString(strconv.FormatInt(t, 10))
			}
			rl.WriteString(pk)
			if q.calendar != nil { // its window's length changes: the one now is in
				pol.WriteString(q.calendar.at(time.Now()))
			} else {
				pol.WriteString(q.policy)
			}
		}
		addToList(h, n.rateLimit, rl.String())
		addToList(h, n.policy, pol.String())
	}
}

// addToList sets the list field name to members, one field line, after
// the members a policy that answered first put there.
func addToList(h map[string][]string, name, members string) {
	if prev := h[name]; len(prev) > 0 {
		members = strings.Join(prev, ", ") + ", " + members
	}
	h[name] = []string{members}
}

// moreRestrictive reports whether h already carries an X-RateLimit-Remaining
// no greater than remaining, from a policy that answered first.
func moreRestrictive(h map[string][]string, n *fieldNames, remaining int) bool {
	prev, ok := h[n.remaining]
	if !ok || len(prev) != 1 {
		return false
	}
	v, err := strconv.Atoi(prev[0])
	return err == nil && v <= remaining
}

// partitionKey is the draft's pk parameter for key: ";pk=:<base64>:".
func (a *answerer) partitionKey(key string) string {
	mac := hmac.New(sha256.New, a.pkSecret)
	mac.Write([]byte(key))
	pk, err := httpsfv.Marshal(httpsfv.NewItem(mac.Sum(nil)[:12]))
	if err != nil { // not reached: any bytes are a Byte Sequence
		return ""
	}
	return ";pk=" + pk
}

// The rules every answer to a denied request follows, whatever its
// protocol: how long it should wait (RetryAfter), and how a time becomes
// the whole seconds of a rate-limit field (Seconds). HTTP's Retry-After
// and X-RateLimit-Reset, the draft's RateLimit t, gRPC's RetryInfo and
// envoyrls's answers are computed here and nowhere else.

// RetryAfter returns how long a request denied with res should wait before
// it tries again: res.RetryAfter, or, for a request that can never pass
// (core.InfDuration: its cost is above its limit's burst), its limit's
// Period; plus up to jitter more, chosen at random (WithRetryAfterJitter:
// clients denied together do not all come back at once), none when jitter
// is 0 or less. A Decision's RetryAfter is it.
func RetryAfter(res core.Result, jitter time.Duration) time.Duration {
	d := res.RetryAfter
	if d == core.InfDuration {
		d = res.Limit.Period
	}
	if jitter > 0 && d < core.InfDuration-jitter {
		d += rand.N(jitter)
	}
	return d
}

// Seconds returns d in whole seconds, rounded up, as the rate-limit fields
// carry times: 0 for d of 0 or less, saturating at core.InfDuration's.
// Retry-After is at least 1: max(1, Seconds(d)).
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > core.InfDuration-time.Second {
		return int64(core.InfDuration / time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is a Retry-After field's value for a wait of d.
func retryAfterSeconds(d time.Duration) int64 { return max(1, Seconds(d)) }

// deny answers a request whose Decision is not Allowed: with the deny
// handler if one was given, else with d's Answer. The rate-limit fields
// are set already (a 503's Retry-After: 1 too).
func (a *answerer) deny(w http.ResponseWriter, r *http.Request, d Decision) {
	if a.handler != nil {
		a.handler(w, r, d)
		return
	}
	contentType, body := d.Answer()
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	_, _ = w.Write(body)
}

// Answer returns the body of the answer to a request that may not proceed
// (d not Allowed), and its Content-Type: the JSON object
// {"error":"rate limit exceeded","retry_after":3} (retry_after, the
// Retry-After sent, absent on a 400), or, when the policy has
// WithProblemDetails, an RFC 9457 problem: a 429 as the IETF draft's
// quota-exceeded type naming the policies that denied
// ("violated-policies"), a 503 or 400 as about:blank. Its "error" or
// "detail" is Message. The body ends in a newline.
//
// The HTTP adapters write it, with d.Status, X-Content-Type-Options:
// nosniff and the rate-limit fields, unless WithDenyHandler replaces it.
// An adapter for a framework not built on net/http (fiber, fasthttp)
// calls ServeRequest for the Decision and the fields, and writes
// d.Status, the fields and this body in its own way.
func (d Decision) Answer() (contentType string, body []byte) {
	if d.problem {
		return "application/problem+json", problemBody(d)
	}
	buf := make([]byte, 0, 64)
	buf = append(buf, `{"error":"`...)
	buf = append(buf, d.Message()...) // a fixed message: nothing to escape
	buf = append(buf, '"')
	if d.RetryAfter > 0 {
		buf = append(buf, `,"retry_after":`...)
		buf = strconv.AppendInt(buf, retryAfterSeconds(d.RetryAfter), 10)
	}
	return "application/json; charset=utf-8", append(buf, "}\n"...)
}

// Message returns a short text for the answer to a request that may not
// proceed, after its Status and error: "rate limit exceeded" (429), "rate
// limiter unavailable" (503), and for a 400 what was wrong with the
// request ("request has no rate limit key", "request's rate limits could
// not be chosen", "request's rate limits are invalid", "request costs
// more than its rate limit allows"). It never contains error details.
// Answer's body and grpclimit's status messages carry it; "" when d is
// Allowed.
func (d Decision) Message() string {
	switch {
	case d.Status == 0:
		return ""
	case d.Status == http.StatusTooManyRequests:
		return "rate limit exceeded"
	case d.Status != http.StatusBadRequest:
		return "rate limiter unavailable"
	case errors.Is(d.Err, core.ErrInvalidCost):
		return "request costs more than its rate limit allows"
	case errors.Is(d.Err, core.ErrInvalidLimit):
		return "request's rate limits are invalid"
	case errors.As(d.Err, new(pickError)):
		return "request's rate limits could not be chosen"
	}
	return "request has no rate limit key"
}

// Problem types of the answers WithProblemDetails writes.
const (
	// problemQuotaExceeded is the IETF draft's problem type for a request
	// that exceeds one or more quota policies.
	problemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemTitle         = "Request cannot be satisfied as assigned quota has been exceeded"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Detail     string   `json:"detail,omitempty"`
	Violated   []string `json:"violated-policies,omitempty"`
	RetryAfter int64    `json:"retry_after,omitempty"`
}

// problemBody is d as an RFC 9457 problem: a denial as the draft's
// quota-exceeded type naming the policies that denied, any other answer
// as about:blank with its status's text.
func problemBody(d Decision) []byte {
	pr := problem{Type: "about:blank", Title: http.StatusText(d.Status), Status: d.Status, Detail: d.Message()}
	if d.RetryAfter > 0 {
		pr.RetryAfter = retryAfterSeconds(d.RetryAfter)
	}
	if d.Status == http.StatusTooManyRequests {
		pr.Type, pr.Title, pr.Violated = problemQuotaExceeded, problemTitle, d.violated
	}
	body, _ := json.Marshal(pr) // strings and numbers only: no error
	return append(body, '\n')
}

// violated names the list members that denied.
func violated(quotas []quota, each []core.Result) []string {
	var names []string
	for i, r := range each {
		if !r.Allowed {
			names = append(names, quotas[i].name)
		}
	}
	return names
}
