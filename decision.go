package redlimit

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/redlimit/redlimit/core"
)

// Decision is the outcome of the request flow for one request.
type Decision struct {
	// Policy is the name of the policy that decided.
	Policy string
	// Key is the request's key, from the key function, as the Limiter was
	// given it (hashed when long); the policy's name is the scope of its
	// state (see core.Term). "" when skipped or when the key function
	// failed.
	Key string
	// Result is the limiter's answer. It is zero when the request was
	// skipped, had no key, or Redis failed under FailOpen or FailClosed.
	Result core.Result
	// Status is 0 when the request may proceed. Otherwise it is the status
	// to answer with: 429 Too Many Requests, 503 Service Unavailable
	// (FailClosed, or the client left while queued by a shaping limit) or
	// 400 Bad Request (the key function found no key).
	Status int
	// Err is the Redis error, the key function's error, or the context's
	// error when a queued client left; nil otherwise.
	Err error
	// Skipped is true when WithSkip exempted the request.
	Skipped bool
	// Local is true when the FailLocal fallback decided.
	Local bool
	// DryRun is true when the policy runs dry and would have denied.
	DryRun bool
	// Duration is how long the decision took, Redis included (and a
	// shaping limit's wait). It is measured only for observers
	// (WithObserver); otherwise it is 0.
	Duration time.Duration

	invalid    bool     // no key, or invalid limits: 400 (or a dry run's pass)
	retryAfter int64    // the Retry-After sent, in seconds; 0: none yet
	violated   []string // with WithProblemDetails: the list members that denied
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
	// OutcomeInvalid: it had no key, or limits it picked were invalid
	// (400).
	OutcomeInvalid Outcome = "invalid"
	// OutcomeSkipped: WithSkip exempted it.
	OutcomeSkipped Outcome = "skipped"
)

// outcomes lists every Outcome once, in the order of Outcomes.
var outcomes = [...]Outcome{OutcomeAllowed, OutcomeDenied, OutcomeCached, OutcomeDryRun,
	OutcomeLocal, OutcomeError, OutcomeInvalid, OutcomeSkipped}

// Outcomes returns every Outcome, each once, in a fixed order, for metrics
// that make their series up front; Outcome.Index is a place in it.
func Outcomes() []Outcome { return outcomes[:] }

// Index returns o's place in Outcomes(), or -1 for a string that is not
// an Outcome.
func (o Outcome) Index() int {
	for i, x := range outcomes {
		if x == o {
			return i
		}
	}
	return -1
}

// Outcome returns what became of the request d decided.
func (d Decision) Outcome() Outcome {
	switch {
	case d.Skipped:
		return OutcomeSkipped
	case d.Local:
		return OutcomeLocal
	case d.invalid:
		return OutcomeInvalid
	case d.DryRun:
		return OutcomeDryRun
	case d.Err != nil:
		return OutcomeError
	case d.Result.Cached:
		return OutcomeCached
	case d.Status == http.StatusTooManyRequests:
		return OutcomeDenied
	}
	return OutcomeAllowed
}

// message is a short, safe text for the answer to a request that does not
// pass; it never contains error details.
func (d Decision) message() string {
	switch d.Status {
	case 0:
		return ""
	case http.StatusTooManyRequests:
		return "rate limit exceeded"
	case http.StatusBadRequest:
		return "request has no rate limit key"
	default:
		return "rate limiter unavailable"
	}
}

// Body is the default JSON answer for a request that does not pass.
type Body struct {
	Error string `json:"error"`
	// RetryAfter is the Retry-After header's value, in seconds; omitted
	// when there is none (400).
	RetryAfter int64 `json:"retry_after,omitempty"`
}

// Body returns the default JSON body for d. Its RetryAfter is the
// Retry-After the policy sent (with any jitter).
func (d Decision) Body() Body {
	b := Body{Error: d.message()}
	switch d.Status {
	case http.StatusTooManyRequests:
		b.RetryAfter = d.retryAfter
		if b.RetryAfter == 0 {
			b.RetryAfter = max(1, seconds(d.Result.RetryAfter))
		}
	case http.StatusServiceUnavailable:
		b.RetryAfter = 1
	}
	return b
}

// Deny answers a request whose Decision is not Allowed, the same way in
// every adapter: with the deny handler if one was given, else with an
// RFC 9457 problem under WithProblemDetails, else with the default JSON
// Body.
func (p *Policy) Deny(w http.ResponseWriter, r *http.Request, d Decision) {
	switch {
	case p.deny != nil:
		p.deny(w, r, d)
	case p.problem:
		writeProblem(w, d)
	default:
		WriteBody(w, d)
	}
}

// FrameworkErrors reports whether WithFrameworkErrors was given: for
// adapters whose framework handles errors, to decide between handing it
// the denial and calling Deny.
func (p *Policy) FrameworkErrors() bool { return p.frameworkErrors }

// WriteBody writes d's status and default JSON Body to w.
func WriteBody(w http.ResponseWriter, d Decision) {
	b := d.Body()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	buf := make([]byte, 0, 64)
	buf = append(buf, `{"error":"`...)
	buf = append(buf, b.Error...) // a fixed message: nothing to escape
	buf = append(buf, '"')
	if b.RetryAfter > 0 {
		buf = append(buf, `,"retry_after":`...)
		buf = strconv.AppendInt(buf, b.RetryAfter, 10)
	}
	buf = append(buf, "}\n"...)
	_, _ = w.Write(buf)
}

// Problem types of the answers WithProblemDetails writes.
const (
	// ProblemQuotaExceeded is the IETF draft's problem type for a request
	// that exceeds one or more quota policies.
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
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

// writeProblem writes d as an RFC 9457 problem: a denial as the draft's
// quota-exceeded type naming the policies that denied, any other answer
// as about:blank with its status's text.
func writeProblem(w http.ResponseWriter, d Decision) {
	b := d.Body()
	pr := problem{Type: "about:blank", Title: http.StatusText(d.Status), Status: d.Status, Detail: b.Error,
		RetryAfter: b.RetryAfter}
	if d.Status == http.StatusTooManyRequests {
		pr.Type, pr.Title, pr.Violated = ProblemQuotaExceeded, problemTitle, d.violated
	}
	body, err := json.Marshal(pr)
	if err != nil { // not reached: strings and numbers only
		WriteBody(w, d)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	_, _ = w.Write(append(body, '\n'))
}
