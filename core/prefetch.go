package core

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Prefetch (Limit.Prefetch): allowance held in process.
//
// A decision of n events whose limits all set Prefetch asks Redis for n
// and up to m more (a partial grant: the script takes n plus as many of
// the m as fit now, under every limit; lua/decide.lua). The extra events
// are a lease: later decisions of the same key and limits take from it in
// process, without a round trip, while it is valid:
//
//   - A window's (FixedWindow) events are used only inside the window they
//     were counted in: until the fetch's ResetAfter has passed, counted
//     from when the fetch was sent.
//   - A meter's (GCRA, TokenBucket) events are used only while they would
//     still be counted without the prefetch. A meter refills up to its
//     capacity; were it to refill while the Limiter holds events, it would
//     count them twice: once taken, once refilled. So a meter's lease holds
//     h events only while the meter's state is at least h events from full:
//     until sent + ResetAfter − h·Period/Rate, ResetAfter being the fetch's
//     time until full. Each event taken from it moves that instant on by
//     one event's time. A fetch leaves the meter at least prefetchLease
//     plus its held events' time from full (when the burst allows), so a
//     lease lasts prefetchLease even when the meter was full: the meter
//     then offers others that much less meanwhile. Nothing else can move
//     the state closer to full than the fetch left it: refunds stop at the
//     floor the fetch records (lua/gcra.lua, lua/token_bucket.lua), unless
//     they are the give-back of the fetch that set it.
//
// So every event admitted in process would have been admitted had it been
// counted when it was admitted: the promise holds summed over every
// Limiter, and what prefetch may cost is admitting less: the events a
// Limiter holds and does not use, at most m at a time. What a lease still
// holds when it is idle for prefetchIdle, or when a decision needs more
// than it holds, goes back to Redis (a refund; gcra and the token bucket
// take it only while it is valid there too), so only a lease that lapses
// loses what it held: a window's at the window's end, a meter's once it
// has drained (by then it is free again anyway).
//
// Concurrent decisions of one key share a lease, taking from it without a
// lock, and while one fetches, the others wait for it (within their
// context) rather than fetch too. The fetch size adapts to the key's local
// demand: a key decided once in a while prefetches nothing (its decisions
// are plain ones); one decided again within prefetchLease starts at 1,
// doubles each time a lease is used up, and falls to what was used when
// one lapses or goes back, never above Prefetch. Leases of keys no longer
// decided are swept once a second.

// prefetchLease is how long a meter keeps a fetch's events counted at
// least: the script leaves the meter that far plus the held events' time
// from full (lua/prelude.lua's prefetch_lease, in µs), within its burst.
// prefetchIdle is how long a lease may go unused before what it holds
// goes back to Redis: early enough in the lease for the refund to count.
const (
	prefetchLease = 20 * time.Millisecond
	prefetchIdle  = prefetchLease / 2
)

// lease is the allowance a Limiter holds for one decision's keys. Its
// grant answers decisions without a lock; the rest is the slow path's,
// under mu.
type lease struct {
	g atomic.Pointer[grant] // what the last fetch granted; nil: nothing held

	mu        sync.Mutex
	keys      []string      // the state keys it is for
	size      int           // the extra events the last fetch asked for
	lastFetch time.Time     // when the last fetch was sent
	fetching  chan struct{} // closed when the fetch in flight ends; nil when none
	timer     *time.Timer
}

// grant is what one fetch granted: read-only but for its counters.
type grant struct {
	rsv     *Reservation // the fetch's, whose refund gives back what is left
	sent    time.Time    // when the fetch was sent, by the Limiter's clock
	extra   int64        // events granted beyond the fetch's own
	limits  []Limit      // the limits it was fetched under: others do not take from it
	results []Result     // the fetch's, per limit, before what it holds
	ends    []time.Time  // per limit: sent + ResetAfter
	per     []int64      // per limit: a meter's µs per event, over rate; 0 for a window
	rate    []int64

	left  atomic.Int64 // events held
	taken atomic.Int64 // events taken from it
	used  atomic.Bool  // taken from since the timer last looked
}

// prefetched decides d from the lease of its keys, or fetches (the
// decision and up to d.prefetch more events) when the lease cannot answer.
// It stores each limit's result in results and returns the binding one and
// its index.
func (l *Limiter) prefetched(ctx context.Context, d *decision, id string, limits []Limit, results []Result) (Result, int, error) {
	ls := l.leaseOf(d)
	for {
		now := l.now()
		if res, i, ok := ls.answer(now, d.n, limits, results); ok {
			return res, i, nil
		}
		ls.mu.Lock()
		if wait := ls.fetching; wait != nil { // join the fetch in flight
			ls.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return Result{}, 0, ctx.Err()
			}
		}
		if res, i, ok := ls.answer(now, d.n, limits, results); ok { // filled meanwhile
			ls.mu.Unlock()
			return res, i, nil
		}
		done := l.startFetch(ls, now, d)
		dec, err := l.remote(ctx, d, id, limits, results, false)
		if done == nil { // a plain decision
			return dec.Result, dec.Binding, err
		}
		var g *grant
		if err == nil && dec.Reservation != nil { // granted d.got more than n
			g = newGrant(dec.Reservation, now, d.got, limits, results)
			for i := range results {
				results[i].Remaining += d.got
			}
			dec.Result, dec.Binding = Binding(results)
		}
		l.endFetch(ls, done, g)
		return dec.Result, dec.Binding, err
	}
}

// leaseOf returns the lease of d's keys, made on their first decision
// (which starts the sweeper, if it does not run).
func (l *Limiter) leaseOf(d *decision) *lease {
	key := d.cacheID()
	v, ok := l.leases.Load(key)
	if !ok {
		v, ok = l.leases.LoadOrStore(key, &lease{keys: slices.Clone(d.keys[:d.k])})
		if !ok {
			l.sweep()
		}
	}
	return v.(*lease)
}

// answer decides n events under limits from the lease's grant at now, if
// it holds them and may still use them: it fills results and returns the
// binding one, its index and true.
func (ls *lease) answer(now time.Time, n int, limits []Limit, results []Result) (Result, int, bool) {
	if g := ls.g.Load(); g != nil && g.take(now, n, limits, results) {
		res, i := Binding(results)
		return res, i, true
	}
	return Result{}, 0, false
}

// startFetch, with ls.mu held and no fetch in flight, ends the lease's
// grant and sizes the fetch of d at now from the key's demand (d.more).
// Unless the size is 0 (a key decided once in a while: a plain decision,
// nobody waits for it), it marks the fetch in flight, whose done channel
// it returns. It unlocks ls.mu, then gives back what the ended grant held.
func (l *Limiter) startFetch(ls *lease, now time.Time, d *decision) (done chan struct{}) {
	g := ls.g.Swap(nil)
	d.more = ls.nextSize(g, now, d.prefetch, l.fixedPrefetch)
	ls.lastFetch = now
	if d.more > 0 {
		done = make(chan struct{})
		ls.fetching = done
	}
	ls.mu.Unlock()
	l.release(g, now)
	return done
}

// endFetch ends the fetch in flight on ls (done), whose waiters then try
// the lease again: g, when the fetch granted events, is its grant from now
// on, given back if it goes unused.
func (l *Limiter) endFetch(ls *lease, done chan struct{}, g *grant) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.fetching = nil
	close(done)
	if g != nil {
		ls.g.Store(g)
		l.watch(ls)
	}
}

// newGrant returns the grant of a fetch sent at sent that took extra
// events beyond its own, with results.
func newGrant(rsv *Reservation, sent time.Time, extra int, limits []Limit, results []Result) *grant {
	g := &grant{rsv: rsv, sent: sent, extra: int64(extra),
		limits: slices.Clone(limits), results: slices.Clone(results),
		ends: make([]time.Time, len(limits)), per: make([]int64, len(limits)), rate: make([]int64, len(limits))}
	for i, l := range limits {
		g.ends[i] = sent.Add(results[i].ResetAfter)
		if l.descriptor().meter {
			g.per[i], g.rate[i] = micros(l.Period), int64(l.Rate)
		}
	}
	g.left.Store(int64(extra))
	return g
}

// take admits n events from the grant at now, if it holds them and may
// still use them, and fills results as the fetch's, moved on to now.
func (g *grant) take(now time.Time, n int, limits []Limit, results []Result) bool {
	if !slices.Equal(g.limits, limits) {
		return false
	}
	for {
		left := g.left.Load()
		if left < int64(n) || !now.Before(g.deadline(left)) {
			return false
		}
		if g.left.CompareAndSwap(left, left-int64(n)) {
			g.taken.Add(int64(n))
			if !g.used.Load() {
				g.used.Store(true)
			}
			g.report(now, int(left)-n, results)
			return true
		}
	}
}

// report fills results for a decision answered from the grant at now,
// which then holds left: Remaining is what Redis said was left after the
// fetch, plus what is still held; the times count down from the fetch's.
func (g *grant) report(now time.Time, left int, results []Result) {
	elapsed := now.Sub(g.sent)
	for i, r := range g.results {
		r.Remaining += left
		r.ResetAfter = max(0, r.ResetAfter-elapsed)
		r.NextAfter = max(0, r.NextAfter-elapsed)
		if c := r.Limit.Capacity(); r.Remaining >= c {
			r.Remaining, r.NextAfter = c, 0
		}
		r.Allowed, r.RetryAfter, r.Delay, r.Cached = true, 0, 0, true
		results[i] = r
	}
}

// deadline returns the instant after which a grant holding left events may
// not use them: the earliest of its limits' (see the top of this file).
func (g *grant) deadline(left int64) time.Time {
	end := g.ends[0]
	for i, t := range g.ends {
		if g.per[i] > 0 { // a meter: less the time to refill what is held, rounded up
			t = t.Add(-time.Duration((left*g.per[i]+g.rate[i]-1)/g.rate[i]) * time.Microsecond)
		}
		if t.Before(end) {
			end = t
		}
	}
	return end
}

// nextSize returns the extra events the next fetch asks for, from what the
// previous grant g (nil: none) says of the demand: none for a key not
// decided within prefetchLease; doubled when g was used up; what was taken
// of it when not.
func (ls *lease) nextSize(g *grant, now time.Time, most int, fixed bool) int {
	switch {
	case fixed:
		ls.size = most
	case ls.lastFetch.IsZero() || now.Sub(ls.lastFetch) > prefetchLease:
		ls.size = 0
	case g == nil || g.taken.Load() >= g.extra:
		ls.size = max(1, 2*ls.size)
	default:
		ls.size = int(g.taken.Load())
	}
	ls.size = min(ls.size, most)
	return ls.size
}

// release ends a grant the lease no longer uses: what it holds goes back
// to Redis if the grant may still use it at now; else it has lapsed.
func (l *Limiter) release(g *grant, now time.Time) {
	if g == nil {
		return
	}
	if left := g.left.Swap(0); left > 0 && now.Before(g.deadline(left)) {
		l.giveBack(g.rsv, g.rsv.n-int(left))
	}
}

// watch makes sure that what ls holds goes back if it goes unused: on a
// real clock, a timer looks every prefetchIdle. ls.mu is held.
func (l *Limiter) watch(ls *lease) {
	if l.clock != nil || l.localClock != nil {
		return
	}
	if ls.timer == nil {
		ls.timer = time.AfterFunc(prefetchIdle, func() { l.idle(ls) })
		return
	}
	ls.timer.Reset(prefetchIdle)
}

// idle gives back what the lease holds if it went unused since the timer
// last looked, or looks again later.
func (l *Limiter) idle(ls *lease) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	g := ls.g.Load()
	if g == nil || ls.fetching != nil {
		return
	}
	now := time.Now()
	if g.used.Swap(false) && now.Before(g.deadline(g.left.Load())) {
		ls.timer.Reset(prefetchIdle)
		return
	}
	l.release(ls.g.Swap(nil), now)
}

// giveBack settles a grant's fetch at cost: what was taken of it. It does
// not wait: a give-back that fails costs only allowance.
func (l *Limiter) giveBack(rsv *Reservation, cost int) {
	go func() {
		if err := rsv.Settle(context.Background(), cost); err != nil {
			l.log.Debug("redlimit: giving back prefetched events failed", "error", err)
		}
	}()
}

// sweep starts, on a real clock, the goroutine that forgets the leases of
// keys no longer decided, if it does not run: once a second it drops those
// that hold nothing and have not fetched for a second, and it stops when
// none is left.
func (l *Limiter) sweep() {
	if l.clock != nil || l.localClock != nil || !l.sweeping.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for {
			time.Sleep(time.Second)
			left := 0
			now := time.Now()
			l.leases.Range(func(key, v any) bool {
				ls := v.(*lease)
				ls.mu.Lock()
				if ls.g.Load() == nil && ls.fetching == nil && now.Sub(ls.lastFetch) > time.Second {
					l.leases.Delete(key)
				} else {
					left++
				}
				ls.mu.Unlock()
				return true
			})
			if left == 0 {
				l.sweeping.Store(false)
				// A lease stored since the Range starts no sweeper while
				// this one still ran: look once more.
				if empty(&l.leases) || !l.sweeping.CompareAndSwap(false, true) {
					return
				}
			}
		}
	}()
}

// empty reports whether m holds nothing.
func empty(m *sync.Map) bool {
	e := true
	m.Range(func(any, any) bool { e = false; return false })
	return e
}

// forgetLeases drops, without giving anything back, what every lease that
// involves the state key name holds: Reset removed the state it was taken
// from.
func (l *Limiter) forgetLeases(name string) {
	l.leases.Range(func(_, v any) bool {
		ls := v.(*lease)
		if slices.Contains(ls.keys, name) {
			if g := ls.g.Swap(nil); g != nil {
				g.left.Store(0)
			}
		}
		return true
	})
}
