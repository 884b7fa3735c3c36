package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Reserve is AllowAll with a receipt: it admits n events for key under
// every limit, all or nothing, in one atomic script and one round trip,
// and returns a Reservation that holds the Result. Any mix of limits works,
// Concurrency ones included (10/s, 1000/h and 5 in flight in one decision);
// the others are counted at once, as AllowAll counts them, and Settle
// corrects them once the true cost is known. A denied Reservation holds
// nothing. Errors are as AllowAll's, and then the Reservation is nil.
func (l *Limiter) Reserve(ctx context.Context, key string, limits []Limit, n int) (*Reservation, error) {
	r, _, err := l.reserve(ctx, key, nil, limits, n, nil, 0, nil)
	return r, err
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
	if len(costs) != len(limits) {
		return nil, fmt.Errorf("%w: ReserveEach: %d costs for %d limits", ErrInvalidCost, len(costs), len(limits))
	}
	r, _, err := l.reserve(ctx, key, nil, limits, 0, costs, 0, nil)
	return r, err
}

// reserve is Reserve with a scope per limit, a cost per limit if costs is
// not nil (limits whose bit of upTo is set take up to theirs, and an
// allowed reservation writes what they took into costs), and every
// limit's result in each (as decide); it also returns the binding limit's
// index.
func (l *Limiter) reserve(ctx context.Context, key string, scopes []string, limits []Limit, n int, costs []int, upTo uint32, each []Result) (*Reservation, int, error) {
	res, i, r, err := l.decision(ctx, key, scopes, limits, n, costs, upTo, each, true)
	if err != nil {
		return nil, 0, err
	}
	if r == nil { // denied, or n = 0: nothing to settle
		r = &Reservation{}
	}
	r.res = res
	return r, i, nil
}

// Reservation is the receipt of Reserve: the events it admitted stay
// counted, and its Concurrency slots held, until Settle or Release says
// what they really cost. A Reservation nobody settles keeps its count, and
// its slots until their lease ends. It is safe for concurrent use; only
// the first Settle or Release settles it.
type Reservation struct {
	l     *Limiter
	res   Result
	facts []int64 // per limit: its cost, and what the decision said: remaining, reset_after, next (µs), mark
	n     int     // the cost, when every limit's is the same (Reserve); else -1 (ReserveEach)
	at    int64   // the decision's clock, µs: when the events were counted
	id    string  // names the reservation's slots and sliding-log entries
	keys  []string
	infos []*limitInfo
	holds bool // some limit holds slots, which a settlement frees whatever the cost
	done  atomic.Bool
	// one holds keys, infos and facts of a reservation of one limit, the
	// common case, so that it costs no allocation of its own.
	one struct {
		key   [1]string
		info  [1]*limitInfo
		facts [factsWidth]int64
	}
}

func newReservation(l *Limiter, d *decision, at int64, results []Result) *Reservation {
	r := &Reservation{l: l, n: d.n, at: at, id: d.rid, holds: d.holds}
	if d.k == 1 {
		r.keys, r.infos, r.facts = r.one.key[:0], r.one.info[:0], r.one.facts[:0]
	}
	r.keys = append(r.keys, d.keys[:d.k]...)
	r.infos = append(r.infos, d.infos[:d.k]...)
	for i, res := range results {
		r.facts = append(r.facts, int64(d.costs[i]), int64(res.Remaining), micros(res.ResetAfter), micros(res.NextAfter), d.marks[i])
	}
	return r
}

// factsWidth is how many facts a Reservation keeps of each limit.
const factsWidth = 5

// cost returns what the Reservation reserved of its i-th limit.
func (r *Reservation) cost(i int) int { return int(r.facts[factsWidth*i]) }

// appendLimit appends to c, a settlement of r, the arguments of its i-th
// limit (lua/settle.lua): the difference of its true cost and the
// reserved, the reserved, what the decision said of it, and its
// algorithm's own.
func (r *Reservation) appendLimit(c *call, i, cost int, now time.Time) {
	f := r.facts[factsWidth*i:]
	c.argv = r.infos[i].appendArgs(append(c.argv, int64(cost)-f[0], f[0], f[1], f[2], f[3], f[4]), now)
}

// Result returns the decision the Reservation was made with: Allowed, and
// the binding limit's Remaining, RetryAfter and ResetAfter, as AllowAll
// reports them.
func (r *Reservation) Result() Result { return r.res }

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
// they do nothing and return nil. A negative cost, or one above 1e9, is an
// error wrapping ErrInvalidCost and settles nothing. It is bounded like a
// decision, by the Limiter's timeout and ctx.
func (r *Reservation) Settle(ctx context.Context, cost int) error {
	if r.l == nil { // denied, or n = 0
		return nil
	}
	if cost < 0 || cost > maxCount {
		return fmt.Errorf("%w: Settle(%d): want 0 to %d", ErrInvalidCost, cost, maxCount)
	}
	if r.n < 0 {
		return fmt.Errorf("%w: Settle(%d) of a reservation of a cost for each limit: settle it with SettleEach", ErrInvalidCost, cost)
	}
	return r.settle(ctx, nil, cost)
}

// SettleEach settles each limit at its own final cost, costs[i] for
// limits[i], with Settle's rules: a refund or a charge per limit, and only
// the limits whose cost changed move; one round trip, at most once. A
// call with the wrong number of costs, or a cost below 0 or above 1e9, is
// an error wrapping ErrInvalidCost and changes nothing: the Reservation
// stays open. ErrSettled after the first settlement; nil, doing nothing,
// on a denied Reservation.
func (r *Reservation) SettleEach(ctx context.Context, costs []int) error {
	if r.l == nil {
		return nil
	}
	if len(costs) != len(r.infos) {
		return fmt.Errorf("%w: SettleEach: %d costs for %d limits", ErrInvalidCost, len(costs), len(r.infos))
	}
	for _, c := range costs {
		if c < 0 || c > maxCount {
			return fmt.Errorf("%w: SettleEach(%v): want 0 to %d each", ErrInvalidCost, costs, maxCount)
		}
	}
	return r.settle(ctx, costs, 0)
}

// settle settles r at costs[i] for each limit, or, when costs is nil, at
// cost for every one (-1: at what each reserved, a release).
func (r *Reservation) settle(ctx context.Context, costs []int, cost int) error {
	if !r.done.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: reservation %s", ErrSettled, r.id)
	}
	costOf := func(i int) int {
		switch {
		case costs != nil:
			return costs[i]
		case cost < 0:
			return r.cost(i)
		}
		return cost
	}
	changed, refund := false, false
	for i := range r.infos {
		changed = changed || costOf(i) != r.cost(i)
		refund = refund || costOf(i) < r.cost(i)
	}
	if !changed && !r.holds {
		return nil
	}
	l := r.l
	now := l.now()
	c := l.limitsCall(scriptOf(r.infos, true), r.keys, now, r.id)
	c.argv = append(c.argv, r.at)
	for i := range r.infos {
		r.appendLimit(c, i, costOf(i), now)
	}
	_, err := l.run(ctx, c)
	if errors.Is(err, ErrUnavailable) { // not sent: it may be tried again
		r.done.Store(false)
	}
	if l.deny != nil && (refund || r.holds) { // freed allowance: cached denials of these keys are stale
		for _, key := range r.keys {
			l.deny.reset(key)
		}
	}
	if err != nil {
		l.settleFailed(r, err) // frees its slots in the background (release.go)
		return fmt.Errorf("redlimit: settling reservation %s: %w", r.id, err)
	}
	return nil
}

// Release is Settle with the reserved n: the cost stands, the Concurrency
// slots are freed.
func (r *Reservation) Release(ctx context.Context) error {
	if r.l == nil {
		return nil
	}
	return r.settle(ctx, nil, -1)
}

// idPrefix makes reservation ids unique across processes: random, drawn
// once per process; a counter tells a process's apart.
var (
	idPrefix = func() string {
		var b [6]byte
		_, _ = rand.Read(b[:]) // crypto/rand does not fail on supported platforms
		return hex.EncodeToString(b[:]) + "-"
	}()
	idCounter atomic.Uint64
)

// nextID returns a new reservation id: unique, short, no '{' or '}'.
func (l *Limiter) nextID() string {
	var buf [32]byte
	return string(strconv.AppendUint(append(buf[:0], idPrefix...), idCounter.Add(1), 36))
}
