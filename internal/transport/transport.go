// Package transport carries script calls to Redis and their replies back:
// each call bounded by its caller's timeout and context whatever Redis
// does, sent at most once, the calls that wait for one server sent
// together, and decisions failed at once while a server keeps failing.
//
// One call's way: Transport.Run → the lane of the server that holds its
// keys (lane.go: sent from the caller's goroutine when the lane is free,
// else queued for a sender goroutine, which takes what waits as one round
// trip) → trip.go (one round trip: how its calls are laid out, sent, and
// sent again when Redis refused them without running them) → the reply,
// or the error, handed back to the caller. breaker.go fails calls at once
// while a server keeps failing; errors.go says which errors are the
// server's failure and which a call's own.
//
// The transport reaches Redis through the go-redis methods it names in
// small interfaces (client.go), so a client of one's own that has them
// (a wrapper with instrumentation, say) gets the same batching and lanes
// as go-redis's.
package transport

import (
	"context"
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
	warm       warming       // a Cluster client's first slot-map load (lane.go)
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
