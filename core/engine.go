package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The engine carries script runs to Redis and their answers back.
//
// Callers never do I/O themselves: a caller queues a call and waits for its
// answer, its timeout or its context, whichever comes first, so a Redis that
// hangs cannot hold it past its bound (go-redis bounds its own reads with
// its ReadTimeout, seconds, unless the client enables context deadlines).
// The I/O is done by senders: at most `senders` goroutines per Limiter,
// started when work arrives and none is idle, and stopped after a second
// without work. A sender takes everything queued (up to `batch` calls) and
// sends it in one round trip, a pipeline; what arrives meanwhile waits for
// the next free sender. So an idle Limiter sends a call at once, and a busy
// one shares round trips.
//
// A client whose commands go-redis bounds by their context's deadline
// (ContextTimeoutEnabled) lets a caller do its own I/O without outliving
// its timeout: then, while no round trip is in flight, a caller sends its
// decision itself (direct), saving the hand-off to a sender and back,
// which costs a wake-up on another core. Batching under load is the same.
//
// A batch for a single server (a *redis.Client) goes as one call of the
// batch script, which makes each decision in turn, rather than a pipeline
// of one call per decision: the server's cost per call (parsing, finding
// the script, setting up its KEYS and ARGV, the clock) is then paid once.
// On a Cluster or Ring, decisions of one hash tag in a batch (a hot key)
// go as one call of the batch script in the pipeline.
//
// Every command is sent at most once: go-redis retries commands after
// network errors, which would run a decision twice if the first run's reply
// was lost, so each command says NoRetry. The one retry is NOSCRIPT (the
// server does not have the script; it did not run): the call is sent again
// with EVAL and the script's source.
type engine struct {
	rdb     redis.Scripter
	pipe    func() redis.Pipeliner                   // nil when rdb cannot pipeline
	process func(context.Context, redis.Cmder) error // nil when rdb has no Process
	batch   int                                      // most calls per round trip
	senders int                                      // most round trips in flight
	queued  int                                      // most calls waiting for a sender
	linger  time.Duration                            // a sender without work stops after it
	direct  bool                                     // rdb bounds a command by its context's deadline
	log     *slog.Logger

	oneCall atomic.Bool // a batch goes as one call of batchScript (a single server)
	byTag   bool        // calls that share a hash tag go as one call of batchScript

	busy  atomic.Int32 // round trips in flight, a sender's or a direct caller's
	mu    sync.Mutex
	queue []*call
	idle  []*sender // waiting for work, the most recent last
	alive int       // senders running
}

// Engine defaults.
const (
	// DefaultBatchSize is the most decisions sent in one round trip unless
	// WithBatchSize says otherwise.
	DefaultBatchSize = 128
	// DefaultPipelines is the most round trips a Limiter has in flight at
	// once unless WithPipelines says otherwise.
	DefaultPipelines = 4
	// senderLinger is how long a sender without work waits before it stops.
	senderLinger = time.Second
	// queuePerSender bounds the queue: this many full batches per sender.
	queuePerSender = 16
)

// errQueueFull is returned at once when the queue is full.
var errQueueFull = fmt.Errorf("%w: too many decisions waiting for Redis", ErrUnavailable)

func newEngine(rdb redis.Scripter, batch, senders int, batchScript bool, log *slog.Logger) *engine {
	e := &engine{rdb: rdb, batch: batch, senders: senders, linger: senderLinger,
		queued: max(batch*senders*queuePerSender, 1024), log: log}
	if p, ok := rdb.(interface{ Pipeline() redis.Pipeliner }); ok && batch > 1 {
		e.pipe = p.Pipeline
	}
	if p, ok := rdb.(interface {
		Process(context.Context, redis.Cmder) error
	}); ok {
		e.process = p.Process
		e.direct = contextBounded(rdb)
	}
	if batchScript && e.pipe != nil && e.process != nil {
		switch rdb.(type) {
		case *redis.Client:
			e.oneCall.Store(true)
		case *redis.ClusterClient, *redis.Ring:
			e.byTag = true
		}
	}
	return e
}

// contextBounded reports whether go-redis bounds rdb's commands by their
// context's deadline (ContextTimeoutEnabled); otherwise only its own
// socket timeouts bound them.
func contextBounded(rdb redis.Scripter) bool {
	switch c := rdb.(type) {
	case interface{ Options() *redis.Options }: // Client, and Sentinel's failover client
		return c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.ClusterOptions }:
		return c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.RingOptions }:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// call is one script run: the Limiter fills it, a sender runs it, done
// carries the answer back. Calls are pooled, with their argument lists.
type call struct {
	script *script
	args   []any // EVALSHA|EVAL, sha|source, numkeys, KEYS..., ARGV...

	reply []int64
	err   error
	done  chan struct{} // receives once the answer is in
	state atomic.Int32  // waiting, answered or abandoned
}

const (
	waiting int32 = iota
	answered
	abandoned // the caller left; whoever sees this last recycles the call
)

var calls = sync.Pool{New: func() any {
	return &call{done: make(chan struct{}, 1), args: make([]any, 0, 16)}
}}

// newCall returns a call of s with keys KEYS to come: the caller appends
// them to args, then the ARGV.
func newCall(s *script, keys int) *call {
	c := calls.Get().(*call)
	c.script = s
	c.args = append(c.args[:0], "evalsha", s.shaArg, keys)
	return c
}

// recycle returns the call to the pool. Only its last owner calls it.
func (c *call) recycle() {
	clear(c.args) // drop references to the key and the script
	c.args = c.args[:0]
	c.script, c.reply, c.err = nil, nil, nil
	c.state.Store(waiting)
	calls.Put(c)
}

// answer hands the result to the caller, or recycles the call if the
// caller has left.
func (c *call) answer(reply []int64, err error) {
	c.reply, c.err = reply, err
	if c.state.CompareAndSwap(waiting, answered) {
		c.done <- struct{}{}
		return
	}
	c.recycle()
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

// do queues c and waits for its answer, at most timeout (none when it is
// 0) and no longer than ctx. It takes c: whatever happens, c is recycled
// once nobody needs it.
func (e *engine) do(ctx context.Context, c *call, timeout time.Duration) ([]int64, error) {
	if err := ctx.Err(); err != nil { // nobody waits for it: do not send it
		c.recycle()
		return nil, err
	}
	if e.direct && e.busy.CompareAndSwap(0, 1) {
		_, bounded := ctx.Deadline()
		if timeout > 0 || bounded {
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
	e.runOne(dctx, c)
	reply, err := c.reply, c.err
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
		if e.pipe != nil {
			s.pipe = e.pipe()
		}
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
	pipe  redis.Pipeliner
	batch []*call
	units []unit
	todo  []*unit
	cmds  []redis.Cmder
	args  []any // the batch script calls' arguments
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
	e := s.e
	live := s.batch[:0]
	for _, c := range s.batch {
		if c.state.Load() == abandoned {
			c.recycle()
			continue
		}
		live = append(live, c)
	}
	clear(s.batch[len(live):])
	switch {
	case len(live) == 0:
		return
	case e.process == nil: // a bare redis.Scripter: one call at a time
		for _, c := range live {
			reply, err := e.evalScripter(context.Background(), c)
			if refused(err, "NOSCRIPT") {
				c.args[0], c.args[1] = "eval", c.script.srcArg
				reply, err = e.evalScripter(context.Background(), c)
			}
			c.answer(reply, err)
		}
		clear(live)
		return
	}
	s.units = s.plan(s.units[:0], live)
	s.roundTrip()
	if u := &s.units[0]; u.batched() && e.oneCall.Load() && refused(u.err, "CROSSSLOT") {
		// The keys are not on one server (a cluster or a sharding proxy
		// behind a plain client). The call ran nothing: send each decision
		// on its own, from now on.
		if e.oneCall.Swap(false) {
			e.log.Warn("redlimit: Redis refused a batch of decisions as CROSSSLOT; sending one script call per decision from now on (WithBatchScript(false) says so from the start)",
				"error", u.err)
		}
		s.units = s.plan(s.units[:0], live)
		s.roundTrip()
	}
	for i := range s.units {
		s.units[i].answer()
	}
	clear(s.units)
	clear(s.args) // drop references to keys and arguments
	s.args = s.args[:0]
	clear(live)
}

// unit is one script call of a round trip: one decision's own call, or
// several decisions' as one call of batchScript.
type unit struct {
	calls  []*call
	args   []any // EVALSHA's, then EVAL's after NOSCRIPT
	script *script
	reply  []int64
	err    error
}

func (u *unit) batched() bool { return u.script == batchScript }

// answer hands each call its reply or error.
func (u *unit) answer() {
	if !u.batched() {
		u.calls[0].answer(u.reply, u.err)
		return
	}
	reply := u.reply
	for _, c := range u.calls {
		if u.err != nil {
			c.answer(nil, u.err)
			continue
		}
		var mine []int64
		var err error
		mine, reply, err = nextDecision(reply, c.args[2].(int))
		c.answer(mine, err)
	}
}

// plan splits calls into the script calls of one round trip: all of them
// as one call of batchScript to a single server; on a Cluster or Ring, one
// call of batchScript per hash tag that several share (their keys are on
// one node, in one slot), which a hot key makes common; else one call each.
func (s *sender) plan(units []unit, calls []*call) []unit {
	e := s.e
	switch {
	case len(calls) > 1 && e.oneCall.Load():
		return append(units, s.batchUnit(calls))
	case len(calls) > 1 && e.byTag:
		slices.SortFunc(calls, func(a, b *call) int { return strings.Compare(a.tag(), b.tag()) })
		for len(calls) > 0 {
			n := 1
			for n < len(calls) && calls[n].tag() == calls[0].tag() {
				n++
			}
			if n == 1 {
				units = append(units, unit{calls: calls[:1], args: calls[0].args, script: calls[0].script})
			} else {
				units = append(units, s.batchUnit(calls[:n]))
			}
			calls = calls[n:]
		}
		return units
	}
	for i, c := range calls {
		units = append(units, unit{calls: calls[i : i+1], args: c.args, script: c.script})
	}
	return units
}

// tag returns the hash tag of the call's keys, which all share it.
func (c *call) tag() string {
	key := c.args[3].(string)
	i := strings.IndexByte(key, '{')
	j := strings.IndexByte(key[i+1:], '}')
	return key[i+1 : i+1+j]
}

// batchUnit lays calls out as one call of batchScript (lua/batch.lua),
// its arguments in the sender's buffer.
func (s *sender) batchUnit(calls []*call) unit {
	keys := 0
	for _, c := range calls {
		keys += c.args[2].(int)
	}
	start := len(s.args)
	s.args = append(s.args, "evalsha", batchScript.shaArg, keys)
	for _, c := range calls { // KEYS: every decision's
		s.args = append(s.args, c.args[3:3+c.args[2].(int)]...)
	}
	for _, c := range calls { // ARGV: per decision, its KEYS and ARGV counts, its ARGV
		n := c.args[2].(int)
		argv := c.args[3+n:]
		s.args = append(append(s.args, n, len(argv)), argv...)
	}
	// A full slice expression: a later unit's append must not grow this one.
	return unit{calls: calls, args: s.args[start:len(s.args):len(s.args)], script: batchScript}
}

// roundTrip sends the sender's units, as one pipeline when there are
// several, then once more with the source those the server refused as
// NOSCRIPT (they did not run).
func (s *sender) roundTrip() {
	s.todo = s.todo[:0]
	for i := range s.units {
		s.todo = append(s.todo, &s.units[i])
	}
	s.exec(s.todo)
	s.todo = slices.DeleteFunc(s.todo, func(u *unit) bool { return !refused(u.err, "NOSCRIPT") })
	for _, u := range s.todo {
		u.args[0], u.args[1] = "eval", u.script.srcArg
	}
	s.exec(s.todo)
	clear(s.todo)
}

// once marks a command as one go-redis must never send twice.
type once struct{ *redis.IntSliceCmd }

// NoRetry tells go-redis not to resend the command, or the pipeline that
// holds it, after an error: the script may have run.
func (once) NoRetry() bool { return true }

// exec sends units in one round trip and stores each one's reply or error.
func (s *sender) exec(units []*unit) {
	e, ctx := s.e, context.Background()
	if len(units) <= 1 || s.pipe == nil {
		for _, u := range units {
			u.reply, u.err = e.send1(ctx, u.args)
		}
		return
	}
	s.cmds = s.cmds[:0]
	for _, u := range units {
		s.cmds = append(s.cmds, once{redis.NewIntSliceCmd(ctx, u.args...)})
	}
	_ = s.pipe.BatchProcess(ctx, s.cmds...)
	_, _ = s.pipe.Exec(ctx) // each command carries its own error
	for i, u := range units {
		cmd := s.cmds[i].(once)
		u.reply, u.err = cmd.Val(), cmd.Err()
	}
	clear(s.cmds)
}

// runOne sends c alone and stores its reply or error in it, sending it
// again with the script's source after NOSCRIPT.
func (e *engine) runOne(ctx context.Context, c *call) {
	c.reply, c.err = e.send1(ctx, c.args)
	if refused(c.err, "NOSCRIPT") {
		c.args[0], c.args[1] = "eval", c.script.srcArg
		c.reply, c.err = e.send1(ctx, c.args)
	}
}

// refused reports whether err is Redis's error reply with this code. It
// does not call redis.HasErrorPrefix for a nil error, which would cost an
// allocation per decision.
func refused(err error, code string) bool {
	return err != nil && redis.HasErrorPrefix(err, code)
}

// send1 sends one script call, args being EVALSHA's or EVAL's.
func (e *engine) send1(ctx context.Context, args []any) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, args...)
	_ = e.process(ctx, once{cmd})
	return cmd.Val(), cmd.Err()
}

// errBatchReply is the error of a decision whose answer is missing from a
// batch script's reply.
var errBatchReply = errors.New("redlimit: the batch script's reply is malformed")

// maxBatchError is the longest error message the batch script returns.
const maxBatchError = 240

// nextDecision takes the answer of one decision of terms limits off the
// front of a batch script's reply (see lua/batch.lua): its reply, or the
// error Redis gave it; and returns the rest.
func nextDecision(reply []int64, terms int) (mine, rest []int64, err error) {
	if len(reply) == 0 {
		return nil, nil, errBatchReply
	}
	status, reply := reply[0], reply[1:]
	if status == 1 {
		n := 1 + decisionWidth*terms
		if len(reply) < n {
			return nil, nil, errBatchReply
		}
		return reply[:n:n], reply[n:], nil
	}
	size := int(-status)
	words := (size + 5) / 6
	if size < 0 || size > maxBatchError || len(reply) < words {
		return nil, nil, errBatchReply
	}
	msg := make([]byte, 0, size)
	for i, w := range reply[:words] {
		for b := min(6, size-6*i) - 1; b >= 0; b-- {
			msg = append(msg, byte(w>>(8*b)))
		}
	}
	return nil, reply[words:], redisError(msg)
}

// redisError is an error Redis gave one decision of a batch script. Like
// go-redis's own, it is a redis.Error, so redis.HasErrorPrefix reads it.
type redisError string

func (e redisError) Error() string { return string(e) }

// RedisError marks e as an error reply of the server.
func (redisError) RedisError() {}

// evalScripter runs c through the redis.Scripter methods alone, for a
// client that offers nothing else. Its retries are the client's own.
func (e *engine) evalScripter(ctx context.Context, c *call) ([]int64, error) {
	n := c.args[2].(int)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = c.args[3+i].(string)
	}
	argv := c.args[3+n:]
	var cmd *redis.Cmd
	if c.args[0] == "eval" {
		cmd = e.rdb.Eval(ctx, c.script.src, keys, argv...)
	} else {
		cmd = e.rdb.EvalSha(ctx, c.script.sha, keys, argv...)
	}
	vals, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	reply := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("script reply %d is %T, want an integer", i, v)
		}
		reply[i] = n
	}
	return reply, nil
}
