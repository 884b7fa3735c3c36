package core_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/wire"
)

// The model check's faults on the client side: one Limiter (modelFaulty)
// has a go-redis hook that, when a run arms it for an operation, lets that
// operation's script call reach Redis and run there, and then either
// replaces its reply with an error (a reply lost on the way back, as a
// connection that breaks or a timeout would), or cancels the caller's
// context and holds the reply until the caller has gone (a caller that
// gave up after its call was sent). The reply it saw says what really
// happened, which the model logs: a decision's outcome, or that a
// settlement ran. That Limiter sends each decision as a script call of
// its own (WithBatchScript(false)), so one reply is one decision, and has
// no breaker (WithBreaker(0)): the faults are the caller's, and the
// decisions after them go on.

// modelFaulty is the Limiter whose client the faults are injected into.
const modelFaulty = 2

type faultKind int

const (
	faultNone   faultKind = iota
	faultLost             // the call runs; its reply is lost
	faultCancel           // the call runs; its caller's context is cancelled before the reply is handed over
)

func (k faultKind) String() string {
	return [...]string{"", "reply lost", "cancelled after it was sent"}[k]
}

// errLostReply is the error a lost reply is replaced with: not an answer
// of Redis's, as a broken connection's.
var errLostReply = errors.New("model: the reply was lost on its way back (injected)")

// faultPlan arms the hook for one operation's script call.
type faultPlan struct {
	kind     faultKind
	decision bool   // the operation's decision (not a prefetch's); else the settlement of rid
	rid      string // the reservation whose settlement it is
	cancel   context.CancelFunc
	left     chan struct{} // closed once the caller has returned

	hit   bool    // the call was seen, and the fault injected
	reply []int64 // the call's true reply
	costs []int64 // a decision's costs as sent (scriptCall.costs)
	upTo  []bool  // and which take up to them (scriptCall.upTo)
}

// faultHook injects the armed fault, notes the reservation id of each
// reserving decision (so that a settlement can be armed), and checks that
// no reservation's refund or charge is sent twice: a settlement sent again
// (the Limiter freeing slots in the background) may free slots only.
type faultHook struct {
	mu      sync.Mutex
	plan    *faultPlan
	lastRid string         // the id of the last reserving decision seen
	settled map[string]int // per reservation id, settlements that moved a limit other than a Concurrency one
	twice   string         // the first such settlement sent twice, if any
}

func newFaultHook() *faultHook { return &faultHook{settled: map[string]int{}} }

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd) // an error reply, NOSCRIPT among them, is set on cmd only after the hooks
		if err == nil && h.after([]redis.Cmder{cmd}) {
			return errLostReply // Process sets the command's error to what the hooks return
		}
		return err
	}
}

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after(cmds) // a pipeline's commands keep the errors set on them
		return err
	}
}

// arm arms the hook for the next call plan targets; disarm returns the
// plan and disarms it.
func (h *faultHook) arm(p *faultPlan) {
	h.mu.Lock()
	h.plan = p
	h.mu.Unlock()
}

func (h *faultHook) disarm() *faultPlan {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.plan
	h.plan = nil
	return p
}

// takeRid returns the id of the last reserving decision seen, and forgets it.
func (h *faultHook) takeRid() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	rid := h.lastRid
	h.lastRid = ""
	return rid
}

// sentTwice returns the first refund or charge sent twice, "" if none.
func (h *faultHook) sentTwice() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.twice
}

// scriptCall is what the hook reads of a decision's or settlement's
// script call, laid out as internal/wire lays it out: ARGV starts with
// the call's kind (wire.Decide, wire.Settle, or wire.Batch: per call its
// kind, number of keys and number of arguments, then them), then the
// clock and the reservation id. A decision's then has the events a
// prefetch asks for beyond the cost, and per limit its cost, whether it
// takes up to it, its algorithm's name and the algorithm's arguments
// (wire.AppendDecision, AppendLimit); a settlement's the reservation's
// instant, whether it is a prefetch's give-back, and per limit its delta,
// what it reserved, four facts, then the name (wire.AppendSettlement,
// AppendSettled).
type scriptCall struct {
	decision bool
	rid      string
	fetch    bool    // a decision that asks for events beyond its cost (a prefetch's)
	giveback bool    // a settlement that gives a prefetch's unused events back
	costs    []int64 // a decision's cost per limit, as sent (0: a look)
	upTo     []bool  // a decision's limits that take up to their cost
	moves    bool    // a settlement that refunds or charges a limit other than a Concurrency one
}

// readScriptCall reads a script call that makes one decision or
// settlement; ok is false for any other (a batch, a reset, the peers').
func readScriptCall(cmd redis.Cmder) (scriptCall, bool) {
	argv := scriptArgv(cmd)
	if len(argv) == 0 || argv[0] == wire.Batch {
		return scriptCall{}, false
	}
	return readCall(fmt.Sprint(argv[0]), argv[1:])
}

// readScriptCalls returns the decisions and settlements of a script call:
// the one it makes, or each of a batch's.
func readScriptCalls(cmd redis.Cmder) []scriptCall {
	argv := scriptArgv(cmd)
	if len(argv) == 0 || argv[0] != wire.Batch {
		if c, ok := readScriptCall(cmd); ok {
			return []scriptCall{c}
		}
		return nil
	}
	var calls []scriptCall
	for rest := argv[1:]; len(rest) >= 3; {
		m, err := strconv.Atoi(fmt.Sprint(rest[2]))
		if err != nil || m < 0 || len(rest) < 3+m {
			break
		}
		if c, ok := readCall(fmt.Sprint(rest[0]), rest[3:3+m]); ok {
			calls = append(calls, c)
		}
		rest = rest[3+m:]
	}
	return calls
}

// scriptArgv returns the ARGV of a script call, nil for another command.
func scriptArgv(cmd redis.Cmder) []any {
	args := cmd.Args()
	if !isScriptCmd(cmd) || len(args) < 3 {
		return nil
	}
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || len(args) < 3+n {
		return nil
	}
	return args[3+n:]
}

// readCall reads one decision's or settlement's ARGV after its kind.
func readCall(kind string, argv []any) (scriptCall, bool) {
	if (kind != wire.Decide && kind != wire.Settle) || len(argv) < 4 {
		return scriptCall{}, false
	}
	rid, _ := argv[1].(string)
	c := scriptCall{rid: rid, decision: kind == wire.Decide}
	if c.decision {
		c.fetch = fmt.Sprint(argv[2]) != "0"
		for i := 5; i < len(argv); i++ { // each limit's algorithm name, after its cost and up-to flag
			if name, ok := argv[i].(string); ok && modelAlgorithms[name] {
				n, _ := strconv.ParseInt(fmt.Sprint(argv[i-2]), 10, 64)
				c.costs = append(c.costs, n)
				c.upTo = append(c.upTo, fmt.Sprint(argv[i-1]) == "1")
			}
		}
		return c, true
	}
	c.giveback = fmt.Sprint(argv[3]) == "1"
	for i := 10; i < len(argv); i++ { // each limit's algorithm name, 6 after its delta
		name, ok := argv[i].(string)
		if !ok || !modelAlgorithms[name] {
			continue
		}
		if d := fmt.Sprint(argv[i-6]); name != "concurrency" && d != "0" {
			c.moves = true
		}
	}
	return c, true
}

// modelAlgorithms are the names the scripts know the algorithms by.
var modelAlgorithms = map[string]bool{"gcra": true, "token_bucket": true, "token_bucket_stepped": true,
	"leaky_bucket": true, "leaky_bucket_shape": true, "fixed_window": true, "fixed_window_calendar": true,
	"sliding_window": true, "sliding_log": true, "concurrency": true}

// replyLimits reads a decision's true reply, as the Limiter reads it
// (wire.ReadDecision): whether it allowed, and what it said of each limit.
// This is the one place the model check reads a reply.
func replyLimits(reply []int64, limits int) (allowed bool, each []wire.Limit) {
	each = make([]wire.Limit, limits)
	d, err := wire.ReadDecision(reply, each)
	return err == nil && d.Allowed, each
}

// after sees the calls a round trip made, once they have their replies,
// and reports whether it replaced one's reply with errLostReply.
func (h *faultHook) after(cmds []redis.Cmder) (lost bool) {
	var hit *faultPlan
	h.mu.Lock()
	for _, cmd := range cmds {
		c, ok := readScriptCall(cmd)
		if !ok || cmd.Err() != nil { // not a decision or settlement, or one Redis refused: nothing ran
			continue
		}
		switch {
		case c.decision && c.rid != "" && !c.fetch:
			h.lastRid = c.rid
		case !c.decision && c.moves && !c.giveback:
			if h.settled[c.rid]++; h.settled[c.rid] == 2 && h.twice == "" {
				args := cmd.Args()
				h.twice = fmt.Sprintf("reservation %s: a settlement that refunds or charges was sent twice: %v", c.rid, args[min(len(args), 2):])
			}
		}
		p := h.plan
		if p == nil || p.hit {
			continue
		}
		if p.decision && c.decision && !c.fetch || !p.decision && !c.decision && c.rid == p.rid {
			reply, _ := cmd.(interface{ Val() []int64 })
			if reply == nil {
				continue
			}
			p.hit, p.reply, p.costs, p.upTo = true, slices.Clone(reply.Val()), c.costs, c.upTo
			if p.kind == faultLost {
				cmd.SetErr(errLostReply)
				lost = true
			} else {
				hit = p
			}
		}
	}
	h.mu.Unlock()
	if hit != nil { // the caller sees its context end, not the reply, and goes
		hit.cancel()
		select {
		case <-hit.left:
		case <-time.After(10 * time.Second):
		}
	}
	return lost
}
