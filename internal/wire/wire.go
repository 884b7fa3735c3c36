// Package wire is the Go side of the scripts Redis runs (lua/scripts):
// which script a call runs, how its KEYS and ARGV are laid out, and how
// its reply reads, written once, here. lua/src/main.lua, decide.lua and
// settle.lua are the Lua side; a change to one is a change to the other,
// and TestWire runs the scripts to check that they agree.
//
// A call's ARGV starts with its kind: Decide, Settle, or Batch for several
// decisions and settlements in one script call. Durations are whole
// microseconds on the wire.
package wire

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redlimit/redlimit/lua"
)

// Script is one script Redis runs: sent with EVALSHA, or EVAL (its
// source) when the server does not have it yet.
type Script struct {
	Name, Src, SHA string
	// SrcArg and SHAArg are Src and SHA boxed once, so that no call
	// allocates to pass them.
	SrcArg, SHAArg any
}

func newScript(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &Script{Name: name, Src: src, SHA: sha, SrcArg: src, SHAArg: sha}
}

// The scripts: each algorithm file's (lua/scripts/<file>.lua), every
// algorithm's (All, for decisions that mix them, and batches that do), and
// the three written by hand.
var (
	scripts = func() map[string]*Script {
		m := map[string]*Script{}
		for _, name := range lua.Algorithms() {
			m[name] = newScript(name, lua.Script(name))
		}
		return m
	}()
	All   = newScript("all", lua.Script("all"))
	Del   = newScript("del", lua.Del())
	Peers = newScript("peers", lua.Peers())
	// Generation is the marker of a server's data (core's loss.go).
	Generation = newScript("generation", lua.Generation())
)

// ScriptOf returns the script of the algorithm file ("gcra",
// "fixed_window", ...), or nil if there is none.
func ScriptOf(file string) *Script { return scripts[file] }

// Kinds of call: the first ARGV of a call of an algorithm's script.
const (
	Decide = "d" // one decision (lua/src/decide.lua)
	Settle = "s" // one settlement (lua/src/settle.lua)
	Batch  = "b" // several of either (lua/src/main.lua)
)

// Clock is a call's clock on the wire: "" (the Redis server's, TIME), or
// the caller's in µs.
func Clock(now time.Time, server bool) any {
	if server {
		return ""
	}
	return now.UnixMicro()
}

// AppendDecision appends to args, a decision's ARGV after its kind, the
// decision's own arguments: its clock (Clock), the id of the reservation
// or prefetch it makes ("" for none; a decimal below 2^52), and more, the
// events a prefetch asks for beyond the cost (0 for none). Each limit's
// follow (AppendLimit).
func AppendDecision(args []any, clock any, id string, more int) []any {
	return append(args, clock, id, more)
}

// AppendLimit appends one limit of a decision: its cost and whether it
// takes up to its cost. The caller then appends its algorithm's name and
// arguments (core's limitInfo.appendArgs).
func AppendLimit(args []any, cost int, upTo bool) []any {
	flag := 0
	if upTo {
		flag = 1
	}
	return append(args, cost, flag)
}

// AppendSettlement appends to args, a settlement's ARGV after its kind,
// its own arguments: its clock, the reservation's id, when its decision
// was made (µs; nil when unknown: the release of a decision that may not
// have run), and whether it is a prefetch's give-back. Each limit's
// follow (AppendSettled).
func AppendSettlement(args []any, clock any, id string, made any, giveBack bool) []any {
	if made == nil {
		made = ""
	}
	flag := 0
	if giveBack {
		flag = 1
	}
	return append(args, clock, id, made, flag)
}

// Settled is what a settlement says of one limit.
type Settled struct {
	Delta    int           // its true cost less what it reserved
	Reserved int           // what it reserved
	Reset    time.Duration // what its decision said: ResetAfter,
	Mark     int64         // the mark
	Epoch    int64         // and the epoch (lua/src/meter.lua)
	Debt     time.Duration // the longest debt a charge may leave
}

// AppendSettled appends one limit of a settlement: s. The caller then
// appends its algorithm's name and arguments.
func AppendSettled(args []any, s Settled) []any {
	return append(args, s.Delta, s.Reserved, micros(s.Reset), s.Mark, s.Epoch, micros(s.Debt))
}

// Widths of a decision's reply (lua/src/decide.lua): limitWidth values
// per limit, then tailWidth of the whole.
const (
	limitWidth = 9
	tailWidth  = 2
)

// Decision is what a decision's reply says of the whole.
type Decision struct {
	Allowed bool  // every limit allowed
	Clock   int64 // the decision's clock, µs: a settlement sends it back
	Fetched int   // what a prefetch took beyond the cost
}

// Limit is what a decision's reply says of one limit.
type Limit struct {
	Allowed    bool
	Remaining  int // below 0 in debt
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
	NextAfter  time.Duration
	Taken      int   // the cost it was decided at: what "take up to" took
	Mark       int64 // what its settlement sends back (lua/src/meter.lua)
	Epoch      int64
}

// ErrMalformed is the error of a reply that is not laid out as the
// scripts lay it out.
var ErrMalformed = errors.New("redlimit: a script's reply is malformed")

// ReadDecision reads reply, a decision's, into limits (as many as the
// decision had) and returns what it says of the whole, which allows if
// every limit does. A reply may leave out values at its end that are 0,
// down to its last limit's allowed (the common decision's does: its
// values from retry_after on): they read as 0.
func ReadDecision(reply []int64, limits []Limit) (Decision, error) {
	full := limitWidth*len(limits) + tailWidth
	if len(limits) == 0 || len(reply) > full || len(reply) <= limitWidth*(len(limits)-1) {
		return Decision{}, fmt.Errorf("%w: %d values for %d limits, want %d", ErrMalformed, len(reply), len(limits), full)
	}
	v := func(i int) int64 { // reply[i], or a 0 left out
		if i < len(reply) {
			return reply[i]
		}
		return 0
	}
	allowed := true
	for i := range limits {
		at := limitWidth * i
		limits[i] = Limit{Allowed: v(at) == 1, Remaining: int(v(at + 1)), ResetAfter: us(v(at + 2)),
			NextAfter: us(v(at + 3)), RetryAfter: us(v(at + 4)), Delay: us(v(at + 5)), Taken: int(v(at + 6)),
			Mark: v(at + 7), Epoch: v(at + 8)}
		allowed = allowed && limits[i].Allowed
	}
	tail := limitWidth * len(limits)
	return Decision{Allowed: allowed, Clock: v(tail), Fetched: int(v(tail + 1))}, nil
}

// AppendBatched appends one call of a batch (its kind, Decide or Settle
// (boxed by the caller, once), its number of keys, and its ARGV after its
// kind) to args, a Batch
// call's ARGV after its kind. The batch's KEYS are every call's, in order.
func AppendBatched(args []any, kind any, keys int, call []any) []any {
	return append(append(args, kind, keys, len(call)), call...)
}

// NextBatched takes the reply of one call off the front of reply, a
// Batch call's: the call's reply and the rest; ran is false for a call
// that raised an error before it wrote anything, to be sent again alone.
func NextBatched(reply []int64) (call []int64, ran bool, rest []int64, err error) {
	switch {
	case len(reply) >= 1 && reply[0] == 0:
		return nil, false, reply[1:], nil
	case len(reply) >= 2 && reply[0] == 1 && reply[1] >= 0 && int64(len(reply)-2) >= reply[1]:
		n := 2 + reply[1]
		return reply[2:n:n], true, reply[n:], nil
	}
	return nil, false, nil, ErrMalformed
}

func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }
