package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The engine carries script calls to Redis and their answers back, each
// bounded by its caller's timeout and context whatever Redis does.
//
// A lane is the work for one Redis server: a single server has one; on a
// Cluster or Ring each node serving the keys has its own (queue, senders,
// breaker), so a node that hangs or fails delays and fails only the
// decisions on its keys.
//
// Direct when free, batched when not. On a client whose commands go-redis
// bounds by their context's deadline (ContextTimeoutEnabled), a call whose
// lane has nothing queued and no round trip in flight is sent by its
// caller (direct): one EVALSHA, no hand-off. Every other call is queued
// and its caller waits for its answer, its timeout or its context,
// whichever comes first. Senders (at most `senders` goroutines per lane,
// started when work arrives and none is idle, stopped after `linger`
// without work) take everything queued, up to `batch` calls, as one round
// trip (transport.go). So batches grow with load. Without
// ContextTimeoutEnabled go-redis bounds a read only by its ReadTimeout
// (seconds), so every call is queued: only a sender's wait can be left.
type carrier struct {
	transport
	batch   int           // most calls per round trip
	senders int           // most round trips in flight per lane
	queued  int           // most calls waiting for a sender, per lane
	linger  atomic.Int64  // a sender without work stops after it (a time.Duration)
	after   time.Duration // the breakers' WithBreaker
	log     *slog.Logger

	trips sync.Pool // of *trip, for direct callers

	// route returns the node serving key on a Cluster or Ring (nil
	// otherwise): its client's lane takes the call. reload asks a Cluster
	// client to reread the slot map, at most once per reloadEvery.
	route      func(ctx context.Context, key string) (*redis.Client, error)
	cold       atomic.Bool   // no lookup by route has succeeded yet (a Cluster's; lane)
	warmMu     sync.Mutex    // guards warmDone
	warmDone   chan struct{} // closed when the running lookup of waitWarm ends; nil: none runs
	reload     func()
	reloadedAt atomic.Int64  // unix ns of the last reload asked
	dials      dialWatch     // the last failed dial of the client's connections
	main       *lane         // a single server's, or calls no node was found for
	lanes      sync.Map      // *redis.Client -> *lane
	goneOpens  atomic.Uint64 // the breaker openings of lanes forgotten
	forgetting sync.Mutex    // held while a lane is forgotten, and by Stats
}

// Engine settings.
const (
	defaultBatchSize = 128                    // most decisions in one round trip
	defaultPipelines = 4                      // most round trips in flight per lane, and I/O goroutines
	senderLinger     = time.Second            // a sender without work waits this long, then stops
	queuePerSender   = 16                     // the queue holds this many full batches per sender
	reloadEvery      = 100 * time.Millisecond // a Cluster's slot map is reread at most this often on errors
)

// errQueueFull is returned at once when the queue is full.
var errQueueFull = fmt.Errorf("%w: too many decisions waiting for Redis", ErrUnavailable)

func newCarrier(rdb redis.Scripter, batch, senders int, batchScript bool, after time.Duration, log *slog.Logger) *carrier {
	e := &carrier{batch: batch, senders: senders, after: after, log: log,
		queued: max(batch*senders*queuePerSender, 1024)}
	e.linger.Store(int64(senderLinger))
	e.transport.init(rdb, batch, batchScript, log)
	if c, ok := rdb.(interface{ AddHook(redis.Hook) }); ok {
		c.AddHook(&e.dials)
	}
	e.trips.New = func() any { return new(trip) }
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		e.route = c.MasterForKey
		e.reload = func() { c.ReloadState(context.Background()) }
		e.cold.Store(true)
	case *redis.Ring:
		e.route = func(_ context.Context, key string) (*redis.Client, error) { return c.GetShardClientForKey(key) }
	}
	e.main = e.newLane(nil)
	return e
}

// lane returns the lane that carries calls on key. A Cluster client that
// has no slot map yet loads one at the first lookup, for seconds if its
// nodes hang, whatever the lookup's context says: until a lookup has
// succeeded, a goroutine of the carrier's looks up (waitWarm), and a
// caller waits for it until due, or takes the main lane, which the client
// routes itself.
func (e *carrier) lane(ctx context.Context, key string, due time.Time) *lane {
	switch {
	case e.route == nil:
		return e.main
	case e.cold.Load() && !e.waitWarm(ctx, key, due):
		return e.main
	}
	node, err := e.route(ctx, key)
	if err != nil || node == nil { // no slot map yet: the client finds the node
		return e.main
	}
	if ln, ok := e.lanes.Load(node); ok {
		return ln.(*lane)
	}
	ln, _ := e.lanes.LoadOrStore(node, e.newLane(node))
	return ln.(*lane)
}

// waitWarm waits, at most until due (none when zero) and no longer than
// ctx, for a lookup of key's node by a goroutine of the carrier's; it
// reports whether a lookup has succeeded.
func (e *carrier) waitWarm(ctx context.Context, key string, due time.Time) bool {
	e.warmMu.Lock()
	done := e.warmDone
	if done == nil {
		done = make(chan struct{})
		e.warmDone = done
		go func() {
			if node, err := e.route(context.Background(), key); err == nil && node != nil {
				e.cold.Store(false)
			}
			e.warmMu.Lock()
			e.warmDone = nil
			e.warmMu.Unlock()
			close(done)
		}()
	}
	e.warmMu.Unlock()
	var expired <-chan time.Time
	if !due.IsZero() {
		t := time.NewTimer(time.Until(due))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-done:
	case <-expired:
	case <-ctx.Done():
	}
	return !e.cold.Load()
}

// forget drops the lane of a node that has nothing to do, unless its
// breaker is open: a Cluster's or Ring's nodes may change over a process's
// life, and a lane holds its node's client. A decision that found the lane
// just before still runs on it; the next one makes a new lane.
func (e *carrier) forget(ln *lane) {
	if ln.node == nil || ln.breaker.open.Load() || ln.breaker.probing.Load() {
		return
	}
	e.forgetting.Lock() // Stats sees a lane's openings in the lane or in goneOpens, never both
	defer e.forgetting.Unlock()
	if e.lanes.CompareAndDelete(ln.node, ln) {
		e.goneOpens.Add(ln.breaker.opens.Load())
	}
}

// eachLane calls f for every lane.
func (e *carrier) eachLane(f func(*lane)) {
	f(e.main)
	e.lanes.Range(func(_, ln any) bool { f(ln.(*lane)); return true })
}

// reloadSoon asks a Cluster client to reread its slot map, at most once
// per reloadEvery: after a node failed, its slots may have a new master.
func (e *carrier) reloadSoon() {
	if e.reload == nil {
		return
	}
	now := time.Now().UnixNano()
	last := e.reloadedAt.Load()
	if now-last < int64(reloadEvery) || !e.reloadedAt.CompareAndSwap(last, now) {
		return
	}
	e.reload()
}

// lane is the work for one Redis server: its queue, senders and breaker.
type lane struct {
	e       *carrier
	node    *redis.Client // the node on a Cluster or Ring; nil: the engine's client
	breaker breaker
	busy    atomic.Int32 // round trips in flight, a sender's or a direct caller's
	qlen    atomic.Int32 // len(queue), read without the lock
	seen    atomic.Pointer[seenError]

	mu    sync.Mutex
	queue []*call
	idle  []*sender // waiting for work, the most recent last
	alive int       // senders running
}

// seenError is the last error a round trip of a lane ended with, or the
// refusal (TRYAGAIN) a call of it waits out, and when.
type seenError struct {
	err error
	at  time.Time
}

// causeMaxAge: a lane's last error this recent is named as a timeout's cause.
const causeMaxAge = 2 * time.Second

func (e *carrier) newLane(node *redis.Client) *lane {
	ln := &lane{e: e, node: node}
	ln.breaker = breaker{after: e.after, log: e.log, probe: ln.probe, probed: e.reloadSoon}
	if node != nil {
		ln.breaker.where = " at " + node.Options().Addr
	}
	return ln
}

// probe asks the lane's server whether it runs scripts, for an open
// breaker: EVAL of "return 1", which a server refuses as a decision would
// when it is down, busy (BUSY) or the user may not run scripts (NOPERM),
// and which go-redis does not retry, so that its error is the first one
// (connection refused), not a retry's running out of time.
func (ln *lane) probe(ctx context.Context) error {
	cmd := probeOnce{redis.NewCmd(ctx, "eval", "return 1", 0)}
	switch {
	case ln.node != nil:
		return ln.node.Process(ctx, cmd)
	case ln.e.process != nil:
		return ln.e.process(ctx, cmd)
	}
	return ln.e.rdb.Eval(ctx, "return 1", nil).Err()
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
	if ln.e.reload != nil && topologyError(err) {
		ln.e.reloadSoon()
	}
}

// failingCodes are the error replies that say the server cannot run
// decisions now, whatever they ask: it loads its data (LOADING), runs a
// script past its time limit (BUSY), has lost its master (MASTERDOWN) or
// its replicas (NOREPLICAS), is out of memory (OOM) or cannot save
// (MISCONF), has no room for another client, or refuses the Limiter's user
// (NOAUTH, WRONGPASS, NOPERM). They count toward the breaker, as do errors
// that are not replies (timeouts, refused or broken connections).
var failingCodes = []string{"LOADING", "BUSY", "MASTERDOWN", "NOREPLICAS", "OOM", "MISCONF",
	"max number of clients", "NOAUTH", "WRONGPASS", "NOPERM"}

// requestError reports whether err is the server's answer to what one call
// asked rather than a sign that it is failing: an error reply other than
// failingCodes and a Cluster's refusals (unrun), such as WRONGTYPE on a key
// that holds another type, or an error the script raised about its
// arguments (the calendar windows' check). Such an error is the caller's
// alone; it must not open the breaker and fail every other key's
// decisions with it.
func requestError(err error) bool {
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) || unrun(err) {
		return false
	}
	for _, code := range failingCodes {
		if redis.HasErrorPrefix(err, code) {
			return false
		}
	}
	return true
}

// topologyError reports whether err may mean that the slot map is stale: a
// node unreachable or slow, or refusing its slots.
func topologyError(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return !errors.Is(err, errQueueFull) // a timeout, a network error
	}
	return unrun(err) || refused(err, "MASTERDOWN")
}

// dialWatch is a go-redis hook that remembers the last failed dial of a
// client's connections (a refused connection, a name that does not
// resolve), which go-redis retries and then hides behind the caller's
// deadline: a decision that times out names it as the likely cause.
type dialWatch struct {
	last atomic.Pointer[dialFailure]
}

// dialFailure is a failed dial: its address, error and time.
type dialFailure struct {
	addr string
	err  error
	at   time.Time
}

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		switch {
		case err != nil && ctx.Err() == nil:
			w.last.Store(&dialFailure{addr, err, time.Now()})
		case err == nil && w.last.Load() != nil:
			w.last.Store(nil)
		}
		return conn, err
	}
}

func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// failed returns the error of the last dial to addr ("": to any address)
// if it failed within causeMaxAge, else nil.
func (w *dialWatch) failed(addr string) error {
	d := w.last.Load()
	if d == nil || addr != "" && d.addr != addr || time.Since(d.at) > causeMaxAge {
		return nil
	}
	return d.err
}

// unsentError is the error of a call that was not sent: its caller's
// context had ended before. It unwraps to the context's error.
type unsentError struct{ error }

func (e unsentError) Unwrap() error { return e.error }

// timeoutError is the error of a call that outlived its timeout; cause is
// the last error its lane saw, if recent.
type timeoutError struct {
	d     time.Duration
	cause error
	dial  bool // cause is a failed dial: the client could not connect
}

func (e *timeoutError) Error() string {
	if e.dial {
		return fmt.Sprintf("redlimit: could not reach Redis within %v: %v", e.d, e.cause)
	}
	if e.cause != nil {
		return fmt.Sprintf("redlimit: no answer from Redis within %v (it last failed with: %v)", e.d, e.cause)
	}
	return fmt.Sprintf("redlimit: no answer from Redis within %v", e.d)
}

// Unwrap lets errors.Is find ErrTimeout, context.DeadlineExceeded and the
// cause.
func (e *timeoutError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrTimeout, context.DeadlineExceeded, e.cause}
	}
	return []error{ErrTimeout, context.DeadlineExceeded}
}

// timedOut returns the error of a call of ln that outlived timeout, naming
// the lane's last error as its likely cause when it is recent.
func (ln *lane) timedOut(timeout time.Duration) error {
	if ln.failing() {
		return &timeoutError{timeout, ln.seen.Load().err, false}
	}
	if d := ln.e.dials.failed(ln.addr()); d != nil { // a server that refuses connections
		return &timeoutError{timeout, d, true}
	}
	return &timeoutError{d: timeout}
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
// than that time ran out.
func (ln *lane) saw(err error) {
	if err != nil { // no further: errors.As would allocate for every call
		ln.note(err)
	}
}

func (ln *lane) note(err error) {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || (errors.As(err, &ne) && ne.Timeout()) || requestError(err) {
		return
	}
	ln.seen.Store(&seenError{err, time.Now()})
}

var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// run sends c through its lane's breaker and returns its reply, waiting
// at most timeout (none when it is 0) and no longer than ctx. It takes c.
func (e *carrier) run(ctx context.Context, c *call, timeout time.Duration) ([]int64, error) {
	var limit time.Time // the timeout's
	if timeout > 0 {
		limit = time.Now().Add(timeout)
	}
	c.due = limit
	if d, ok := ctx.Deadline(); ok && (c.due.IsZero() || d.Before(c.due)) {
		c.due = d
	}
	ln := e.lane(ctx, c.keys[0], c.due)
	if err := ln.breaker.admit(); err != nil {
		c.recycle()
		return nil, err
	}
	reply, err := ln.do(ctx, c, timeout, limit)
	switch {
	case err == nil:
		ln.breaker.success()
	case !errors.Is(err, ErrTimeout) && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)):
		// the caller left: not Redis's failure
	default:
		ln.failed(err)
	}
	return reply, err
}

// do sends c, from the caller's goroutine when the lane is free (direct),
// else through the queue, and waits for its answer, its timeout (which
// ends at limit) or ctx, whichever comes first. It takes c: whatever
// happens, c is recycled once nobody needs it.
func (ln *lane) do(ctx context.Context, c *call, timeout time.Duration, limit time.Time) ([]int64, error) {
	if err := ctx.Err(); err != nil { // nobody waits for it: do not send it
		c.recycle()
		return nil, unsentError{err}
	}
	switch {
	case ln.e.bounded && !c.due.IsZero() && ln.qlen.Load() == 0 && ln.busy.CompareAndSwap(0, 1): // free
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
func (ln *lane) answer(ctx context.Context, c *call, timeout time.Duration) ([]int64, error) {
	reply, err, due := c.reply, c.err, c.due
	c.recycle()
	if err != nil && !errors.Is(err, ErrTimeout) && !due.IsZero() &&
		(errors.Is(err, context.DeadlineExceeded) || !time.Now().Before(due) && !requestError(err)) {
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
func (ln *lane) direct(ctx context.Context, c *call) {
	if d, ok := ctx.Deadline(); !ok || d.After(c.due) {
		dc := untilDue(ctx, c.due)
		defer dc.end()
		ctx = dc
	}
	t := ln.e.trips.Get().(*trip)
	t.one[0] = c
	ln.roundTrip(ctx, t, t.one[:])
	t.one[0] = nil
	ln.e.trips.Put(t)
	ln.busy.Add(-1)
}

// dueCtx is a round trip's context, the caller's (a sender's: none)
// ending at due: pooled with its channel and timer, where
// context.WithDeadline costs five allocations. The caller's cancellation
// shows in Err, not Done; go-redis reads both only while it waits for a
// connection. It is valid for its round trip only.
type dueCtx struct {
	context.Context
	due   time.Time
	done  chan struct{} // closed at due
	timer *time.Timer
}

var dueCtxs sync.Pool

func untilDue(parent context.Context, due time.Time) *dueCtx {
	c, _ := dueCtxs.Get().(*dueCtx)
	if c == nil {
		c = &dueCtx{done: make(chan struct{})}
		c.timer = time.AfterFunc(time.Hour, func() { close(c.done) })
	}
	c.Context, c.due = parent, due
	c.timer.Reset(time.Until(due))
	return c
}

func (c *dueCtx) Deadline() (time.Time, bool) { return c.due, true }
func (c *dueCtx) Done() <-chan struct{}       { return c.done }
func (c *dueCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.due) {
		return context.DeadlineExceeded
	}
	return nil
}

// end releases c: back to the pool unless its timer fired.
func (c *dueCtx) end() {
	if c.timer.Stop() {
		c.Context = nil
		dueCtxs.Put(c)
	}
}

// roundTrip sends calls in one round trip bounded by ctx and answers each
// one, or has it sent again later (requeue).
func (ln *lane) roundTrip(ctx context.Context, t *trip, calls []*call) {
	t.run(ctx, &ln.e.transport, calls)
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
func (ln *lane) submit(c *call) error {
	ln.mu.Lock()
	if len(ln.queue) >= ln.e.queued {
		ln.mu.Unlock()
		return errQueueFull
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
	if ln.alive < ln.e.senders {
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
	batch []*call
	trip  trip
}

// run takes batches until there has been no work for the engine's linger.
func (s *sender) run() {
	ln := s.ln
	timer := time.NewTimer(time.Duration(ln.e.linger.Load()))
	defer timer.Stop()
	for {
		ln.mu.Lock()
		if len(ln.queue) == 0 {
			ln.idle = append(ln.idle, s)
			ln.mu.Unlock()
			timer.Reset(time.Duration(ln.e.linger.Load()))
			select {
			case <-s.wake:
				timer.Stop()
				continue
			case <-timer.C:
			}
			ln.mu.Lock()
			if i := slices.Index(ln.idle, s); i >= 0 { // nobody handed us work: stop
				ln.idle = append(ln.idle[:i], ln.idle[i+1:]...)
				ln.alive--
				idle := ln.alive == 0 && len(ln.queue) == 0
				ln.mu.Unlock()
				if idle {
					ln.e.forget(ln)
				}
				return
			}
			ln.mu.Unlock()
			<-s.wake // handed work just now; the wake is on its way
			continue
		}
		if batch := ln.e.batch; len(ln.queue) <= batch { // take it all: swap buffers
			s.batch, ln.queue = ln.queue, s.batch[:0]
		} else {
			s.batch = append(s.batch[:0], ln.queue[:batch]...)
			rest := copy(ln.queue, ln.queue[batch:])
			clear(ln.queue[rest:])
			ln.queue = ln.queue[:rest]
		}
		ln.qlen.Store(int32(len(ln.queue)))
		ln.mu.Unlock()
		ln.busy.Add(1)
		s.send()
		ln.busy.Add(-1)
	}
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
	var ctx context.Context = context.Background()
	if bounded && (s.ln.e.bounded || s.ln.failing()) {
		dc := untilDue(ctx, due)
		defer dc.end()
		ctx = dc
	}
	s.ln.roundTrip(ctx, &s.trip, live)
	clear(live)
}
