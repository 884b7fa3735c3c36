package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"
)

// Reserve is core.Limiter.Reserve: AllowAll with a receipt to settle.
func (l *Limiter) Reserve(ctx context.Context, key string, limits []Limit, n int) (*Reservation, error) {
	_, _, r, err := l.Decide(ctx, &Request{Key: key, Limits: limits, N: n, Reserve: true})
	return r, err
}

// ReserveEach is core.Limiter.ReserveEach: Reserve with a cost per limit.
func (l *Limiter) ReserveEach(ctx context.Context, key string, limits []Limit, costs []int) (*Reservation, error) {
	if len(costs) != len(limits) {
		return nil, fmt.Errorf("%w: ReserveEach: %d costs for %d limits", ErrInvalidCost, len(costs), len(limits))
	}
	_, _, r, err := l.Decide(ctx, &Request{Key: key, Limits: limits, Costs: costs, Reserve: true})
	return r, err
}

// Reservation is core.Reservation: the receipt of a reserving decision,
// to settle once. It is safe for concurrent use.
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
// (every limit when nil), the i-th at costs(i) (lua/settle.lua): after the
// clock, the id, when the reservation was made and whether it is a
// prefetch's give-back, per limit the difference of its true cost and the
// reserved, the reserved, what the decision said of it, the longest debt
// a charge may leave, and its algorithm's own arguments.
func (r *Reservation) settleCall(at []int, costs func(int) int, now time.Time) *call {
	infos, keys := r.infos, r.keys
	if at != nil {
		infos, keys = make([]*limitInfo, len(at)), make([]string, len(at))
		for j, i := range at {
			infos[j], keys[j] = r.infos[i], r.keys[i]
		}
	}
	c := r.l.limitsCall(scriptOf(infos, true), keys, now, r.id)
	giveBack := 0
	if r.giveBack {
		giveBack = 1
	}
	var made any = r.at
	if r.unknown {
		made = ""
	}
	c.argv = append(c.argv, made, giveBack)
	for j := range infos {
		i := j
		if at != nil {
			i = at[j]
		}
		f := r.facts[factsWidth*i:]
		if infos[j].d.members { // a log's charge, at most its capacity; a release of slots
			c.members += min(max(int(f[0]), costs(i)), infos[j].capacity)
		}
		c.argv = append(c.argv, int64(costs(i))-f[0], f[0], f[1], f[2], f[3], infos[j].debt)
		c.argv = infos[j].appendArgs(c.argv, now)
	}
	return c
}

// Result returns the decision the Reservation was made with.
func (r *Reservation) Result() Result { return r.res }

// Settle is core.Reservation.Settle: it says once what the reserved
// events really cost, and frees the reservation's slots.
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

// SettleEach is core.Reservation.SettleEach: Settle with a cost per
// limit.
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

// Release is Settle with the reserved n.
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
