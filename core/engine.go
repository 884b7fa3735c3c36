package core

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The engine carries script calls to Redis and their answers back.
//
// Callers never wait on I/O they cannot leave: a caller queues a call and
// waits for its answer, its timeout or its context, whichever comes first,
// so a Redis that hangs cannot hold it past its bound (go-redis bounds its
// own reads by ReadTimeout, seconds, unless the client enables context
// deadlines). The I/O is done by senders: at most `senders` goroutines per
// Limiter, started when work arrives and none is idle, and stopped after
// `linger` without work. A sender takes everything queued (up to `batch`
// calls) and sends it in one round trip (transport.go); what arrives
// meanwhile waits for the next free sender. So an idle Limiter sends a call
// at once, and a busy one shares round trips.
//
// A client whose commands go-redis bounds by their context's deadline
// (ContextTimeoutEnabled) lets a caller do its own I/O without outliving
// its timeout: then, while no round trip is in flight, a caller sends its
// call itself (direct), saving the hand-off to a sender and back, which
// costs a wake-up on another core. Under load it queues like any other.
type engine struct {
	transport
	batch   int           // most calls per round trip
	senders int           // most round trips in flight
	queued  int           // most calls waiting for a sender
	linger  time.Duration // a sender without work stops after it
	direct  bool          // the client bounds a command by its context's deadline

	trips sync.Pool    // of *trip, for direct callers
	busy  atomic.Int32 // round trips in flight, a sender's or a direct caller's
	mu    sync.Mutex
	queue []*call
	idle  []*sender // waiting for work, the most recent last
	alive int       // senders running
}

// Engine settings.
const (
	defaultBatchSize = 128         // most decisions in one round trip
	defaultPipelines = 4           // most round trips in flight, and I/O goroutines
	senderLinger     = time.Second // a sender without work waits this long, then stops
	queuePerSender   = 16          // the queue holds this many full batches per sender
)

// errQueueFull is returned at once when the queue is full.
var errQueueFull = fmt.Errorf("%w: too many decisions waiting for Redis", ErrUnavailable)

func newEngine(rdb redis.Scripter, batch, senders int, batchScript bool, log *slog.Logger) *engine {
	e := &engine{batch: batch, senders: senders, linger: senderLinger,
		queued: max(batch*senders*queuePerSender, 1024)}
	e.transport.init(rdb, batch, batchScript, log)
	e.direct = e.bounded
	e.trips.New = func() any { return new(trip) }
	return e
}

// timeoutError is the error of a call that outlived its timeout.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string {
	return fmt.Sprintf("redlimit: no answer from Redis within %v", e.d)
}

// Unwrap lets errors.Is find ErrTimeout and context.DeadlineExceeded.
func (e *timeoutError) Unwrap() []error { return []error{ErrTimeout, context.DeadlineExceeded} }

var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// do runs c and returns its reply, waiting at most timeout (none when it
// is 0) and no longer than ctx. It takes c: whatever happens, c is
// recycled once nobody needs it.
func (e *engine) do(ctx context.Context, c *call, timeout time.Duration) ([]int64, error) {
	if err := ctx.Err(); err != nil { // nobody waits for it: do not send it
		c.recycle()
		return nil, err
	}
	if e.direct && e.busy.CompareAndSwap(0, 1) {
		if _, bounded := ctx.Deadline(); timeout > 0 || bounded {
			return e.doDirect(ctx, c, timeout)
		}
		e.busy.Add(-1)
	}
	if err := e.submit(c); err != nil {
		c.recycle()
		return nil, err
	}
	var expired <-chan time.Time
	var due time.Time
	if timeout > 0 {
		due = time.Now().Add(timeout)
		t := timers.Get().(*time.Timer)
		t.Reset(timeout)
		defer func() {
			t.Stop() // since Go 1.23 a stopped timer delivers nothing stale
			timers.Put(t)
		}()
		expired = t.C
	}
	var err error
	select {
	case <-c.done:
	case <-expired:
		err = &timeoutError{timeout}
		// Both may have passed while this goroutine waited for a CPU: the
		// earlier one is the answer.
		if d, ok := ctx.Deadline(); ok && d.Before(due) {
			err = context.DeadlineExceeded
		}
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		if c.state.CompareAndSwap(waiting, abandoned) {
			return nil, err // the sender recycles c when its answer comes
		}
		<-c.done // answered meanwhile: take the answer after all
	}
	reply, err := c.reply, c.err
	c.recycle()
	return reply, err
}

// doDirect sends c from the caller's goroutine, go-redis bounding it by the
// timeout or ctx's deadline, whichever is earlier. A cancellation without a
// deadline is seen when the round trip ends, at the latest at the timeout.
// It takes c, and ends the round trip do began.
func (e *engine) doDirect(ctx context.Context, c *call, timeout time.Duration) ([]int64, error) {
	defer e.busy.Add(-1)
	dctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	t := e.trips.Get().(*trip)
	t.one[0] = c
	t.run(dctx, &e.transport, t.one[:])
	u := &t.units[0] // one call: one unit of its own
	reply, err := u.reply, u.err
	t.reset()
	t.one[0] = nil
	e.trips.Put(t)
	c.recycle()
	// go-redis gave up at the deadline: its socket deadline can fire a
	// moment before the context's own timer, so the clock decides too.
	deadline, _ := dctx.Deadline()
	if err != nil && (dctx.Err() != nil || !time.Now().Before(deadline)) {
		if err = ctx.Err(); err == nil {
			err = &timeoutError{timeout}
		}
	}
	return reply, err
}

// submit queues c, and wakes an idle sender or starts one if none is busy
// enough to take it next.
func (e *engine) submit(c *call) error {
	e.mu.Lock()
	if len(e.queue) >= e.queued {
		e.mu.Unlock()
		return errQueueFull
	}
	e.queue = append(e.queue, c)
	if n := len(e.idle); n > 0 {
		s := e.idle[n-1]
		e.idle[n-1] = nil
		e.idle = e.idle[:n-1]
		e.mu.Unlock()
		s.wake <- struct{}{}
		return nil
	}
	if e.alive < e.senders {
		e.alive++
		e.mu.Unlock()
		s := &sender{e: e, wake: make(chan struct{}, 1)}
		go s.run()
		return nil
	}
	e.mu.Unlock()
	return nil
}

// sender is one goroutine that runs queued calls, one round trip at a time.
type sender struct {
	e     *engine
	wake  chan struct{} // one value when an idle sender is handed work
	batch []*call
	trip  trip
}

// run takes batches until there has been no work for the engine's linger.
func (s *sender) run() {
	e := s.e
	timer := time.NewTimer(e.linger)
	defer timer.Stop()
	for {
		e.mu.Lock()
		if len(e.queue) == 0 {
			e.idle = append(e.idle, s)
			linger := e.linger
			e.mu.Unlock()
			timer.Reset(linger)
			select {
			case <-s.wake:
				timer.Stop()
				continue
			case <-timer.C:
			}
			e.mu.Lock()
			if i := indexOf(e.idle, s); i >= 0 { // nobody handed us work: stop
				e.idle = append(e.idle[:i], e.idle[i+1:]...)
				e.alive--
				e.mu.Unlock()
				return
			}
			e.mu.Unlock()
			<-s.wake // handed work just now; the wake is on its way
			continue
		}
		if len(e.queue) <= e.batch { // take it all: swap buffers
			s.batch, e.queue = e.queue, s.batch[:0]
		} else {
			s.batch = append(s.batch[:0], e.queue[:e.batch]...)
			rest := copy(e.queue, e.queue[e.batch:])
			clear(e.queue[rest:])
			e.queue = e.queue[:rest]
		}
		e.mu.Unlock()
		e.busy.Add(1)
		s.send()
		e.busy.Add(-1)
	}
}

func indexOf(senders []*sender, s *sender) int {
	for i, x := range senders {
		if x == s {
			return i
		}
	}
	return -1
}

// send runs the batch and answers every call in it. Calls whose callers
// left while they were queued are dropped unsent: they never reach Redis.
func (s *sender) send() {
	live := s.batch[:0]
	for _, c := range s.batch {
		if c.state.Load() == abandoned {
			c.recycle()
			continue
		}
		live = append(live, c)
	}
	clear(s.batch[len(live):])
	if len(live) > 0 {
		s.trip.run(context.Background(), &s.e.transport, live)
		s.trip.answer()
		s.trip.reset()
	}
	clear(live)
}
