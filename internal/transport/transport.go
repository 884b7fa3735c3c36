// Package transport carries script calls to Redis and their replies back:
// each call bounded by its caller's timeout and context whatever Redis
// does, sent at most once, the calls that wait for one server sent
// together, and decisions failed at once while a server keeps failing.
//
// One call's way, in this file: Transport.Run → the lane of the server
// that holds its keys → sent from the caller's goroutine when the lane is
// free (direct), else queued for a sender goroutine (senders.go), which
// takes what waits as one round trip → trip.go (one round trip: how its
// calls are laid out, sent, and sent again when Redis refused them
// without running them) → the reply, or the error, handed back to the
// caller. A lane's breaker (at the end of this file) fails calls at once
// while its server keeps failing; nodes.go keeps the lanes of a Cluster's
// or Ring's nodes; errors.go says which errors are the server's failure
// and which a call's own.
//
// The transport reaches Redis through the go-redis methods it names in
// small interfaces (client.go), so a client of one's own that has them
// (a wrapper with instrumentation, say) gets the same batching and lanes
// as go-redis's.
package transport

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/wire"
)

// Config is what New reads. The zero value of each field but Log and the
// two errors is a default.
type Config struct {
	Batch        int           // the most calls in one round trip; 0: 128
	Senders      int           // the most round trips in flight per server, and sender goroutines; 0: 4
	BatchScript  bool          // a round trip to one server is one script call (wire.Batch), else one per call
	BreakerAfter time.Duration // how long calls fail before the breaker opens; 0: never
	Linger       time.Duration // how long an idle sender waits for work before it stops; 0: a second
	Log          *slog.Logger  // where the breaker and the layout changes log; not nil
	// ErrTimeout and ErrUnavailable are wrapped by the errors of calls that
	// outlived their timeout, and of calls refused at once (an open
	// breaker, a full queue): the caller's sentinels, which its users test
	// with errors.Is.
	ErrTimeout, ErrUnavailable error
}

// Defaults.
const (
	defaultBatch   = 128 // most calls in one round trip
	defaultSenders = 4   // most round trips in flight per lane, and sender goroutines
)

// Transport carries calls on one client. It is safe for concurrent use.
type Transport struct {
	cl      client
	batch   int           // most calls per round trip
	senders int           // most round trips in flight per lane
	queued  int           // most calls waiting for a sender, per lane
	linger  atomic.Int64  // a sender without work stops after it (a time.Duration)
	after   time.Duration // the breakers' Config.BreakerAfter
	log     *slog.Logger
	errs    sentinels
	dials   dialWatch // the last failed dial of the client's connections

	main       *lane         // a single server's, or calls no node was found for
	lanes      sync.Map      // *redis.Client -> *lane
	goneOpens  atomic.Uint64 // the breaker openings of lanes forgotten
	forgetting sync.Mutex    // held while a lane is forgotten, and by Stats
	warm       warming       // a Cluster client's first slot-map load (nodes.go)
	reloadedAt atomic.Int64  // unix ns of the last slot-map reload asked
}

// sentinels are Config's errors, and errQueueFull made from them.
type sentinels struct {
	timeout, unavailable, queueFull error
}

// New returns a Transport of the calls of rdb. It starts no goroutine and
// does no I/O; it adds a hook to rdb, when rdb takes hooks, that
// remembers the last failed dial (errors.go).
func New(rdb redis.Scripter, c Config) *Transport {
	t := &Transport{batch: c.Batch, senders: c.Senders, after: max(0, c.BreakerAfter), log: c.Log,
		errs: newSentinels(c.ErrTimeout, c.ErrUnavailable)}
	if t.batch <= 0 {
		t.batch = defaultBatch
	}
	if t.senders <= 0 {
		t.senders = defaultSenders
	}
	t.queued = max(t.batch*t.senders*queuePerSender, 1024)
	t.linger.Store(int64(senderLinger))
	if c.Linger > 0 {
		t.linger.Store(int64(c.Linger))
	}
	t.cl.init(rdb, t.batch, c.BatchScript)
	if h, ok := rdb.(hooker); ok {
		h.AddHook(&t.dials)
	}
	t.warm.cold.Store(t.cl.route != nil && t.cl.reload != nil) // a Cluster's: no slot map yet
	t.main = t.newLane(nil)
	return t
}

// Call is one script run (a decision, a settlement, a reset): its script,
// kind, keys and arguments. Get one with NewCall; Run takes it.
type Call struct {
	Script *wire.Script
	// Kind is wire.Decide or wire.Settle for a call that may go in a batch
	// (Args are then its ARGV after its kind), "" for one that goes alone
	// (Args are its whole ARGV).
	Kind string
	Keys []string // KEYS; the first names the server and the hash tag
	Args []any
	// Members bounds what the call may add to or take from sorted sets
	// (log entries, slots): a batch carries at most MaxMembers in all, so
	// that no script call holds Redis long.
	Members int

	due   time.Time // when its caller stops waiting; zero: never
	tries int       // times sent again while its slot's keys move (requeue)
	reply []int64
	err   error
	done  chan struct{} // receives once the answer is in
	state atomic.Int32  // waiting, answered or abandoned
}

// MaxMembers bounds the sorted-set members a batch script call adds or
// removes in all (Call.Members).
const MaxMembers = 10_000

const (
	waiting int32 = iota
	answered
	abandoned // the caller left; whoever sees this last recycles the call
)

// calls are Calls, pooled with their channel and slices. pays:
// TestDecisionAllocations, 7 → 11 allocations a decision alone and 2 → 6
// batched without the pool (docs/performance.md, issue 33).
var calls = sync.Pool{New: func() any {
	return &Call{done: make(chan struct{}, 1), Keys: make([]string, 0, 4), Args: make([]any, 0, 16)}
}}

// NewCall returns a Call of s on keys, of kind (wire.Decide, wire.Settle,
// or "" for a call that goes alone), from a pool; its Args are empty, for
// the caller to append to. Give it to Run.
func NewCall(s *wire.Script, kind string, keys ...string) *Call {
	c := calls.Get().(*Call)
	c.Script, c.Kind, c.Keys = s, kind, append(c.Keys[:0], keys...)
	return c
}

// recycle returns the call to the pool. Only its last owner calls it.
func (c *Call) recycle() {
	clear(c.Keys) // drop references to the keys and the arguments
	clear(c.Args)
	c.Keys, c.Args = c.Keys[:0], c.Args[:0]
	c.Script, c.Kind, c.reply, c.err = nil, "", nil, nil
	c.due, c.tries, c.Members = time.Time{}, 0, 0
	c.state.Store(waiting)
	calls.Put(c)
}

// answer hands the result to the caller, or recycles the call if the
// caller has left.
func (c *Call) answer(reply []int64, err error) {
	c.reply, c.err = reply, err
	if c.state.CompareAndSwap(waiting, answered) {
		c.done <- struct{}{}
		return
	}
	c.recycle()
}

// Run sends c through its server's lane and returns its reply, waiting at
// most timeout (none when it is 0) and no longer than ctx. It takes c: c
// must not be used after. An error wraps Config.ErrTimeout (and
// context.DeadlineExceeded) past the timeout, the context's error if it
// ended first, or Config.ErrUnavailable when the call was refused unsent.
func (t *Transport) Run(ctx context.Context, c *Call, timeout time.Duration) ([]int64, error) {
	var limit time.Time // the timeout's
	if timeout > 0 {
		limit = time.Now().Add(timeout)
	}
	c.due = limit
	if d, ok := ctx.Deadline(); ok && (c.due.IsZero() || d.Before(c.due)) {
		c.due = d
	}
	ln := t.lane(ctx, c.Keys[0], c.due)
	if err := ln.breaker.admit(); err != nil {
		c.recycle()
		return nil, err
	}
	reply, err := ln.do(ctx, c, timeout, limit)
	switch {
	case err == nil:
		ln.breaker.success()
	case !IsTimeout(err) && (ctx.Err() != nil || ctxDeadline(err)):
		// the caller left: not Redis's failure
	default:
		ln.failed(err)
	}
	return reply, err
}

// Stats is what a Transport's lanes are doing: their breakers, and how
// busy they are.
type Stats struct {
	BreakerOpen  bool   // a lane's breaker is open now
	BreakerOpens uint64 // breakers opened, every lane's
	Lanes        int    // lanes of Cluster or Ring nodes (not counting the main one)
	Senders      int    // sender goroutines running
	Queued       int    // calls waiting for a sender
}

// Stats returns the Transport's Stats. It is safe for concurrent use.
func (t *Transport) Stats() Stats {
	t.forgetting.Lock()
	defer t.forgetting.Unlock()
	s := Stats{BreakerOpens: t.goneOpens.Load()}
	t.eachLane(func(ln *lane) {
		s.BreakerOpen = s.BreakerOpen || ln.breaker.open.Load()
		s.BreakerOpens += ln.breaker.opens.Load() // after open: an open breaker's opening is counted
		if ln.node != nil {
			s.Lanes++
		}
		ln.mu.Lock()
		s.Senders += ln.alive
		s.Queued += len(ln.queue)
		ln.mu.Unlock()
	})
	return s
}

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
//
// Both pay (bench/cmd/compare, issue 33, docs/performance.md): batching
// against a batch of one, 16 and 128 goroutines, 1.6–6× the decisions a
// second; direct against queued, core-ctxtimeout at one goroutine,
// 0.33–0.55 → 0.59–0.87× a bare EVALSHA and 37–44 % less CPU.

// causeMaxAge: a lane's last error this recent is named as a timeout's cause.
const causeMaxAge = 2 * time.Second

// lane is the work for one Redis server: its queue, senders and breaker.
type lane struct {
	t       *Transport
	node    *redis.Client // the node on a Cluster or Ring; nil: the Transport's client
	breaker breaker
	busy    atomic.Int32 // round trips in flight, a sender's or a direct caller's
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
// queued call would otherwise allocate one. pays: TestDecisionAllocations,
// 7 → 10 allocations a queued decision alone and 2 → 5 batched with
// time.NewTimer (docs/performance.md, issue 33).
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
	case ln.t.cl.bounded && !c.due.IsZero() && ln.queueEmpty() && ln.busy.CompareAndSwap(0, 1): // free
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

// queueEmpty reports whether no call of ln waits for a sender, under the
// lane's lock (a copy of the length read without it did not pay:
// docs/performance.md, issue 33).
func (ln *lane) queueEmpty() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.queue) == 0
}

// trips are the work spaces of direct callers' round trips, pooled. pays:
// TestDecisionAllocations, 12 → 22 allocations a direct decision with a
// new trip each (docs/performance.md, issue 33).
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
	if len(t.resent) > 0 { // a method value allocates, 7 → 8 a decision: only when needed
		t.requeue(ln.submit)
	}
	t.reset()
}

// Breaker settings.
const (
	defaultBreakerAfter  = 500 * time.Millisecond // how long decisions must fail before it opens (WithBreaker)
	breakerMinFailures   = 3                      // failed decisions in a row, at least, that open it
	breakerProbeInterval = 250 * time.Millisecond // how often an open breaker probes Redis
	breakerProbeIdle     = 2 * time.Second        // an open breaker nobody asked for this long stops probing
	breakerProbeTimeout  = time.Second            // bounds a probe (go-redis's own timeouts may bound it later)
)

// breaker fails decisions fast while one Redis server keeps failing; there
// is one per lane. It opens once decisions have failed (an
// error or a timeout) for `after` with no success in between, and at least
// breakerMinFailures of them. While open, every decision fails at once with
// ErrUnavailable, and the breaker probes the server itself, in a goroutine
// of its own, every breakerProbeInterval (lane.probe): no caller's decision
// waits on a server that is down. The first probe answered closes it. The
// prober stops when nobody has asked the breaker for breakerProbeIdle, and
// starts again with the next decision. A caller's own context ending is not
// Redis's failure and counts for nothing. Time is the process's clock, not
// the Limiter's: the breaker is about waiting, which happens in real time.
type breaker struct {
	after  time.Duration                   // 0: never open
	log    *slog.Logger                    //
	where  string                          // " at ADDR" on a Cluster or Ring, for messages
	probe  func(ctx context.Context) error // asks the server whether it answers
	probed func()                          // after each failed probe (a Cluster's slot map reload)
	// unavailable is Config.ErrUnavailable, which an open breaker's
	// answers wrap
	unavailable error

	open    atomic.Bool   // read by every decision without the lock
	opens   atomic.Uint64 // times it opened; read by metrics without the lock
	probing atomic.Bool   // a prober runs
	asked   atomic.Int64  // unix ns of the last decision the open breaker refused
	err     atomic.Pointer[error]

	mu       sync.Mutex
	failures int       // in a row
	since    time.Time // the first failure in the row
}

// admit returns nil if a decision may go to Redis now, or else the error
// to answer with at once; it makes sure an open breaker probes.
func (b *breaker) admit() error {
	if !b.open.Load() {
		return nil
	}
	b.asked.Store(time.Now().UnixNano())
	err := b.err.Load()
	if !b.open.Load() { // closed meanwhile
		return nil
	}
	if b.probing.CompareAndSwap(false, true) {
		go b.prober()
	}
	return *err
}

// prober probes the server every breakerProbeInterval until a probe is
// answered, which closes the breaker, or nobody asked for breakerProbeIdle.
func (b *breaker) prober() {
	for {
		time.Sleep(breakerProbeInterval)
		if time.Since(time.Unix(0, b.asked.Load())) > breakerProbeIdle {
			b.probing.Store(false)
			// A decision may have been refused between the check and the
			// store, and seen a prober running: take over again if so.
			if time.Since(time.Unix(0, b.asked.Load())) > breakerProbeIdle || !b.probing.CompareAndSwap(false, true) {
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), breakerProbeTimeout)
		err := b.probe(ctx)
		cancel()
		if err == nil {
			b.success()
			b.probing.Store(false)
			return
		}
		b.mu.Lock()
		b.setErr(time.Since(b.since), fmt.Errorf("a probe: %w", err))
		b.mu.Unlock()
		if b.probed != nil {
			b.probed()
		}
	}
}

// success records a decision or a probe Redis answered.
func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	if b.open.Load() {
		b.open.Store(false)
		b.log.Info("redlimit: Redis answers again; decisions resume", "where", b.where)
	}
}

// failure records a decision that failed with err at now.
func (b *breaker) failure(now time.Time, err error) {
	if b.after <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open.Load() {
		return
	}
	if b.failures++; b.failures == 1 {
		b.since = now
	}
	failing := now.Sub(b.since)
	if b.failures < breakerMinFailures || failing < b.after {
		return
	}
	b.setErr(failing, err)
	b.opens.Add(1) // first, so that whoever sees it open then counts this opening
	b.open.Store(true)
	b.log.Warn("redlimit: Redis is failing; decisions fail fast until a probe succeeds",
		"where", b.where, "failing_for", failing.Round(time.Millisecond), "failures", b.failures,
		"probe_every", breakerProbeInterval, "error", err)
}

// setErr sets what an open breaker answers: the last error's text, not the
// error, since a decision answered at once is not, say, a timeout. The
// caller holds b.mu.
func (b *breaker) setErr(failing time.Duration, last error) {
	err := fmt.Errorf("%w: every decision failed for %v, the last with: %v",
		b.unavailable, failing.Round(time.Millisecond), last)
	if b.where != "" {
		err = fmt.Errorf("%w: Redis%s has failed for %v, the last with: %v",
			b.unavailable, b.where, failing.Round(time.Millisecond), last)
	}
	b.err.Store(&err)
}
