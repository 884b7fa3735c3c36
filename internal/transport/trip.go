package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/wire"
)

// A round trip sends the calls a lane took together: how they are laid out
// (plan), sent (exec) and sent again. Every command says NoRetry: go-redis
// would resend it after a network error, running a decision twice if its
// reply was lost. What is sent again is what Redis ran none of: NOSCRIPT
// (with EVAL and the source), a Cluster's refusals while slots move
// (resend), and the calls of a batch that raised an error before they
// wrote anything (sent alone, so that Redis's error is their answer).

// trip is the work space of one round trip: a sender's, reused for each
// of its round trips, or a direct caller's, pooled.
type trip struct {
	one    [1]*Call        // a direct caller's call
	pipe   redis.Pipeliner // made at the first pipeline
	units  []unit
	resent []unit // what Redis ran none of, sent once more (resend)
	todo   []*unit
	cmds   []redis.Cmder
	args   []any // the units' commands
}

// unit is one script call of a round trip: one call, or several as one
// Batch call.
type unit struct {
	calls   []*Call
	args    []any // EVALSHA's, then EVAL's after NOSCRIPT
	script  *wire.Script
	batched bool
	reply   []int64
	err     error
	refusal error // a waiting unit's last refusal (requeue)
}

// run sends calls to Redis in one round trip and stores each unit's reply
// or error in t.units.
func (t *trip) run(ctx context.Context, cl *client, log *slog.Logger, calls []*Call) {
	cl.plan(t, calls)
	cl.exchange(ctx, t)
	if u := &t.units[0]; u.batched && refused(u.err, "CROSSSLOT") && cl.mode.CompareAndSwap(planOne, planEach) {
		// The keys are not on one server (a cluster or a sharding proxy
		// behind a plain client). The call ran nothing: send each call on
		// its own, from now on.
		log.Warn("redlimit: Redis refused a batch of decisions as CROSSSLOT; sending one script call per decision from now on (WithBatchScript(false) says so from the start)",
			"error", u.err)
		t.reset()
		cl.plan(t, calls)
		cl.exchange(ctx, t)
	}
}

// answer hands each call of the round trip its reply or error, but for
// those sent again (resend) or waiting for a slot's keys to move (requeue).
func (t *trip) answer() {
	t.each(func(u *unit) {
		if !u.batched {
			u.calls[0].answer(u.reply, u.err)
			return
		}
		rest := u.reply
		for _, c := range u.calls {
			if u.err != nil {
				c.answer(nil, u.err)
				continue
			}
			reply, ran, r, err := wire.NextBatched(rest)
			rest = r
			if err != nil || ran { // else sent again alone (resend)
				c.answer(reply, err)
			}
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
// To a single server (planOne), all of them as one Batch call, which makes
// each in turn, each atomic and independent, so that the server pays its
// cost per call (parsing, finding the script, setting up KEYS and ARGV,
// reading the clock) once. On a Cluster or Ring (planByTag), the calls of
// one hash tag (one slot) as one Batch call per tag, the others one call
// each, which go-redis sends as one pipeline per node. A call that goes
// alone (Kind "") always alone. A batch carries at most MaxMembers
// sorted-set members in all (Call.Members). Every call alone with
// planEach: a proxy that routes a script by its first key
// (Config.BatchScript false), a client that cannot pipeline, or after a
// single server refused a batch as CROSSSLOT. The batch script pays:
// bench/cmd/compare core against core-pipeline, 8–24 % more decisions a
// second at 16 and 128 goroutines (issue 33, docs/performance.md).
func (cl *client) plan(t *trip, calls []*Call) {
	mode := cl.mode.Load()
	if mode != planEach && len(calls) > 1 {
		n := 0 // calls that may go in a batch first; the others alone
		for i, c := range calls {
			if c.Kind != "" {
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
		slices.SortFunc(calls, func(a, b *Call) int { return strings.Compare(tag(a), tag(b)) })
	}
	for len(calls) > 0 {
		n, members := 1, calls[0].Members
		for n < len(calls) && (mode == planOne || mode == planByTag && tag(calls[n]) == tag(calls[0])) &&
			members+calls[n].Members <= MaxMembers {
			members += calls[n].Members
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

// tag returns the hash tag of the call's keys, which all share it.
func tag(c *Call) string {
	key := c.Keys[0]
	i := strings.IndexByte(key, '{')
	j := strings.IndexByte(key[i+1:], '}')
	return key[i+1 : i+1+j]
}

// single lays out one call (calls[0]) as a unit of its own.
func (t *trip) single(calls []*Call) unit {
	c, start := calls[0], len(t.args)
	t.args = append(t.args, "evalsha", c.Script.SHAArg, len(c.Keys))
	for _, key := range c.Keys {
		t.args = append(t.args, key)
	}
	if c.Kind != "" {
		t.args = append(t.args, kindArg(c.Kind))
	}
	t.args = append(t.args, c.Args...)
	// A full slice expression: a later unit's append must not grow this one.
	return unit{calls: calls, args: t.args[start:len(t.args):len(t.args)], script: c.Script}
}

// kindArg returns kind (wire.Decide or wire.Settle) as the constant it
// is: a constant in an interface allocates nothing, c.Kind (a variable)
// would allocate once per call. pays: bench/cmd/compare core, 1
// goroutine, 7 → 8 allocs/op with c.Kind (2026-11-28).
func kindArg(kind string) any {
	if kind == wire.Decide {
		return wire.Decide
	}
	return wire.Settle
}

// batch lays calls out as one Batch call (wire.AppendBatched): of the
// script they share, else of wire.All, which has every algorithm.
func (t *trip) batch(calls []*Call) unit {
	keys, start, s := 0, len(t.args), calls[0].Script
	for _, c := range calls {
		keys += len(c.Keys)
		if c.Script != s {
			s = wire.All
		}
	}
	t.args = append(t.args, "evalsha", s.SHAArg, keys)
	for _, c := range calls {
		for _, key := range c.Keys {
			t.args = append(t.args, key)
		}
	}
	t.args = append(t.args, wire.Batch)
	for _, c := range calls {
		t.args = wire.AppendBatched(t.args, kindArg(c.Kind), len(c.Keys), c.Args)
	}
	return unit{calls: calls, args: t.args[start:len(t.args):len(t.args)], script: s, batched: true}
}

// exchange sends t's units in one round trip, then once more those Redis
// ran none of (resend).
func (cl *client) exchange(ctx context.Context, t *trip) {
	t.todo = t.todo[:0]
	for i := range t.units {
		t.todo = append(t.todo, &t.units[i])
	}
	cl.send(ctx, t)
	cl.resend(ctx, t)
}

// send sends the units of t.todo in one round trip, then once more, with
// the script's source, those the server refused as NOSCRIPT.
func (cl *client) send(ctx context.Context, t *trip) {
	cl.exec(ctx, t, t.todo)
	t.todo = slices.DeleteFunc(t.todo, func(u *unit) bool { return !refused(u.err, "NOSCRIPT") })
	for _, u := range t.todo {
		u.args[0], u.args[1] = "eval", u.script.SrcArg
	}
	cl.exec(ctx, t, t.todo)
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

// resend sends once more, in one round trip, what Redis ran none of: the
// units a Cluster refused (unrun), a batch as single calls, since one key
// alone runs where it is or is redirected (ASK) to where it moved; and the
// calls of a batch that raised an error before writing anything, each
// alone, so that Redis's error is its answer. A call refused as TRYAGAIN
// again (its keys split while their slot moves) is marked errWaiting, to
// be sent again later (requeue).
func (cl *client) resend(ctx context.Context, t *trip) {
	for i := range t.units {
		u := &t.units[i]
		switch {
		case unrun(u.err) && u.batched:
			for j := range u.calls {
				t.resent = append(t.resent, t.single(u.calls[j:j+1]))
			}
			u.err = errResent
		case unrun(u.err):
			t.resent = append(t.resent, unit{calls: u.calls, args: u.args, script: u.script})
			u.err = errResent
		case u.batched && u.err == nil:
			t.unrunCalls(u)
		}
	}
	if len(t.resent) == 0 {
		return
	}
	for i := range t.resent {
		t.todo = append(t.todo, &t.resent[i])
	}
	cl.send(ctx, t)
	for i := range t.resent {
		if u := &t.resent[i]; refused(u.err, "TRYAGAIN") {
			u.refusal, u.err = u.err, errWaiting
		}
	}
}

// unrunCalls adds to t.resent, each alone, the calls of u, a batch Redis
// answered, that raised an error before they wrote anything.
func (t *trip) unrunCalls(u *unit) {
	rest := u.reply
	for j := range u.calls {
		_, ran, r, err := wire.NextBatched(rest)
		if err != nil {
			return // answered as malformed
		}
		rest = r
		if !ran {
			t.resent = append(t.resent, t.single(u.calls[j:j+1]))
		}
	}
}

// requeue hands each waiting unit's call to again (its lane's submit),
// resendPause from now, while its caller waits for it (its due, or
// resendTries times for a caller without a deadline), or else answers it
// with its refusal. So no round trip waits for a slot's keys to move.
func (t *trip) requeue(again func(*Call) error) {
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

// once marks a command go-redis must never resend, alone or in its
// pipeline, after an error: the script may have run.
type once struct{ *redis.IntSliceCmd }

func (once) NoRetry() bool { return true }

// exec sends units in one round trip, as one pipeline when there are
// several, and stores each one's reply or error.
func (cl *client) exec(ctx context.Context, t *trip, units []*unit) {
	switch {
	case cl.process == nil:
		for _, u := range units {
			u.reply, u.err = cl.eval(ctx, u)
		}
		return
	case len(units) == 1 || cl.pipe == nil:
		for _, u := range units {
			cmd := redis.NewIntSliceCmd(ctx, u.args...)
			_ = cl.process(ctx, once{cmd})
			u.reply, u.err = cmd.Val(), cmd.Err()
		}
		return
	}
	if t.pipe == nil {
		t.pipe = cl.pipe()
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
func (cl *client) eval(ctx context.Context, u *unit) ([]int64, error) {
	c := u.calls[0]
	args := u.args[3+len(c.Keys):] // after "evalsha", the digest, the count and the keys
	var cmd *redis.Cmd
	if u.args[0] == "eval" {
		cmd = cl.rdb.Eval(ctx, c.Script.Src, c.Keys, args...)
	} else {
		cmd = cl.rdb.EvalSha(ctx, c.Script.SHA, c.Keys, args...)
	}
	vals, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	reply := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("%w: value %d is %T, want an integer", wire.ErrMalformed, i, v)
		}
		reply[i] = n
	}
	return reply, nil
}

// unrun reports whether err is a Cluster's refusal to run a call at all.
func unrun(err error) bool {
	return refused(err, "TRYAGAIN") || refused(err, "CLUSTERDOWN") || refused(err, "MOVED") ||
		refused(err, "ASK") || refused(err, "READONLY")
}

// refused reports whether err is Redis's error reply with code (not
// asking redis.HasErrorPrefix of nil, which costs an allocation: 7 → 18
// a decision, TestDecisionAllocations; docs/performance.md).
func refused(err error, code string) bool {
	return err != nil && redis.HasErrorPrefix(err, code)
}
