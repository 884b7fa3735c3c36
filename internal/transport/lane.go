package transport

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A lane is the work for one Redis server: a single server has one; on a
// Cluster or Ring each node serving the keys has its own (queue, senders,
// breaker), so a node that hangs or fails delays and fails only the calls
// on its keys.
//
// Direct when free, batched when not. On a client whose commands go-redis
// bounds by their context's deadline (ContextTimeoutEnabled), a call whose
// lane has nothing queued and no round trip in flight is sent by its
// caller (direct): one EVALSHA, no hand-off. Every other call is queued
// and its caller waits for its answer, its timeout or its context,
// whichever comes first. Senders (at most Config.Senders goroutines per
// lane, started when work arrives and none is idle, stopped after
// senderLinger without work) take everything queued, up to Config.Batch
// calls, as one round trip (trip.go). So batches grow with load. Without
// ContextTimeoutEnabled go-redis bounds a read only by its ReadTimeout
// (seconds), so every call is queued: only a sender's wait can be left.

// Lane settings.
const (
	senderLinger   = time.Second            // a sender without work waits this long, then stops
	queuePerSender = 16                     // the queue holds this many full batches per sender
	reloadEvery    = 100 * time.Millisecond // a Cluster's slot map is reread at most this often on errors
	causeMaxAge    = 2 * time.Second        // a lane's last error this recent is named as a timeout's cause
)

// lane is the work for one Redis server: its queue, senders and breaker.
type lane struct {
	t       *Transport
	node    *redis.Client // the node on a Cluster or Ring; nil: the Transport's client
	breaker breaker
	busy    atomic.Int32 // round trips in flight, a sender's or a direct caller's
	qlen    atomic.Int32 // len(queue), read without the lock
	seen    atomic.Pointer[seenError]

	mu    sync.Mutex
	queue []*Call
	idle  []*sender // waiting for work, the most recent last
	alive int       // senders running
}

// seenError is the last error a round trip of a lane ended with, or the
// refusal (TRYAGAIN) a call of it waits out, and when.
type seenError struct {
	err error
	at  time.Time
}

func (t *Transport) newLane(node *redis.Client) *lane {
	ln := &lane{t: t, node: node}
	ln.breaker = breaker{after: t.after, log: t.log, probe: ln.probe, probed: t.reloadSoon, unavailable: t.errs.unavailable}
	if node != nil {
		ln.breaker.where = " at " + node.Options().Addr
	}
	return ln
}

// lane returns the lane that carries calls on key. A Cluster client that
// has no slot map yet loads one at the first lookup, for seconds if its
// nodes hang, whatever the lookup's context says: until a lookup has
// succeeded, a goroutine of the Transport's looks up (waitWarm), and a
// caller waits for it until due, or takes the main lane, which the client
// routes itself.
func (t *Transport) lane(ctx context.Context, key string, due time.Time) *lane {
	switch {
	case t.cl.route == nil:
		return t.main
	case t.warm.cold.Load() && !t.waitWarm(ctx, key, due):
		return t.main
	}
	node, err := t.cl.route(ctx, key)
	if err != nil || node == nil { // no slot map yet: the client finds the node
		return t.main
	}
	if ln, ok := t.lanes.Load(node); ok {
		return ln.(*lane)
	}
	ln, _ := t.lanes.LoadOrStore(node, t.newLane(node))
	return ln.(*lane)
}

// warming is a Cluster client's first slot-map load (Transport.lane).
type warming struct {
	cold atomic.Bool   // no lookup by route has succeeded yet
	mu   sync.Mutex    // guards done
	done chan struct{} // closed when the running lookup of waitWarm ends; nil: none runs
}

// waitWarm waits, at most until due (none when zero) and no longer than
// ctx, for a lookup of key's node by a goroutine of the Transport's; it
// reports whether a lookup has succeeded.
func (t *Transport) waitWarm(ctx context.Context, key string, due time.Time) bool {
	w := &t.warm
	w.mu.Lock()
	done := w.done
	if done == nil {
		done = make(chan struct{})
		w.done = done
		go func() {
			if node, err := t.cl.route(context.Background(), key); err == nil && node != nil {
				w.cold.Store(false)
			}
			w.mu.Lock()
			w.done = nil
			w.mu.Unlock()
			close(done)
		}()
	}
	w.mu.Unlock()
	var expired <-chan time.Time
	if !due.IsZero() {
		timer := time.NewTimer(time.Until(due))
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case <-done:
	case <-expired:
	case <-ctx.Done():
	}
	return !w.cold.Load()
}

// forget drops the lane of a node that has nothing to do, unless its
// breaker is open: a Cluster's or Ring's nodes may change over a process's
// life, and a lane holds its node's client. A call that found the lane
// just before still runs on it; the next one makes a new lane.
func (t *Transport) forget(ln *lane) {
	if ln.node == nil || ln.breaker.open.Load() || ln.breaker.probing.Load() {
		return
	}
	t.forgetting.Lock() // Stats sees a lane's openings in the lane or in goneOpens, never both
	defer t.forgetting.Unlock()
	if t.lanes.CompareAndDelete(ln.node, ln) {
		t.goneOpens.Add(ln.breaker.opens.Load())
	}
}

// eachLane calls f for every lane.
func (t *Transport) eachLane(f func(*lane)) {
	f(t.main)
	t.lanes.Range(func(_, ln any) bool { f(ln.(*lane)); return true })
}

// reloadSoon asks a Cluster client to reread its slot map, at most once
// per reloadEvery: after a node failed, its slots may have a new master.
func (t *Transport) reloadSoon() {
	if t.cl.reload == nil {
		return
	}
	now := time.Now().UnixNano()
	last := t.reloadedAt.Load()
	if now-last < int64(reloadEvery) || !t.reloadedAt.CompareAndSwap(last, now) {
		return
	}
	t.cl.reload()
}

// probe asks the lane's server whether it runs scripts, for an open
// breaker: EVAL of "return 1", which a server refuses as a call would
// when it is down, busy (BUSY) or the user may not run scripts (NOPERM),
// and which go-redis does not retry, so that its error is the first one
// (connection refused), not a retry's running out of time.
func (ln *lane) probe(ctx context.Context) error {
	cmd := probeOnce{redis.NewCmd(ctx, "eval", "return 1", 0)}
	switch {
	case ln.node != nil:
		return ln.node.Process(ctx, cmd)
	case ln.t.cl.process != nil:
		return ln.t.cl.process(ctx, cmd)
	}
	return ln.t.cl.rdb.Eval(ctx, "return 1", nil).Err()
}

// probeOnce is a probe go-redis sends once.
type probeOnce struct{ *redis.Cmd }

func (probeOnce) NoRetry() bool { return true }

// failed records that a call of the lane failed with err: for its breaker,
// unless a Cluster refused it for its slots' sake (unrun) or the error is
// the call's own (requestError: an answer, a success); for an error that
// may mean the node moved or is gone, the Cluster's slot map too.
func (ln *lane) failed(err error) {
	switch {
	case requestError(err):
		ln.breaker.success()
		return
	case !unrun(err):
		ln.breaker.failure(time.Now(), err)
	}
	if ln.t.cl.reload != nil && topologyError(err) {
		ln.t.reloadSoon()
	}
}

// timedOut returns the error of a call of ln that outlived timeout, naming
// the lane's last error as its likely cause when it is recent, or the
// client's last failed dial (a server that refuses connections).
func (ln *lane) timedOut(timeout time.Duration) error {
	if ln.failing() {
		return &timeoutError{d: timeout, cause: ln.seen.Load().err, sentinel: ln.t.errs.timeout}
	}
	if d := ln.t.dials.failed(ln.addr()); d != nil {
		return &timeoutError{d: timeout, cause: d, dial: true, sentinel: ln.t.errs.timeout}
	}
	return &timeoutError{d: timeout, sentinel: ln.t.errs.timeout}
}

// addr is the address of the lane's node, "" for the main lane (any).
func (ln *lane) addr() string {
	if ln.node == nil {
		return ""
	}
	return ln.node.Options().Addr
}

// failing reports whether a round trip of ln failed lately.
func (ln *lane) failing() bool {
	s := ln.seen.Load()
	return s != nil && time.Since(s.at) < causeMaxAge
}

// saw records the error a round trip of ln ended with, if it says more
// than that time ran out or the call's own.
func (ln *lane) saw(err error) {
	if err != nil && telling(err) {
		ln.seen.Store(&seenError{err, time.Now()})
	}
}

// timers are the timers callers wait on for their timeout, pooled: a
// queued call would otherwise allocate one (docs/performance.md).
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// do sends c, from the caller's goroutine when the lane is free (direct),
// else through the queue, and waits for its answer, its timeout (which
// ends at limit) or ctx, whichever comes first. It takes c: whatever
// happens, c is recycled once nobody needs it.
func (ln *lane) do(ctx context.Context, c *Call, timeout time.Duration, limit time.Time) ([]int64, error) {
	if err := ctx.Err(); err != nil { // nobody waits for it: do not send it
		c.recycle()
		return nil, unsentError{err}
	}
	switch {
	case ln.t.cl.bounded && !c.due.IsZero() && ln.qlen.Load() == 0 && ln.busy.CompareAndSwap(0, 1): // free
		ln.direct(ctx, c)
		if c.state.Load() == answered { // else sent again later: wait for it
			<-c.done
			return ln.answer(ctx, c, timeout)
		}
	default:
		if err := ln.submit(c); err != nil {
			c.recycle()
			return nil, err
		}
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := timers.Get().(*time.Timer)
		t.Reset(time.Until(limit))
		defer func() {
			t.Stop() // since Go 1.23 a stopped timer delivers nothing stale
			timers.Put(t)
		}()
		expired = t.C
	}
	var err error
	select {
	case <-c.done:
		return ln.answer(ctx, c, timeout)
	case <-expired:
		err = ln.timedOut(timeout)
		// Both may have passed while this goroutine waited for a CPU: the
		// earlier one is the answer.
		if d, ok := ctx.Deadline(); ok && d.Before(limit) {
			err = context.DeadlineExceeded
		}
	case <-ctx.Done():
		err = ctx.Err()
	}
	if c.state.CompareAndSwap(waiting, abandoned) {
		return nil, err // whoever answers it recycles it
	}
	<-c.done // answered meanwhile: take the answer after all
	return ln.answer(ctx, c, timeout)
}

// answer returns c's answer and recycles it. An error of a round trip that
// ran out of the call's time (go-redis gave up at its deadline, which may
// come a moment before the context's own timer) is the context's error, or
// its deadline's, or the timeout's, whichever it was.
func (ln *lane) answer(ctx context.Context, c *Call, timeout time.Duration) ([]int64, error) {
	reply, err, due := c.reply, c.err, c.due
	c.recycle()
	if err != nil && !IsTimeout(err) && !due.IsZero() && (ctxDeadline(err) || !time.Now().Before(due) && !requestError(err)) {
		d, ok := ctx.Deadline()
		switch err = ctx.Err(); {
		case err != nil:
		case ok && !d.After(due):
			err = context.DeadlineExceeded
		default:
			err = ln.timedOut(timeout)
		}
	}
	return reply, err
}

// direct sends c from the caller's goroutine, go-redis bounding the round
// trip by c.due (the timeout or ctx's deadline, whichever is earlier). A
// cancellation without a deadline is seen when the round trip ends, at the
// latest at the timeout. It ends the round trip do counted in.
func (ln *lane) direct(ctx context.Context, c *Call) {
	if d, ok := ctx.Deadline(); !ok || d.After(c.due) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.due)
		defer cancel()
	}
	t := trips.Get().(*trip)
	t.one[0] = c
	ln.roundTrip(ctx, t, t.one[:])
	t.one[0] = nil
	trips.Put(t)
	ln.busy.Add(-1)
}

// trips are the work spaces of direct callers' round trips, pooled.
var trips = sync.Pool{New: func() any { return new(trip) }}

// roundTrip sends calls in one round trip bounded by ctx and answers each
// one, or has it sent again later (requeue).
func (ln *lane) roundTrip(ctx context.Context, t *trip, calls []*Call) {
	t.run(ctx, &ln.t.cl, ln.t.log, calls)
	t.each(func(u *unit) { ln.saw(u.err) })
	for i := range t.resent { // waiting for a slot's keys: a timeout names why
		if u := &t.resent[i]; u.err == errWaiting {
			ln.saw(u.refusal)
		}
	}
	t.answer()
	if len(t.resent) > 0 { // a method value allocates: only when needed
		t.requeue(ln.submit)
	}
	t.reset()
}

// submit queues c, and wakes an idle sender or starts one if none is busy
// enough to take it next.
func (ln *lane) submit(c *Call) error {
	ln.mu.Lock()
	if len(ln.queue) >= ln.t.queued {
		ln.mu.Unlock()
		return ln.t.errs.queueFull
	}
	ln.queue = append(ln.queue, c)
	ln.qlen.Store(int32(len(ln.queue)))
	if n := len(ln.idle); n > 0 {
		s := ln.idle[n-1]
		ln.idle[n-1] = nil
		ln.idle = ln.idle[:n-1]
		ln.mu.Unlock()
		s.wake <- struct{}{}
		return nil
	}
	if ln.alive < ln.t.senders {
		ln.alive++
		ln.mu.Unlock()
		s := &sender{ln: ln, wake: make(chan struct{}, 1)}
		go s.run()
		return nil
	}
	ln.mu.Unlock()
	return nil
}

// sender is one goroutine that runs queued calls of a lane, one round trip
// at a time.
type sender struct {
	ln    *lane
	wake  chan struct{} // one value when an idle sender is handed work
	batch []*Call
	trip  trip
}

// run takes batches until there has been no work for the lane's linger.
func (s *sender) run() {
	ln := s.ln
	timer := time.NewTimer(time.Duration(ln.t.linger.Load()))
	defer timer.Stop()
	for {
		ln.mu.Lock()
		if len(ln.queue) == 0 {
			if !s.idleWait(timer) {
				return
			}
			continue
		}
		s.take()
		ln.mu.Unlock()
		ln.busy.Add(1)
		s.send()
		ln.busy.Add(-1)
	}
}

// idleWait waits, the lane's lock held on entry and released, for work or
// the linger; it reports whether the sender goes on.
func (s *sender) idleWait(timer *time.Timer) bool {
	ln := s.ln
	ln.idle = append(ln.idle, s)
	ln.mu.Unlock()
	timer.Reset(time.Duration(ln.t.linger.Load()))
	select {
	case <-s.wake:
		timer.Stop()
		return true
	case <-timer.C:
	}
	ln.mu.Lock()
	if i := slices.Index(ln.idle, s); i >= 0 { // nobody handed us work: stop
		ln.idle = append(ln.idle[:i], ln.idle[i+1:]...)
		ln.alive--
		idle := ln.alive == 0 && len(ln.queue) == 0
		ln.mu.Unlock()
		if idle {
			ln.t.forget(ln)
		}
		return false
	}
	ln.mu.Unlock()
	<-s.wake // handed work just now; the wake is on its way
	return true
}

// take moves up to a batch of the queue to s.batch; the lane's lock is held.
func (s *sender) take() {
	ln := s.ln
	if batch := ln.t.batch; len(ln.queue) <= batch { // take it all: swap buffers
		s.batch, ln.queue = ln.queue, s.batch[:0]
	} else {
		s.batch = append(s.batch[:0], ln.queue[:batch]...)
		rest := copy(ln.queue, ln.queue[batch:])
		clear(ln.queue[rest:])
		ln.queue = ln.queue[:rest]
	}
	ln.qlen.Store(int32(len(ln.queue)))
}

// send runs the batch and answers every call in it, but for those whose
// callers left while queued: they never reach Redis. The round trip ends
// at the calls' latest deadline, if all have one, on a client that bounds
// commands by it, or on any while the lane fails (so that go-redis stops
// redialling a refused connection at the deadline).
func (s *sender) send() {
	live := s.batch[:0]
	var due time.Time
	bounded := true
	for _, c := range s.batch {
		if c.state.Load() == abandoned {
			c.recycle()
			continue
		}
		live = append(live, c)
		bounded = bounded && !c.due.IsZero()
		if c.due.After(due) {
			due = c.due
		}
	}
	clear(s.batch[len(live):])
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if bounded && (s.ln.t.cl.bounded || s.ln.failing()) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, due)
		defer cancel()
	}
	s.ln.roundTrip(ctx, &s.trip, live)
	clear(live)
}
