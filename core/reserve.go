package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/internal/transport"
	"github.com/redlimit/redlimit/internal/wire"
)

// Reserve is AllowAll with a receipt: it admits n events for key under
// every limit, all or nothing, in one atomic script and one round trip,
// and returns a Reservation that holds the Result. Any mix of limits works,
// Concurrency ones included (10/s, 1000/h and 5 in flight in one decision);
// the others are counted at once, as AllowAll counts them, and Settle
// corrects them once the true cost is known. A denied Reservation holds
// nothing. Errors are as AllowAll's, and then the Reservation is nil.
func (l *Limiter) Reserve(ctx context.Context, key string, limits []Limit, n int) (*Reservation, error) {
	d, err := l.Decide(ctx, &Request{Key: key, Limits: limits, N: n, Reserve: true})
	return d.Reservation, err
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
	d, err := l.Decide(ctx, &Request{Key: key, Limits: limits, Costs: costs, Reserve: true})
	return d.Reservation, err
}

// Reservation is the receipt of Reserve: the events it admitted stay
// counted, and its Concurrency slots held, until Settle or Release says
// what they really cost. A Reservation nobody settles keeps its count, and
// its slots until their lease ends. It is safe for concurrent use; only
// the first Settle or Release settles it.
type Reservation struct {
	l     *Limiter
	res   Result
	facts []int64 // per limit: its cost, and what the decision said: reset_after (µs), mark, epoch
	n     int     // the cost, when every limit's is the same (Reserve); else -1 (ReserveEach)
	at    int64   // the decision's clock, µs: when the events were counted
	id    string  // names the reservation's slots, sliding-log entries and meter epoch
	keys  []string
	infos []*limitInfo
	holds bool // some limit holds slots, which a settlement frees whatever the cost
	// giveBack marks a prefetch's fetch, whose settlement gives back what
	// was not used, all or nothing (lua/meter.lua); unknown, a reservation
	// whose decision failed and may have run: when it was made is unknown,
	// and its release records no hold (lua/concurrency.lua).
	giveBack, unknown bool
	done              atomic.Bool
	// one holds keys, infos and facts of a reservation of one limit, the
	// common case, so that it costs no allocation of its own.
	one struct {
		key   [1]string
		info  [1]*limitInfo
		facts [factsWidth]int64
	}
	// split holds, for a reservation of several keys in different slots
	// (Request.Keys, keys.go), each key's reservation; nil otherwise.
	split []splitPart
}

func newReservation(l *Limiter, d *decision, at int64, results []Result) *Reservation {
	r := &Reservation{l: l, n: d.n, at: at, id: d.rid, holds: d.holds}
	if d.k == 1 {
		r.keys, r.infos, r.facts = r.one.key[:0], r.one.info[:0], r.one.facts[:0]
	}
	r.keys = append(r.keys, d.keys[:d.k]...)
	r.infos = append(r.infos, d.infos[:d.k]...)
	for i, res := range results {
		r.facts = append(r.facts, int64(d.costs[i]), micros(res.ResetAfter), d.marks[i], d.epochs[i])
	}
	return r
}

// factsWidth is how many facts a Reservation keeps of each limit.
const factsWidth = 4

// cost returns what the Reservation reserved of its i-th limit.
func (r *Reservation) cost(i int) int { return int(r.facts[factsWidth*i]) }

// settleCall returns the settlement call of r's limits at indices at
// (every limit when nil), the i-th at costs(i) (wire.AppendSettlement).
func (r *Reservation) settleCall(at []int, costs func(int) int, now time.Time) *transport.Call {
	infos, keys := r.infos, r.keys
	if at != nil {
		infos, keys = make([]*limitInfo, len(at)), make([]string, len(at))
		for j, i := range at {
			infos[j], keys[j] = r.infos[i], r.keys[i]
		}
	}
	c := transport.NewCall(scriptOf(infos), wire.Settle, keys...)
	var made any = r.at
	if r.unknown {
		made = nil
	}
	c.Args = wire.AppendSettlement(c.Args, r.l.wireClock(now), r.id, made, r.giveBack)
	for j, info := range infos {
		i := j
		if at != nil {
			i = at[j]
		}
		f := r.facts[factsWidth*i:]
		cost, reserved := costs(i), int(f[0])
		if info.d.members { // a log's charge, at most its capacity; a release of slots
			c.Members += min(max(reserved, cost), info.capacity)
		}
		c.Args = info.appendArgs(wire.AppendSettled(c.Args, wire.Settled{Delta: cost - reserved, Reserved: reserved,
			Reset: us(f[1]), Mark: f[2], Epoch: f[3], Debt: us(info.debt)}), now)
	}
	return c
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
// they do nothing and return nil. A negative cost, or one above
// 4294967295 (Limit.Rate's maximum), is an error wrapping ErrInvalidCost
// and settles nothing. It is bounded like a decision, by the Limiter's
// timeout and ctx.
func (r *Reservation) Settle(ctx context.Context, cost int) error {
	if r.l == nil { // denied, or n = 0
		return nil
	}
	if cost < 0 || cost > MaxCount {
		return fmt.Errorf("%w: Settle(%d): want 0 to %d", ErrInvalidCost, cost, MaxCount)
	}
	if r.n < 0 {
		return fmt.Errorf("%w: Settle(%d) of a reservation of a cost for each limit: settle it with SettleEach", ErrInvalidCost, cost)
	}
	return r.settle(ctx, nil, cost)
}

// SettleEach settles each limit at its own final cost, costs[i] for
// limits[i], with Settle's rules: a refund or a charge per limit, and only
// the limits whose cost changed move; one round trip, at most once. A
// call with the wrong number of costs, or a cost below 0 or above 4294967295, is
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
		if c < 0 || c > MaxCount {
			return fmt.Errorf("%w: SettleEach(%v): want 0 to %d each", ErrInvalidCost, costs, MaxCount)
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
	if r.split != nil {
		return r.settleSplit(ctx, costs, cost)
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
	_, err := l.run(ctx, r.settleCall(nil, costOf, l.now()))
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

// maxID bounds reservation ids: the scripts read them as numbers (a
// meter's epoch, lua/meter.lua), exact below 2^53.
const maxID = 1<<52 - 1

// nextID returns a new reservation id: a random number from 1 to maxID, in
// decimal. Ids need to be unique among the reservations of one key that
// may still settle, and epochs of one key apart: two ids drawn for one key
// are equal with a chance of 1 in 2^52.
func (l *Limiter) nextID() string {
	return strconv.FormatUint(1+rand.Uint64N(maxID), 10)
}
