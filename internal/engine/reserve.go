package engine

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

// Release is Settle with the reserved n.
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
