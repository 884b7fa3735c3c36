package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlimit/redlimit/internal/transport"
	"github.com/redlimit/redlimit/internal/wire"
)

// MaxLimits is the most limits one decision may hold.
const MaxLimits = 16

// Request is one decision of several limits for a key, each limit at a
// cost of its own and in a scope of its own: what the HTTP layer (package
// redlimit) decides per request, and what an adapter of a protocol it does
// not cover may decide. Allow, AllowN, AllowAll, Reserve and ReserveEach
// are simple Requests. Limiter.Decide takes it; it is read during the call
// only (but for Costs and Each, which it writes).
type Request struct {
	Key    string
	Limits []Limit // 1 to MaxLimits
	// Scopes, if not nil, holds each limit's scope: a name its state's key
	// carries (outside the Cluster hash tag), so that equal limits of two
	// scopes (two policies of the HTTP layer, say) keep apart. "" is no
	// scope, as for Allow.
	Scopes []string
	// N is each limit's cost, unless Costs (as long as Limits) holds one
	// per limit. A negative cost is an error wrapping ErrInvalidCost.
	N     int
	Costs []int
	// TakeRest, if not nil (as long as Limits), lets Limits[i] take up to
	// Costs[i] when TakeRest[i]: as many as it has left, if it has any,
	// else it denies, its RetryAfter the time until one is back. An allowed
	// decision writes what each such limit took into Costs[i], which a
	// SettleEach settles from.
	TakeRest []bool
	// Reserve makes the decision a reservation to settle (Reserve's):
	// Concurrency limits may be decided only so.
	Reserve bool
	// Each, if not nil (as long as Limits), receives every limit's result.
	Each []Result
	// Timeout, if above 0, bounds the decision in place of the Limiter's
	// timeout when it is shorter, or when the Limiter has none: what is
	// left of a wait several decisions share (the HTTP layer's one
	// deadline for a request's policies). 0, the default, is the
	// Limiter's (WithTimeout). A decision past it fails as past the
	// Limiter's.
	Timeout time.Duration
	// Keys, if not nil (as long as Limits), holds each limit's key, in
	// place of Key: several keys of one request (an address and a user
	// name) decided all or nothing, a request any key denies charged to
	// none. On one server one script decides them; on a Cluster, a Ring
	// or behind a proxy (WithBatchScript(false)) each key's limits are
	// reserved in turn on its node, one round trip each, and refunded if
	// another key denies; a key denied in the deny cache is asked first;
	// prefetch is not used; the Reservation of such a decision settles
	// each key's, one round trip each. docs/keys.md says what it costs.
	// nil: every limit's key is Key.
	Keys []string
}

// Decision is what Decide answers.
type Decision struct {
	// Result is the binding limit's, as AllowAll's: the denying limit with
	// the longest RetryAfter, or, when all allow, the one with the fewest
	// Remaining; its ResetAfter the longest of all.
	Result
	// Binding is the binding limit's index in Request.Limits.
	Binding int
	// Reservation is, for a Request with Reserve, its receipt (a denied
	// one holds nothing); nil otherwise.
	Reservation *Reservation
}

// decision is one decision on its way: what prepare works out of its
// arguments, read by the steps after it. It holds nothing of the caller's:
// escape analysis does not tell a struct's fields apart, and its keys go
// to the heap with the script call, so the caller's limits would too.
type decision struct {
	k     int    // how many limits
	n     int    // the cost, when every limit's is the same; else -1
	never bool   // a cost is above its limit's capacity: report the state, admit nothing
	rid   string // the reservation's (or prefetch's) id; "" for none
	holds bool   // a limit holds slots (Concurrency), which only a reservation may take
	// prefetch is the least Limit.Prefetch of the limits, 0 if one has
	// none; more asks the script for up to that many events beyond n (a
	// fetch, prefetch.go), and got is how many it granted.
	prefetch, more, got int
	members             int // log entries and slots the decision may add (transport.Call.Members)
	infos               [MaxLimits]*limitInfo
	keys                [MaxLimits]string
	costs               [MaxLimits]int  // each limit's cost
	upTo                [MaxLimits]bool // Request.TakeRest's
	marks               [MaxLimits]int64
	epochs              [MaxLimits]int64 // what the reply said each limit's settlement needs (lua/src/meter.lua)
	timeout             time.Duration    // bounds its wait: the Limiter's, or Request.Timeout when shorter
}

// Decide decides q in these steps:
//
//  1. prepare: check the key, the limits and the costs; name each limit's
//     state;
//  2. prefetched allowance, if the limits set Prefetch, answers in process
//     (prefetch.go), or fetches more with the steps below;
//  3. the deny cache: a denial Redis gave moments ago answers at once;
//  4. ask: one script call, through the transport;
//  5. read: each limit's result from the reply, and the binding one;
//  6. remember a denial in the deny cache.
//
// Its errors are those of AllowN, and ErrInvalidLimit for a Concurrency
// limit without Reserve. It is safe for concurrent use.
func (l *Limiter) Decide(ctx context.Context, q *Request) (Decision, error) {
	if q.Keys != nil && !l.oneScript(q) {
		return l.decideKeys(ctx, q)
	}
	d := decision{}
	if err := l.prepare(&d, q); err != nil {
		return Decision{}, err
	}
	d.timeout = l.timeoutOf(q)
	if d.holds && !q.Reserve {
		return Decision{}, fmt.Errorf("%w: a %s limit holds its slots until they are released: decide it with Reserve, not AllowN or AllowAll", ErrInvalidLimit, Concurrency)
	}
	if q.Reserve {
		d.rid = l.nextID()
	}
	var buf [MaxLimits]Result
	results := buf[:len(q.Limits)]
	if q.Each != nil {
		results = q.Each[:len(q.Limits)]
	}
	var dec Decision
	var err error
	if d.prefetch > 0 && !q.Reserve && d.n > 0 && !d.never && q.Keys == nil { // several keys: no prefetch
		dec.Result, dec.Binding, err = l.prefetched(ctx, &d, q.Key, q.Limits, results)
	} else {
		dec, err = l.remote(ctx, &d, q.keyOf(0), q.Limits, results, q.Reserve)
	}
	switch {
	case err != nil:
		return Decision{}, err
	case !q.Reserve: // a fetch's reservation is the lease's (prefetch.go)
		dec.Reservation = nil
	case dec.Reservation == nil: // denied, or n = 0: nothing to settle
		dec.Reservation = &Reservation{res: dec.Result}
	default:
		dec.Reservation.res = dec.Result
	}
	if q.TakeRest != nil && dec.Allowed {
		copy(q.Costs, d.costs[:d.k])
	}
	return dec, nil
}

// remote is a decision's steps from the deny cache on: it asks Redis. It
// returns a Reservation when reserve is set, or when d fetched events to
// hold (d.got of them beyond n), and the decision allowed.
func (l *Limiter) remote(ctx context.Context, d *decision, id string, limits []Limit, results []Result, reserve bool) (Decision, error) {
	now := l.now()
	var cacheID string
	var dq denyQuery
	var seq uint64
	refresh := false // this decision refreshes a cached denial
	// what the deny cache compares: each limit's cost, 1 for one that
	// takes up to its cost (it is denied only when not one is left)
	cached := d.costs
	for i := range d.k {
		if d.upTo[i] {
			cached[i] = 1
		}
	}
	if l.deny != nil && !d.never {
		cacheID = d.cacheID()
		dq = denyQuery{keys: d.keys[:d.k], limits: limits, costs: cached[:d.k]}
		var ok bool
		if ok, refresh = l.deny.get(cacheID, dq, now, results); ok {
			res, i := Binding(results)
			res.Cached = true
			return Decision{Result: res, Binding: i}, nil
		}
		seq = l.deny.sent()
	}

	at, err := l.ask(ctx, d, now, limits, results)
	if err != nil {
		if reserve {
			l.unanswered(d, err) // its slots, if it took any, are freed in the background
		}
		// A copy of id: were id itself to reach the heap, so would the
		// caller's arguments, costing an allocation per decision (7 → 8,
		// TestDecisionAllocations; docs/performance.md).
		return Decision{}, fmt.Errorf("redlimit: %s decision for %q: %w", d.algorithms(), strings.Clone(id), err)
	}
	res, i := Binding(results)
	switch {
	case !res.Allowed && l.deny != nil && !d.never:
		l.deny.add(cacheID, dq, now, seq, results)
	case refresh: // allowed after all: another process reset or raised a limit
		l.deny.forget(cacheID)
	}
	dec := Decision{Result: res, Binding: i}
	switch {
	case !res.Allowed || d.n == 0: // nothing to settle
	case reserve:
		dec.Reservation = newReservation(l, d, at, results)
	case d.got > 0: // a fetch: its give-back is a refund that takes all or nothing (lua/src/meter.lua)
		d.n += d.got
		for i := range d.k {
			d.costs[i] = d.n
		}
		dec.Reservation = newReservation(l, d, at, results)
		dec.Reservation.giveBack = true
	}
	return dec, nil
}

// prepare checks the arguments of a decision and fills d: each limit's
// worked-out info, the name of its state and its cost (q.N, or
// q.Costs[i]), and whether the costs can ever fit.
func (l *Limiter) prepare(d *decision, q *Request) error {
	if err := l.checkKeys(q); err != nil {
		return err
	}
	limits, costs := q.Limits, q.Costs
	switch {
	case len(limits) == 0 || len(limits) > MaxLimits:
		return fmt.Errorf("%w: %d limits in one decision; want 1 to %d", ErrInvalidLimit, len(limits), MaxLimits)
	case costs != nil && len(costs) != len(limits):
		return fmt.Errorf("%w: %d costs for %d limits", ErrInvalidCost, len(costs), len(limits))
	case q.TakeRest != nil && (len(q.TakeRest) != len(limits) || costs == nil):
		return fmt.Errorf("%w: TakeRest needs a cost for each limit, and one flag for each", ErrInvalidCost)
	case q.Scopes != nil && len(q.Scopes) != len(limits):
		return fmt.Errorf("%w: %d scopes for %d limits", ErrInvalidLimit, len(q.Scopes), len(limits))
	}
	d.k, d.n, d.prefetch = len(limits), q.N, limits[0].Prefetch
	for i, limit := range limits {
		if err := l.prepareLimit(d, q, i, limit); err != nil {
			return err
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

// prepareLimit fills d's entries of limit, the i-th of q.
func (l *Limiter) prepareLimit(d *decision, q *Request, i int, limit Limit) error {
	cost := q.N
	if q.Costs != nil {
		cost = q.Costs[i]
		if i == 0 {
			d.n = cost
		} else if cost != d.n {
			d.n = -1
		}
	}
	switch {
	case cost < 0 && q.Costs == nil:
		return fmt.Errorf("%w: n=%d must not be negative", ErrInvalidCost, cost)
	case cost < 0:
		return fmt.Errorf("%w: cost %d of %v must not be negative", ErrInvalidCost, cost, limit)
	}
	info, err := l.infos.get(limit)
	if err != nil {
		return err
	}
	scope := ""
	if q.Scopes != nil {
		scope = q.Scopes[i]
	}
	d.costs[i], d.infos[i], d.keys[i] = cost, info, stateKey(l.prefix, scope, q.keyOf(i), info)
	d.prefetch = min(d.prefetch, limit.Prefetch)
	if d.upTo[i] = q.TakeRest != nil && q.TakeRest[i]; d.upTo[i] {
		d.n = -1 // what it takes is the reply's to say
	} else {
		d.never = d.never || cost > info.capacity
	}
	d.holds = d.holds || info.d.holds
	if info.d.members {
		d.members += min(cost, info.capacity)
	}
	return nil
}

// cacheID names d in the deny cache: its keys, in order (one key is its
// own name: strings.Join returns it without copying).
func (d *decision) cacheID() string {
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

// ask sends d's script call and reads its reply into results: the script
// of d's algorithm, or wire.All when they differ, with each limit's cost
// (0 for a cost that can never be admitted: the state is reported). It
// returns the decision's clock in µs.
func (l *Limiter) ask(ctx context.Context, d *decision, now time.Time, limits []Limit, results []Result) (int64, error) {
	if d.more > 0 && d.rid == "" { // a fetch is settled by its give-back: it needs an id
		d.rid = l.nextID()
	}
	c := transport.NewCall(scriptOf(d.infos[:d.k]), wire.Decide, d.keys[:d.k]...)
	c.Args = wire.AppendDecision(c.Args, l.wireClock(now), d.rid, d.more)
	for i, info := range d.infos[:d.k] {
		cost := d.costs[i]
		if d.never {
			cost = 0
		}
		c.Args = info.appendArgs(wire.AppendLimit(c.Args, cost, d.upTo[i]), now)
	}
	c.Members = d.members
	reply, err := l.runWithin(ctx, c, d.timeout)
	if err != nil {
		return 0, err
	}
	var buf [MaxLimits]wire.Limit
	got, err := wire.ReadDecision(reply, buf[:d.k])
	if err != nil {
		return 0, err
	}
	for i, r := range buf[:d.k] {
		results[i] = Result{Limit: limits[i], Allowed: r.Allowed, Remaining: max(0, r.Remaining),
			RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter, Delay: r.Delay, NextAfter: r.NextAfter}
		d.marks[i], d.epochs[i] = r.Mark, r.Epoch
		switch {
		case d.upTo[i]:
			if r.Allowed {
				d.costs[i] = r.Taken
			}
		case d.costs[i] > d.infos[i].capacity: // sent as 0, to report the state: never allowed
			results[i].Allowed, results[i].RetryAfter = false, InfDuration
		}
	}
	if got.Allowed {
		d.got = got.Fetched
	}
	return got.Clock, nil
}

// scriptOf returns the script of the limits of infos: their algorithm's,
// or wire.All when they differ.
func scriptOf(infos []*limitInfo) *wire.Script {
	s := infos[0].d.script
	for _, info := range infos[1:] {
		if info.d.script != s {
			return wire.All
		}
	}
	return s
}

// Validate returns nil if l was made by New, else an error that says to
// make it so: a nil or zero Limiter makes no decision (each returns an
// error). What takes a Limiter (redlimit.NewPolicy, the adapters,
// grpclimit, envoyrls, roundtrip, the metrics modules) calls it, so that
// a Limiter that cannot decide is refused where it is handed over, not
// at every request.
func (l *Limiter) Validate() error {
	if l == nil || l.tr == nil {
		return errNotReady
	}
	return nil
}

// errNotReady is the error of a nil or zero Limiter.
var errNotReady = errors.New("redlimit: a nil or zero core.Limiter makes no decision: create it with core.New(rdb)")

// keyOf returns the key of q's i-th limit.
func (q *Request) keyOf(i int) string {
	if q.Keys != nil {
		return q.Keys[i]
	}
	return q.Key
}

// checkKeys checks q's key, or each of its Keys.
func (l *Limiter) checkKeys(q *Request) error {
	if q.Keys == nil {
		return l.checkKey(q.Key)
	}
	if len(q.Keys) != len(q.Limits) {
		return fmt.Errorf("%w: %d keys for %d limits", ErrInvalidKey, len(q.Keys), len(q.Limits))
	}
	for _, key := range q.Keys {
		if err := l.checkKey(key); err != nil {
			return err
		}
	}
	return nil
}

// checkKey reports whether the Limiter can store state for key.
func (l *Limiter) checkKey(key string) error {
	switch {
	case l.Validate() != nil:
		return errNotReady
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > maxKeyLen:
		return fmt.Errorf("%w: key of %d bytes is longer than %d; hash it first", ErrInvalidKey, len(key), maxKeyLen)
	}
	return nil
}

// Binding returns the result of a decision of several limits from each
// limit's own result, and its index: the denying limit's with the longest
// RetryAfter, or, when all allow, the one with the fewest Remaining (the
// first of equals); with the longest ResetAfter of all, and the longest
// Delay when allowed. results must not be empty. It is the one place of
// this rule, which AllowAll and Decide answer by and the HTTP layer and
// envoyrls describe their answers with.
func Binding(results []Result) (Result, int) {
	b, reset, delay := 0, results[0].ResetAfter, results[0].Delay
	for i, r := range results[1:] {
		best := results[b]
		if best.Allowed && !r.Allowed ||
			!best.Allowed && !r.Allowed && r.RetryAfter > best.RetryAfter ||
			best.Allowed && r.Allowed && r.Remaining < best.Remaining {
			b = i + 1
		}
		reset, delay = max(reset, r.ResetAfter), max(delay, r.Delay)
	}
	res := results[b]
	res.ResetAfter, res.Delay = reset, delay
	if !res.Allowed {
		res.Delay = 0
	}
	return res, b
}

// wireClock is a call's clock: the Limiter's (WithClock) at now, or the
// Redis server's.
func (l *Limiter) wireClock(now time.Time) any { return wire.Clock(now, l.clock == nil) }

// Timeout returns the bound on one decision (WithTimeout): DefaultTimeout
// unless set, 0 for none; 0 for a nil or zero Limiter.
func (l *Limiter) Timeout() time.Duration {
	if l == nil {
		return 0
	}
	return l.timeout
}

// timeoutOf returns what bounds q's wait on Redis: the Limiter's
// timeout, or q.Timeout when that is shorter or the Limiter has none.
func (l *Limiter) timeoutOf(q *Request) time.Duration {
	if q.Timeout > 0 && (l.timeout == 0 || q.Timeout < l.timeout) {
		return q.Timeout
	}
	return l.timeout
}

// run sends c through the transport, bounded by the Limiter's timeout,
// and returns its reply.
func (l *Limiter) run(ctx context.Context, c *transport.Call) ([]int64, error) {
	return l.runWithin(ctx, c, l.timeout)
}

// runWithin is run bounded by timeout (0: none) in place of the
// Limiter's.
func (l *Limiter) runWithin(ctx context.Context, c *transport.Call, timeout time.Duration) ([]int64, error) {
	reply, err := l.tr.Run(ctx, c, timeout)
	if err == nil && l.peers.on.Load() { // counting the Limiters that share Redis (peers.go)
		l.heartbeat()
	}
	if w := &l.loss; err == nil && w.every > 0 && time.Now().UnixNano() >= w.next.Load() {
		l.startLossCheck() // has Redis kept its state? (loss.go)
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
	info, err := l.infos.get(limit)
	if err != nil {
		return err
	}
	name := stateKey(l.prefix, scope, key, info)
	_, err = l.run(ctx, transport.NewCall(wire.Del, "", name))
	if l.deny != nil { // after the reset, so that denials sent meanwhile go too
		l.deny.reset(name)
	}
	l.forgetLeases(name)
	if err != nil {
		return fmt.Errorf("redlimit: reset %v state of %q: %w", limit, key, err)
	}
	return nil
}
