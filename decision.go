package redlimit

import (
	"time"

	"github.com/redlimit/redlimit/core"
)

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
