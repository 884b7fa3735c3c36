package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Several keys of one request, all or nothing (Request.Keys): an address
// and a user name, each with limits of its own, where a request that any
// key denies must be charged to none.
//
// On one server (standalone, Sentinel) one script decides the limits of
// every key, atomically, as it decides one key's: one round trip and one
// script call, as AllowAll of the same limits on one key.
//
// On a Cluster or a Ring, or behind a proxy (WithBatchScript(false)), the
// keys live in different slots, and no script may touch them together.
// Each key's limits are then reserved in turn, on that key's node, one
// round trip each; if a key denies, the keys reserved before it are
// refunded, one round trip each, and the refunds are exact
// (docs/lifecycle.md): the request ends charged to none. So:
//
//   - admitted: one round trip per key, one after the other;
//   - denied by the i-th key asked: i round trips and i-1 refunds. A key
//     this Limiter saw denied moments ago is asked first, and its deny
//     cache answers without a round trip: a flood on a denied user name
//     costs Redis nothing, as it does for one key;
//   - between a key's reservation and its refund its allowance is held,
//     so a concurrent request on that key may be denied by a hold that is
//     then given back: under-admission, never over-admission;
//   - a refund that fails (Redis failing between the two calls) leaves its
//     key's charge standing, as a failed settlement does (counted in
//     Stats().FailedSettlements); a decision that fails may have charged
//     the key it was sent for, as any failed decision may;
//   - the keys share the decision's one timeout (the Limiter's, or
//     Request.Timeout): a key waits what the keys asked before it left;
//   - prefetch is not used: every decision goes to Redis.

// oneScript reports whether q, whose limits have keys of their own, is
// decided by one script: its keys are all one, or one script may hold
// keys of any hash tag (one server).
func (l *Limiter) oneScript(q *Request) bool {
	if l.tr == nil || len(q.Keys) < 2 || l.tr.OneScript() {
		return true // a zero Limiter, or keys that do not match the limits: prepare says what is wrong
	}
	for _, key := range q.Keys[1:] {
		if key != q.Keys[0] {
			return false
		}
	}
	return true
}

// keyPart is the limits of one key of a Request with Keys: a decision of
// its own, on its key's node.
type keyPart struct {
	at   []int   // its limits' indices in the Request
	q    Request // its own: its key, limits, scopes, costs
	d    decision
	each []Result
	dec  Decision // once asked
	sent bool     // asked
}

// decideKeys decides q, whose limits have keys in different slots: each
// key's limits reserved in turn, and refunded if a key denies (see
// above).
func (l *Limiter) decideKeys(ctx context.Context, q *Request) (Decision, error) {
	parts, err := l.splitKeys(q)
	if err != nil {
		return Decision{}, err
	}
	// One bound for the whole decision, whatever the number of keys: each
	// part waits what the parts before it left.
	timeout, start := l.timeoutOf(q), time.Now()
	denied := -1
	for _, i := range l.askOrder(parts) {
		p := &parts[i]
		p.d.rid = l.nextID()
		if timeout > 0 {
			if p.d.timeout = timeout - time.Since(start); p.d.timeout <= 0 {
				l.refund(ctx, parts)
				return Decision{}, fmt.Errorf("%w: the keys asked before used up the decision's timeout (%w)", ErrTimeout, context.DeadlineExceeded)
			}
		}
		if p.dec, err = l.remote(ctx, &p.d, p.q.Key, p.q.Limits, p.each, true); err != nil {
			l.refund(ctx, parts)
			return Decision{}, err
		}
		if p.sent = true; !p.dec.Allowed {
			denied = i
			l.refund(ctx, parts)
			break
		}
	}
	results := q.Each
	if results == nil {
		results = make([]Result, len(q.Limits))
	}
	for _, p := range parts {
		for j, at := range p.at {
			results[at] = p.each[j]
			if !p.sent { // a key after the one that denied: not asked, nothing known nor taken
				results[at] = Result{Limit: q.Limits[at], Allowed: true}
			}
			if denied < 0 && q.TakeRest != nil {
				q.Costs[at] = p.d.costs[j] // what a limit that takes up to its cost took
			}
		}
	}
	res, b := Binding(results[:len(q.Limits)])
	dec := Decision{Result: res, Binding: b}
	switch {
	case denied >= 0:
		dec.Cached = parts[denied].dec.Cached
		if q.Reserve {
			dec.Reservation = &Reservation{res: dec.Result} // holds nothing
		}
	case q.Reserve:
		dec.Reservation = l.splitReservation(q, parts, dec.Result)
	}
	return dec, nil
}

// splitKeys checks q as a decision of one key would be checked, and
// returns its limits split by key, each part prepared.
func (l *Limiter) splitKeys(q *Request) ([]keyPart, error) {
	var whole decision
	if err := l.prepare(&whole, q); err != nil {
		return nil, err
	}
	if whole.holds && !q.Reserve {
		return nil, fmt.Errorf("%w: a %s limit holds its slots until they are released: decide it with Reserve, not AllowN or AllowAll", ErrInvalidLimit, Concurrency)
	}
	distinct := 0
	for i, key := range q.Keys {
		if !slices.Contains(q.Keys[:i], key) {
			distinct++
		}
	}
	parts := make([]keyPart, 0, distinct)
	for i, key := range q.Keys {
		j := slices.IndexFunc(parts, func(p keyPart) bool { return p.q.Key == key })
		if j < 0 {
			parts = append(parts, keyPart{q: Request{Key: key, N: q.N, Reserve: true}})
			j = len(parts) - 1
		}
		p := &parts[j]
		p.at = append(p.at, i)
		p.q.Limits = append(p.q.Limits, q.Limits[i])
		if q.Scopes != nil {
			p.q.Scopes = append(p.q.Scopes, q.Scopes[i])
		}
		if q.Costs != nil {
			p.q.Costs = append(p.q.Costs, q.Costs[i])
		}
		if q.TakeRest != nil {
			p.q.TakeRest = append(p.q.TakeRest, q.TakeRest[i])
		}
	}
	for i := range parts {
		p := &parts[i]
		p.each = make([]Result, len(p.at))
		if err := l.prepare(&p.d, &p.q); err != nil { // not reached: the whole was checked
			return nil, err
		}
	}
	return parts, nil
}

// askOrder returns the order to ask parts in: first those this Limiter
// saw denied moments ago, which its deny cache may answer at once, then
// the others as they come.
func (l *Limiter) askOrder(parts []keyPart) []int {
	order := make([]int, 0, len(parts))
	if l.deny != nil {
		now := l.now()
		for i := range parts {
			if l.deny.holds(parts[i].d.cacheID(), now) {
				order = append(order, i)
			}
		}
	}
	for i := range parts {
		if !slices.Contains(order, i) {
			order = append(order, i)
		}
	}
	return order
}

// holds reports whether the deny cache has a denial of the entry id that
// may still answer at now.
func (c *denyCache) holds(id string, now time.Time) bool {
	e, ok := c.entries.Peek(id)
	return ok && now.Before(e.retryAt)
}

// refund gives back what the parts reserved and admitted, and frees their
// slots, with a context the caller's leaving does not cancel (the
// Limiter's timeout bounds each call). A failed refund is counted as a
// failed settlement, its slots freed in the background (release.go).
func (l *Limiter) refund(ctx context.Context, parts []keyPart) {
	ctx = context.WithoutCancel(ctx)
	for i := range parts {
		p := &parts[i]
		if r := p.dec.Reservation; p.sent && p.dec.Allowed && r != nil {
			_ = r.settle(ctx, nil, 0)
		}
	}
}

// splitPart is the Reservation of one key's limits, within a Reservation
// of several keys: at are its limits' indices in the whole.
type splitPart struct {
	r  *Reservation
	at []int
}

// splitReservation returns the Reservation of q, whose parts each
// reserved and admitted their key's limits: settling it settles each
// part. res is the decision's.
func (l *Limiter) splitReservation(q *Request, parts []keyPart, res Result) *Reservation {
	r := &Reservation{l: l, res: res, n: q.N, infos: make([]*limitInfo, len(q.Limits))}
	for i, c := range q.Costs {
		if i == 0 {
			r.n = c
		} else if c != r.n {
			r.n = -1
		}
	}
	for _, p := range parts {
		for j, at := range p.at {
			r.infos[at] = p.d.infos[j]
		}
		if p.dec.Reservation != nil { // none for a part whose costs are all 0: nothing to settle
			r.split = append(r.split, splitPart{r: p.dec.Reservation, at: p.at})
		}
	}
	if r.split == nil {
		return &Reservation{res: res}
	}
	r.id = r.split[0].r.id
	return r
}

// settleSplit settles each part of r, a Reservation of several keys, at
// costs (the whole's, one per limit) or, when costs is nil, at cost for
// every limit (-1: at what each reserved). A part settled by an earlier
// call is skipped; if a part's settlement was refused unsent (the
// breaker, ErrUnavailable), r may be settled again.
func (r *Reservation) settleSplit(ctx context.Context, costs []int, cost int) error {
	var errs []error
	for _, p := range r.split {
		if p.r.done.Load() {
			continue
		}
		var own []int
		if costs != nil {
			own = make([]int, len(p.at))
			for j, at := range p.at {
				own[j] = costs[at]
			}
		}
		if err := p.r.settle(ctx, own, cost); err != nil {
			errs = append(errs, err)
			if errors.Is(err, ErrUnavailable) {
				r.done.Store(false)
			}
		}
	}
	return errors.Join(errs...)
}
