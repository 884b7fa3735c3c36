package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// decision is one decision on its way: what prepare works out of its
// arguments, read by the steps after it. It holds nothing of the caller's:
// escape analysis does not tell a struct's fields apart, and its keys go
// to the heap with the script call, so the caller's limits would too.
type decision struct {
	k     int    // how many limits
	n     int    // the cost, when every limit's is the same; else -1
	never bool   // a cost is above its limit's capacity: report the state, admit nothing
	rid   string // the reservation's id ("" when not reserving)
	holds bool   // a limit holds slots (Concurrency), which only a reservation may take
	// upTo's bit i lets limits[i] take up to its cost: what it has left, if
	// it has any (lua/decide.lua); the reply says what it took, which
	// becomes its cost.
	upTo uint32
	// prefetch is the least Limit.Prefetch of the limits, 0 if one has
	// none; more asks the script for up to that many events beyond n (a
	// fetch, prefetch.go), and got is how many it granted.
	prefetch, more, got int
	members             int // log entries and slots the decision may add (call.members)
	infos               [MaxLimits]*limitInfo
	keys                [MaxLimits]string
	costs               [MaxLimits]int   // each limit's cost
	marks               [MaxLimits]int64 // what the reply said each limit's settlement needs: its mark
	epochs              [MaxLimits]int64 // and its epoch (lua/meter.lua)
}

// Request is one decision: n events, or a cost per limit, for a key
// under every limit, each kept in its scope. core's methods make the
// simple ones; the HTTP layer fills every field.
type Request struct {
	Key    string
	Limits []Limit
	// Scopes, if not nil, holds each limit's scope ("" for none): the HTTP
	// layer's policy names, so that two policies' equal limits keep apart.
	Scopes []string
	// N is each limit's cost, unless Costs holds one per limit.
	N     int
	Costs []int
	// UpTo's bit i lets Limits[i] take up to Costs[i]: as many as it has
	// left, if any, else it denies (its RetryAfter is until one is back).
	// An allowed decision writes what each such limit took into Costs[i],
	// which a SettleEach settles from.
	UpTo uint32
	// Reserve makes a reservation to settle: Concurrency limits may be
	// decided only so.
	Reserve bool
	// Each, if not nil (as long as Limits), receives every limit's own
	// result.
	Each []Result
}

// Decide decides q in these steps:
//
//  1. prepare: check the key, the limits and the costs; name each limit's
//     state;
//  2. prefetched allowance, if the limits set Prefetch, answers in process
//     (prefetch.go), or fetches more with the steps below;
//  3. the deny cache: a denial Redis gave moments ago answers at once;
//  4. ask: one script call, through the carrier (carrier.go);
//  5. read: each limit's result from the reply, and the binding one;
//  6. remember a denial in the deny cache.
//
// It returns the binding result and its index in q.Limits; for a
// reservation (q.Reserve), the Reservation, never nil without an error (a
// denied one holds nothing).
func (l *Limiter) Decide(ctx context.Context, q *Request) (Result, int, *Reservation, error) {
	d := decision{upTo: q.UpTo}
	if err := l.prepare(&d, q.Key, q.Scopes, q.Limits, q.N, q.Costs); err != nil {
		return Result{}, 0, nil, err
	}
	if d.holds && !q.Reserve {
		return Result{}, 0, nil, fmt.Errorf("%w: a %s limit holds its slots until they are released: decide it with Reserve, not AllowN or AllowAll", ErrInvalidLimit, Concurrency)
	}
	if q.Reserve {
		d.rid = l.nextID()
	}
	var buf [MaxLimits]Result
	results := buf[:len(q.Limits)]
	if q.Each != nil {
		results = q.Each[:len(q.Limits)]
	}
	var res Result
	var i int
	var r *Reservation
	var err error
	if d.prefetch > 0 && !q.Reserve && d.n > 0 && !d.never {
		res, i, err = l.prefetched(ctx, &d, q.Key, q.Limits, results)
	} else {
		res, i, r, err = l.remote(ctx, &d, q.Key, q.Limits, results, q.Reserve)
	}
	switch {
	case err != nil:
		return Result{}, 0, nil, err
	case !q.Reserve: // a fetch's reservation is the lease's (prefetch.go)
		r = nil
	case r == nil: // denied, or n = 0: nothing to settle
		r = &Reservation{res: res}
	default:
		r.res = res
	}
	if q.UpTo != 0 && res.Allowed {
		copy(q.Costs, d.costs[:d.k])
	}
	return res, i, r, nil
}

// remote is a decision's steps from the deny cache on: it asks Redis. It
// returns a Reservation when reserve is set, or when d fetched events to
// hold (d.got of them beyond n), and the decision allowed.
func (l *Limiter) remote(ctx context.Context, d *decision, id string, limits []Limit, results []Result, reserve bool) (Result, int, *Reservation, error) {
	now := l.now()
	var cacheID string
	var seq uint64
	refresh := false // this decision refreshes a cached denial
	// what the deny cache compares: each limit's cost, 1 for one that
	// takes up to its cost (it is denied only when not one is left)
	cached := d.costs
	for i := range d.k {
		if d.upTo&(1<<i) != 0 {
			cached[i] = 1
		}
	}
	if l.deny != nil && !d.never {
		cacheID = d.cacheID()
		var ok bool
		if ok, refresh = l.deny.get(cacheID, d.keys[:d.k], limits, cached[:d.k], now, results); ok {
			res, i := binding(results)
			res.Cached = true
			return res, i, nil, nil
		}
		seq = l.deny.sent()
	}

	reply, err := l.ask(ctx, d, now)
	var at int64 // the decision's clock, µs
	if err == nil {
		at, d.got, err = readReply(reply, limits, d.infos[:d.k], d.costs[:d.k], d.upTo, results, d.marks[:d.k], d.epochs[:d.k])
	}
	if err != nil {
		if reserve {
			l.unanswered(d, err) // its slots, if it took any, are freed in the background
		}
		// A copy of id: were id itself to reach the heap, so would the
		// caller's arguments, costing an allocation per decision.
		return Result{}, 0, nil, fmt.Errorf("redlimit: %s decision for %q: %w", d.algorithms(), strings.Clone(id), err)
	}
	res, i := binding(results)
	switch {
	case !res.Allowed && l.deny != nil && !d.never:
		l.deny.add(cacheID, d.keys[:d.k], limits, cached[:d.k], now, seq, results)
	case refresh: // allowed after all: another process reset or raised a limit
		l.deny.forget(cacheID)
	}
	switch {
	case !res.Allowed || d.n == 0: // nothing to settle
		return res, i, nil, nil
	case reserve:
		return res, i, newReservation(l, d, at, results), nil
	case d.got > 0: // a fetch: its give-back is a refund that takes all or nothing (lua/meter.lua)
		d.n += d.got
		for i := range d.k {
			d.costs[i] = d.n
		}
		r := newReservation(l, d, at, results)
		r.giveBack = true
		return res, i, r, nil
	}
	return res, i, nil, nil
}

// prepare checks the arguments of a decision and fills d: each limit's
// worked-out info, the name of its state and its cost (n, or costs[i]),
// and whether the costs can ever fit.
func (l *Limiter) prepare(d *decision, id string, scopes []string, limits []Limit, n int, costs []int) error {
	if err := l.checkKey(id); err != nil {
		return err
	}
	if len(limits) == 0 || len(limits) > MaxLimits {
		return fmt.Errorf("%w: %d limits in one decision; want 1 to %d", ErrInvalidLimit, len(limits), MaxLimits)
	}
	if costs != nil && len(costs) != len(limits) {
		return fmt.Errorf("%w: %d costs for %d limits", ErrInvalidCost, len(costs), len(limits))
	}
	d.k, d.n = len(limits), n
	d.prefetch = limits[0].Prefetch
	d.members = 0
	for i, limit := range limits {
		cost := n
		if costs != nil {
			cost = costs[i]
			if i == 0 {
				d.n = cost
			} else if cost != d.n {
				d.n = -1
			}
		}
		switch {
		case cost < 0 && costs == nil:
			return fmt.Errorf("%w: n=%d must not be negative", ErrInvalidCost, cost)
		case cost < 0:
			return fmt.Errorf("%w: cost %d of %v must not be negative", ErrInvalidCost, cost, limit)
		}
		d.costs[i] = cost
		d.prefetch = min(d.prefetch, limit.Prefetch)
		info, err := infos.get(limit)
		if err != nil {
			return err
		}
		d.infos[i], d.keys[i] = info, stateKey(l.prefix, scopeOf(scopes, i), id, info)
		if d.upTo&(1<<i) != 0 {
			d.n = -1 // what it takes is the reply's to say
		} else {
			d.never = d.never || cost > info.capacity
		}
		d.holds = d.holds || info.d.holds
		if info.d.members {
			d.members += min(cost, info.capacity)
		}
		for j := range i {
			if d.keys[j] == d.keys[i] {
				return errSharedState(limits[j], limit)
			}
		}
	}
	if d.members > maxMembers {
		return fmt.Errorf("%w: the decision would add %d log entries and slots (sliding_log, concurrency) at once; at most %d, so that one call does not hold Redis long",
			ErrInvalidCost, d.members, maxMembers)
	}
	return nil
}

// cacheID names d in the deny cache: its keys, in order.
func (d *decision) cacheID() string {
	if d.k == 1 {
		return d.keys[0]
	}
	return strings.Join(d.keys[:d.k], "\x00")
}

// algorithms names the algorithms of d, for errors: "gcra+fixed_window".
func (d *decision) algorithms() string {
	names := make([]string, d.k)
	for i := range names {
		names[i] = d.infos[i].d.name
	}
	return strings.Join(names, "+")
}

// ask sends d's script call and returns its reply. The call runs the
// script of d's algorithm, or the mixed one when they differ; its ARGV is
// the clock ("": the server's), the reservation's id and the events a
// prefetch asks for, then per limit its cost (0 for a cost that can never
// be admitted: the state is reported) and the algorithm's own
// (lua/prelude.lua).
func (l *Limiter) ask(ctx context.Context, d *decision, now time.Time) ([]int64, error) {
	if d.more > 0 && d.rid == "" { // a fetch is settled by its give-back: it needs an id
		d.rid = l.nextID()
	}
	c := l.limitsCall(scriptOf(d.infos[:d.k], false), d.keys[:d.k], now, d.rid)
	c.argv, c.members = append(c.argv, d.more), d.members
	for i, info := range d.infos[:d.k] {
		cost := d.costs[i]
		if d.never {
			cost = 0
		}
		if d.upTo&(1<<i) != 0 {
			cost = -cost // take up to cost (lua/decide.lua)
		}
		c.argv = info.appendArgs(append(c.argv, cost), now)
	}
	return l.run(ctx, c)
}

// scriptOf returns the script that decides (or, with settle, settles) the
// limits of infos: their algorithm's, or the mixed one when they differ.
func scriptOf(infos []*limitInfo, settle bool) *script {
	d := infos[0].d
	for _, info := range infos[1:] {
		if info.d.file != d.file {
			if settle {
				return mixedSettle
			}
			return mixedScript
		}
	}
	if settle {
		return d.settle
	}
	return d.script
}

// limitsCall returns a call of s on keys whose ARGV starts with the
// clock at now ("": the server's) and the reservation's id; the limits'
// arguments are the caller's to append to its argv.
func (l *Limiter) limitsCall(s *script, keys []string, now time.Time, rid string) *call {
	c := newCall(s, keys...)
	c.clock, c.rid = "", rid
	if l.clock != nil {
		c.clock = now.UnixMicro()
	}
	return c
}

// run sends c through the engine and returns its reply.
func (l *Limiter) run(ctx context.Context, c *call) ([]int64, error) {
	reply, err := l.carrier.run(ctx, c, l.timeout)
	if err == nil {
		l.heartbeat()
	}
	return reply, err
}

// now reads the Limiter's clock: WithClock's, in the whole microseconds the
// scripts see (so that the deny cache's instants are Redis's), else the
// process's.
func (l *Limiter) now() time.Time {
	switch {
	case l.clock != nil:
		return time.UnixMicro(l.clock().UnixMicro())
	case l.localClock != nil:
		return l.localClock()
	}
	return time.Now()
}

// reset forgets the state key keeps under limit in scope, and every
// denial of this Limiter's deny cache that involved it.
func (l *Limiter) reset(ctx context.Context, scope, key string, limit Limit) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	info, err := infos.get(limit)
	if err != nil {
		return err
	}
	name := stateKey(l.prefix, scope, key, info)
	_, err = l.run(ctx, newCall(delScript, name))
	if l.deny != nil { // after the reset, so that denials sent meanwhile go too
		l.deny.reset(name)
	}
	l.forgetLeases(name)
	if err != nil {
		return fmt.Errorf("redlimit: reset %v state of %q: %w", limit, key, err)
	}
	return nil
}

// checkKey reports whether the Limiter can store state for key.
func (l *Limiter) checkKey(key string) error {
	switch {
	case !l.Ready():
		return errors.New("redlimit: Limiter is not initialised (nil or a zero core.Limiter{}); create it with core.New")
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > maxKeyLen:
		return fmt.Errorf("%w: key of %d bytes is longer than %d; hash it first", ErrInvalidKey, len(key), maxKeyLen)
	}
	return nil
}
