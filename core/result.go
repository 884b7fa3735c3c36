package core

import (
	"math"
	"time"
)

// Result is the outcome of one decision.
type Result struct {
	// Limit is the limit the decision was made under.
	Limit Limit
	// Allowed reports whether the events were admitted (and counted).
	Allowed bool
	// Remaining is how many more single events would be allowed right now.
	Remaining int
	// RetryAfter is 0 when Allowed. Otherwise a retry of the same cost after
	// RetryAfter is allowed, absent other traffic on the key; InfDuration
	// when the cost exceeds the burst and can never be allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to its full allowance,
	// absent other traffic; 0 when it is full now.
	ResetAfter time.Duration
	// NextAfter is the time until one more event is allowed (Remaining
	// grows by one), absent other traffic; 0 when Remaining is already the
	// limit's capacity. It is at most ResetAfter, and when denied at most
	// RetryAfter: what the IETF draft's RateLimit field calls the time until
	// additional quota is available.
	NextAfter time.Duration
	// Delay is how long an allowed event must wait before it is served: its
	// place in the queue of a LeakyBucket with Shape; 0 for every other
	// limit, for denied events and for n = 0.
	Delay time.Duration
	// Cached reports a denial answered by the Limiter's deny cache, without
	// asking Redis (see WithDenyCache): RetryAfter and ResetAfter count down
	// from Redis's answer, and Remaining is what Redis said then.
	Cached bool
}

// InfDuration is the RetryAfter of a request that can never be allowed: one
// whose cost exceeds the limit's burst.
const InfDuration = time.Duration(math.MaxInt64)

// Stats are a Limiter's counters, for metrics. Every counter starts at 0
// when New returns and only grows.
type Stats struct {
	// BreakerOpen is true while a breaker is open: Redis (on a Cluster or
	// Ring, one of its nodes) kept failing, and decisions on its keys fail
	// at once with ErrUnavailable while the Limiter probes it (see
	// WithBreaker).
	BreakerOpen bool
	// BreakerOpens counts the times a breaker opened since New, every
	// node's on a Cluster or Ring: as a counter it shows an opening even if
	// the breaker closed again before a metrics scrape.
	BreakerOpens uint64
	// FailedSettlements counts the settlements (Settle, Release, and a
	// prefetch's give-back of events it did not use) that returned an
	// error from Redis or the engine since New: a timeout, a lost
	// connection, an open breaker (ErrUnavailable). An invalid cost or a
	// second settlement (ErrSettled) is not counted.
	FailedSettlements uint64
	// UnansweredReservations counts the reserving decisions with a
	// Concurrency limit that failed after they may have reached Redis (a
	// timeout, a context that ended while the decision was on its way, a
	// lost reply): the caller got an error, so nobody would free the slots
	// the script may have taken. The Limiter frees them in the background,
	// as a failed settlement's, and a decision that reaches Redis after
	// its release takes none.
	UnansweredReservations uint64
	// RetriedReleases counts the failed settlements and unanswered
	// reservations whose Concurrency slots the Limiter then freed in the
	// background (a release that Redis answered).
	RetriedReleases uint64
	// AbandonedReleases counts the failed settlements and unanswered
	// reservations whose slots the Limiter stopped trying to free: their
	// lease ended first (it frees them), the key held another type, or too
	// many waited to be retried.
	AbandonedReleases uint64
	// StateLosses counts the times a Redis server was seen to have lost
	// the state of the limits since New: its keys gone (a restart without
	// persistence, FLUSHALL, a failover to an empty replica) or gone back
	// in time (a restore from an older snapshot, a failover to a replica
	// that lagged). Each is also logged once, at error level, naming the
	// server. See WithLossCheck; it stays 0 when the check is off.
	StateLosses uint64
}

// us converts the scripts' microseconds to a Duration.
func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// micros converts a Duration to the scripts' microseconds.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }
