package core

import (
	"context"

	"github.com/redlimit/redlimit/internal/engine"
)

// Reserve is AllowAll with a receipt: it admits n events for key under
// every limit, all or nothing, in one atomic script and one round trip,
// and returns a Reservation that holds the Result. Any mix of limits works,
// Concurrency ones included (10/s, 1000/h and 5 in flight in one decision);
// the others are counted at once, as AllowAll counts them, and Settle
// corrects them once the true cost is known. A denied Reservation holds
// nothing. Errors are as AllowAll's, and then the Reservation is nil.
func (l *Limiter) Reserve(ctx context.Context, key string, limits []Limit, n int) (*Reservation, error) {
	var buf [engine.MaxLimits]engine.Limit
	r, err := l.e().Reserve(ctx, key, convert(limits, &buf), n)
	return (*Reservation)(r), err
}

// ReserveEach is Reserve with a cost for each limit: limits[i] is charged
// costs[i], all in one atomic decision and one round trip; a request any
// limit denies is charged to none. A cost of 0 charges nothing, and such
// a limit denies only while it is in debt. A Concurrency limit holds
// costs[i] slots. len(costs) must equal len(limits), and a negative cost
// is an error wrapping ErrInvalidCost. For requests and tokens in one
// decision: limits "60/m, 100000/m unit=tokens" with costs {1, estimate}.
// Settle it with SettleEach (or Release).
func (l *Limiter) ReserveEach(ctx context.Context, key string, limits []Limit, costs []int) (*Reservation, error) {
	var buf [engine.MaxLimits]engine.Limit
	r, err := l.e().ReserveEach(ctx, key, convert(limits, &buf), costs)
	return (*Reservation)(r), err
}

// Reservation is the receipt of Reserve: the events it admitted stay
// counted, and its Concurrency slots held, until Settle or Release says
// what they really cost. A Reservation nobody settles keeps its count, and
// its slots until their lease ends. It is safe for concurrent use; only
// the first Settle or Release settles it.
type Reservation engine.Reservation

// e is the engine's Reservation r is.
func (r *Reservation) e() *engine.Reservation { return (*engine.Reservation)(r) }

// Result returns the decision the Reservation was made with: Allowed, and
// the binding limit's Remaining, RetryAfter and ResetAfter, as AllowAll
// reports them.
func (r *Reservation) Result() Result { return result(r.e().Result()) }

// Settle says once what the reserved events really cost and frees every
// Concurrency slot the Reservation holds. A cost below n refunds n-cost
// events to every limit, as if they had never been admitted, as far as the
// limit still holds them (a window that has passed has nothing left to
// refund); a cost above n charges cost-n more without denying: the key
// goes into debt, its Remaining 0 and its RetryAfter counting the whole
// debt. docs/lifecycle.md says what each algorithm does with it.
//
// It is one round trip, sent at most once: an error (a timeout, a lost
// reply) may or may not have settled, and the Reservation counts as
// settled either way. An error wrapping ErrUnavailable (the breaker is
// open) was not sent: the Reservation is not settled, and may be settled
// again. After either, the Limiter frees the Reservation's Concurrency
// slots in the background, retrying until Redis answers or their lease
// ends (freeing slots twice frees nothing more); a refund or a charge is
// never sent again but by a caller's new Settle after ErrUnavailable.
// Stats counts failed settlements and retried releases. None is made
// when there is nothing to settle (cost n, no slots). A second Settle or
// Release returns an error wrapping ErrSettled; on a denied Reservation
// they do nothing and return nil. A negative cost, or one above
// 4294967295 (Limit.Rate's maximum), is an error wrapping ErrInvalidCost
// and settles nothing. It is bounded like a decision, by the Limiter's
// timeout and ctx.
func (r *Reservation) Settle(ctx context.Context, cost int) error { return r.e().Settle(ctx, cost) }

// SettleEach settles each limit at its own final cost, costs[i] for
// limits[i], with Settle's rules: a refund or a charge per limit, and only
// the limits whose cost changed move; one round trip, at most once. A
// call with the wrong number of costs, or a cost below 0 or above 4294967295, is
// an error wrapping ErrInvalidCost and changes nothing: the Reservation
// stays open. ErrSettled after the first settlement; nil, doing nothing,
// on a denied Reservation.
func (r *Reservation) SettleEach(ctx context.Context, costs []int) error {
	return r.e().SettleEach(ctx, costs)
}

// Release is Settle with the reserved n: the cost stands, the Concurrency
// slots are freed.
func (r *Reservation) Release(ctx context.Context) error { return r.e().Release(ctx) }
