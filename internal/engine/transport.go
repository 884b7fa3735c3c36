package engine

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

// transport sends the script calls of one round trip and reads their
// replies: how calls are laid out (plan), sent (exec) and sent again.
// Every command says NoRetry: go-redis would resend it after a network
// error, running a decision twice if its reply was lost. What is sent
// again is what Redis refused without running it: NOSCRIPT (with EVAL and
// the source), and a Cluster's refusals while slots move (resend).
type transport struct {
	rdb     redis.Scripter
	process func(context.Context, redis.Cmder) error // nil for a bare redis.Scripter
	pipe    func() redis.Pipeliner                   // nil when rdb cannot pipeline
	bounded bool                                     // go-redis bounds rdb's commands by their context's deadline
	mode    atomic.Int32                             // how plan lays out a round trip: planEach, planOne or planByTag
	log     *slog.Logger
}

// The layouts of a round trip; see plan.
const (
	planEach  int32 = iota // every call a script call of its own
	planOne                // all calls as one call of the batch script
	planByTag              // the calls of one hash tag as one call of the batch script
)

func (tr *transport) init(rdb redis.Scripter, batch int, batchScript bool, log *slog.Logger) {
	tr.rdb, tr.log = rdb, log
	if p, ok := rdb.(interface {
		Process(context.Context, redis.Cmder) error
	}); ok {
		tr.process = p.Process
		tr.bounded = contextBounded(rdb)
	}
	if p, ok := rdb.(interface{ Pipeline() redis.Pipeliner }); ok && batch > 1 && tr.process != nil {
		tr.pipe = p.Pipeline
	}
	if batchScript && tr.pipe != nil {
		switch rdb.(type) {
		case *redis.Client:
			tr.mode.Store(planOne)
		case *redis.ClusterClient, *redis.Ring:
			tr.mode.Store(planByTag)
		}
	}
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

// call is one script run (a decision, a settlement, a reset) as named
// fields, which args lays out as the command. The engine carries it; done
// brings the answer back. Calls are pooled, with their slices.
type call struct {
	script *script
	keys   []string // KEYS; the first names the lane and the hash tag
	// clock and rid are ARGV[1] and ARGV[2] of a decision or a
	// settlement: the clock ("" for the server's, or µs) and the
	// reservation's id. A call without a clock (nil: a reset, the peers'
	// count) has neither.
	clock any
	rid   string
	argv  []any // the rest of ARGV: per limit its cost and its algorithm's own
	// members bounds what the call may add to or take from sorted sets
	// (log entries, slots): a batch script call carries at most maxMembers
	// of them in all, so that no call holds Redis long.
	members int

	due   time.Time // when its caller stops waiting; zero: never
	tries int       // times sent again while its slot's keys move (requeue)

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
	return &call{done: make(chan struct{}, 1), keys: make([]string, 0, 4), argv: make([]any, 0, 16)}
}}

// newCall returns a call of s on keys; the caller sets its ARGV.
func newCall(s *script, keys ...string) *call {
	c := calls.Get().(*call)
	c.script, c.keys = s, append(c.keys[:0], keys...)
	return c
}

// argc is the length of the call's ARGV.
func (c *call) argc() int {
	if c.clock == nil {
		return len(c.argv)
	}
	return 2 + len(c.argv)
}

// args appends the call's arguments to dst: its script, with the source
// (EVAL) or the digest (EVALSHA), its KEYS when keys, then its ARGV.
func (c *call) args(dst []any, keys bool) []any {
	if keys {
		for _, key := range c.keys {
			dst = append(dst, key)
		}
	}
	if c.clock != nil {
		dst = append(dst, c.clock, c.rid)
	}
	return append(dst, c.argv...)
}

// tag returns the hash tag of the call's keys, which all share it.
func (c *call) tag() string {
	key := c.keys[0]
	i := strings.IndexByte(key, '{')
	j := strings.IndexByte(key[i+1:], '}')
	return key[i+1 : i+1+j]
}

// recycle returns the call to the pool. Only its last owner calls it.
func (c *call) recycle() {
	clear(c.keys) // drop references to the keys and the arguments
	clear(c.argv)
	c.keys, c.argv = c.keys[:0], c.argv[:0]
	c.script, c.clock, c.rid, c.reply, c.err = nil, nil, "", nil, nil
	c.due, c.tries, c.members = time.Time{}, 0, 0
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

// trip is the work space of one round trip: a sender's, reused for each
// of its round trips, or a direct caller's, pooled.
type trip struct {
	one    [1]*call        // a direct caller's call
	pipe   redis.Pipeliner // made at the first pipeline
	units  []unit
	resent []unit // what Redis refused without running it, sent once more (resend)
	todo   []*unit
	cmds   []redis.Cmder
	args   []any // the units' commands
}

// unit is one script call of a round trip: one call, or several as one
// call of batchScript.
type unit struct {
	calls   []*call
	args    []any // EVALSHA's, then EVAL's after NOSCRIPT
	script  *script
	reply   []int64
	err     error
	refusal error // a waiting unit's last refusal (requeue)
}

func (u *unit) batched() bool { return u.script.isBatch }

// run sends calls to Redis in one round trip and stores each unit's reply
// or error in t.units.
func (t *trip) run(ctx context.Context, tr *transport, calls []*call) {
	tr.plan(t, calls)
	tr.exchange(ctx, t)
	if u := &t.units[0]; u.batched() && refused(u.err, "CROSSSLOT") && tr.mode.CompareAndSwap(planOne, planEach) {
		// The keys are not on one server (a cluster or a sharding proxy
		// behind a plain client). The call ran nothing: send each decision
		// on its own, from now on.
		tr.log.Warn("redlimit: Redis refused a batch of decisions as CROSSSLOT; sending one script call per decision from now on (WithBatchScript(false) says so from the start)",
			"error", u.err)
		t.reset()
		tr.plan(t, calls)
		tr.exchange(ctx, t)
	}
}

// answer hands each call of the round trip its reply or error, but for
// those that wait for a slot's keys to move (requeue).
func (t *trip) answer() {
	t.each(func(u *unit) {
		if !u.batched() {
			u.calls[0].answer(u.reply, u.err)
			return
		}
		rest := u.reply
		for _, c := range u.calls {
			if u.err != nil {
				c.answer(nil, u.err)
				continue
			}
			reply, r, err := nextReply(rest)
			rest = r
			c.answer(reply, err)
		}
	})
}

// each calls f for each unit that holds the answer of its calls: those
// not sent again, and those sent again that do not wait.
func (t *trip) each(f func(*unit)) {
	for i := range t.units {
		if t.units[i].err != errResent {
			f(&t.units[i])
		}
	}
	for i := range t.resent {
		if t.resent[i].err != errWaiting {
			f(&t.resent[i])
		}
	}
}

// reset drops the round trip's references to calls, keys and replies.
func (t *trip) reset() {
	clear(t.units)
	clear(t.resent)
	clear(t.args)
	t.units, t.resent, t.args = t.units[:0], t.resent[:0], t.args[:0]
}

// plan lays calls out in t.units as the script calls of one round trip.
// To a single server (a *redis.Client: standalone, or Sentinel's failover
// client), all of them as one call of the batch script, which makes each
// decision in turn, each atomic and independent, so that the server pays
// its cost per call (parsing, finding the script, setting up KEYS and
// ARGV, reading the clock) once. On a Cluster or Ring, the calls of one
// hash tag (one slot) as one call of the batch script per tag, the others
// one call each, which go-redis sends as one pipeline per node. A reset
// always alone. Every call alone with WithBatchScript(false) (a proxy that
// routes a script by its first key), a client that cannot pipeline, or
// after a single server refused a batch as CROSSSLOT.
func (tr *transport) plan(t *trip, calls []*call) {
	mode := tr.mode.Load()
	if mode != planEach && len(calls) > 1 {
		n := 0 // decisions and settlements first; a reset is a call of its own
		for i, c := range calls {
			if c.script.batch != unbatched {
				calls[n], calls[i] = calls[i], calls[n]
				n++
			}
		}
		for i := n; i < len(calls); i++ {
			t.units = append(t.units, t.single(calls[i:i+1]))
		}
		calls = calls[:n]
	}
	if mode == planByTag && len(calls) > 1 {
		slices.SortFunc(calls, func(a, b *call) int { return strings.Compare(a.tag(), b.tag()) })
	}
	for len(calls) > 0 {
		n, members := 1, calls[0].members
		for n < len(calls) && (mode == planOne || mode == planByTag && calls[n].tag() == calls[0].tag()) &&
			members+calls[n].members <= maxMembers {
			members += calls[n].members
			n++
		}
		if n == 1 {
			t.units = append(t.units, t.single(calls[:1]))
		} else {
			t.units = append(t.units, t.batch(calls[:n]))
		}
		calls = calls[n:]
	}
}

// single lays out one call (calls[0]) as a unit of its own.
func (t *trip) single(calls []*call) unit {
	c, start := calls[0], len(t.args)
	t.args = c.args(append(t.args, "evalsha", c.script.shaArg, len(c.keys)), true)
	// A full slice expression: a later unit's append must not grow this one.
	return unit{calls: calls, args: t.args[start:len(t.args):len(t.args)], script: c.script}
}

// batch lays calls out as one call of a batch script (lua/batch.lua):
// every call's KEYS, then per call its KEYS count (negative for a
// settlement), its ARGV count and its ARGV. The script is that of the
// calls' algorithms when they share them, else batchScript, of every
// algorithm.
func (t *trip) batch(calls []*call) unit {
	keys, start, bs := 0, len(t.args), calls[0].script.inBatch
	for _, c := range calls {
		keys += len(c.keys)
		if c.script.inBatch != bs {
			bs = batchScript
		}
	}
	t.args = append(t.args, "evalsha", bs.shaArg, keys)
	for _, c := range calls {
		for _, key := range c.keys {
			t.args = append(t.args, key)
		}
	}
	for _, c := range calls {
		n := len(c.keys)
		if c.script.batch == asSettle {
			n = -n
		}
		t.args = c.args(append(t.args, n, c.argc()), false)
	}
	return unit{calls: calls, args: t.args[start:len(t.args):len(t.args)], script: bs}
}

// exchange sends t's units in one round trip, then once more those Redis
// refused without running them (resend).
func (tr *transport) exchange(ctx context.Context, t *trip) {
	t.todo = t.todo[:0]
	for i := range t.units {
		t.todo = append(t.todo, &t.units[i])
	}
	tr.send(ctx, t)
	tr.resend(ctx, t)
}

// send sends the units of t.todo in one round trip, then once more, with
// the script's source, those the server refused as NOSCRIPT.
func (tr *transport) send(ctx context.Context, t *trip) {
	tr.exec(ctx, t, t.todo)
	t.todo = slices.DeleteFunc(t.todo, func(u *unit) bool { return !refused(u.err, "NOSCRIPT") })
	for _, u := range t.todo {
		u.args[0], u.args[1] = "eval", u.script.srcArg
	}
	tr.exec(ctx, t, t.todo)
	clear(t.todo)
	t.todo = t.todo[:0]
}

// errResent marks a unit whose calls were sent again, in t.resent;
// errWaiting a unit of t.resent that waits out a slot being moved
// (requeue).
var (
	errResent  = errors.New("redlimit: sent again")
	errWaiting = errors.New("redlimit: waiting for a slot's keys to move")
)

// Resending a call whose keys are split between two nodes while their slot
// moves (TRYAGAIN): every resendPause until its caller stops waiting, or,
// for a caller that waits without a deadline, at most resendTries times.
const (
	resendPause = 10 * time.Millisecond
	resendTries = 25
)

// resend sends once more, in one round trip, the units a Cluster refused
// without running them (unrun): a batch as single calls, since one key
// alone runs where it is or is redirected (ASK) to where it moved. A call
// refused as TRYAGAIN again (its keys split while their slot moves) is
// marked errWaiting, to be sent again later (requeue).
func (tr *transport) resend(ctx context.Context, t *trip) {
	for i := range t.units {
		u := &t.units[i]
		if !unrun(u.err) {
			continue
		}
		if u.batched() {
			for j := range u.calls {
				t.resent = append(t.resent, t.single(u.calls[j:j+1]))
			}
		} else {
			t.resent = append(t.resent, unit{calls: u.calls, args: u.args, script: u.script})
		}
		u.err = errResent
	}
	if len(t.resent) == 0 {
		return
	}
	for i := range t.resent {
		t.todo = append(t.todo, &t.resent[i])
	}
	tr.send(ctx, t)
	for i := range t.resent {
		if u := &t.resent[i]; refused(u.err, "TRYAGAIN") {
			u.refusal, u.err = u.err, errWaiting
		}
	}
}

// requeue hands each waiting unit's call to again (its lane's submit),
// resendPause from now, while its caller waits for it (its due, or
// resendTries times for a caller without a deadline), or else answers it
// with its refusal. So no round trip waits for a slot's keys to move.
func (t *trip) requeue(again func(*call) error) {
	now := time.Now()
	for i := range t.resent {
		u := &t.resent[i]
		if u.err != errWaiting {
			continue
		}
		c, refusal := u.calls[0], u.refusal
		c.tries++
		if c.state.Load() == abandoned || !retryable(now, c.due, c.tries) {
			c.answer(nil, refusal)
			continue
		}
		time.AfterFunc(resendPause, func() {
			if err := again(c); err != nil {
				c.answer(nil, refusal)
			}
		})
	}
}

// retryable reports whether a call refused while its slot's keys move
// (tried tries times) may be sent again resendPause after now: its caller,
// waiting until due, would still have the answer in time (the next try
// comes back about a pause later); a caller without a deadline, for
// resendTries tries.
func retryable(now, due time.Time, tries int) bool {
	if due.IsZero() {
		return tries < resendTries
	}
	return now.Add(2 * resendPause).Before(due)
}

// unrun reports whether err is a Cluster's refusal to run a call at all.
func unrun(err error) bool {
	return refused(err, "TRYAGAIN") || refused(err, "CLUSTERDOWN") || refused(err, "MOVED") ||
		refused(err, "ASK") || refused(err, "READONLY")
}

// once marks a command go-redis must never resend, alone or in its
// pipeline, after an error: the script may have run.
type once struct{ *redis.IntSliceCmd }

func (once) NoRetry() bool { return true }

// exec sends units in one round trip, as one pipeline when there are
// several, and stores each one's reply or error.
func (tr *transport) exec(ctx context.Context, t *trip, units []*unit) {
	switch {
	case tr.process == nil:
		for _, u := range units {
			u.reply, u.err = tr.eval(ctx, u)
		}
		return
	case len(units) == 1 || tr.pipe == nil:
		for _, u := range units {
			cmd := redis.NewIntSliceCmd(ctx, u.args...)
			_ = tr.process(ctx, once{cmd})
			u.reply, u.err = cmd.Val(), cmd.Err()
		}
		return
	}
	if t.pipe == nil {
		t.pipe = tr.pipe()
	}
	t.cmds = t.cmds[:0]
	for _, u := range units {
		t.cmds = append(t.cmds, once{redis.NewIntSliceCmd(ctx, u.args...)})
	}
	_ = t.pipe.BatchProcess(ctx, t.cmds...)
	_, _ = t.pipe.Exec(ctx) // each command carries its own error
	for i, u := range units {
		cmd := t.cmds[i].(once)
		u.reply, u.err = cmd.Val(), cmd.Err()
	}
	clear(t.cmds)
}

// eval runs u, a single call, through the redis.Scripter methods alone,
// for a client that offers nothing else: one call at a time, with the
// client's own retries.
func (tr *transport) eval(ctx context.Context, u *unit) ([]int64, error) {
	c := u.calls[0]
	var cmd *redis.Cmd
	if u.args[0] == "eval" {
		cmd = tr.rdb.Eval(ctx, c.script.src, c.keys, c.args(nil, false)...)
	} else {
		cmd = tr.rdb.EvalSha(ctx, c.script.sha, c.keys, c.args(nil, false)...)
	}
	vals, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	reply := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("%w: value %d is %T, want an integer", errMalformed, i, v)
		}
		reply[i] = n
	}
	return reply, nil
}

// refused reports whether err is Redis's error reply with code (not
// asking redis.HasErrorPrefix of nil, which costs an allocation).
func refused(err error, code string) bool {
	return err != nil && redis.HasErrorPrefix(err, code)
}
