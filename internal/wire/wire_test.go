package wire_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/wire"
)

// gcra10 is the algorithm's name and arguments of 10/s GCRA, burst 10
// (lua/src/gcra.lua: unit, drip, burst).
var gcra10 = []any{"gcra", 100_000, 1, 10}

// TestWire: the scripts read what the Append functions lay out, and
// ReadDecision and NextBatched read what the scripts reply: a decision, a
// reservation refunded by its settlement, and a batch of both kinds, on
// every script that has GCRA (its own and All).
func TestWire(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	now := time.UnixMicro(1_795_000_000_123_457)
	for _, s := range []*wire.Script{wire.ScriptOf("gcra"), wire.All} {
		t.Run(s.Name, func(t *testing.T) {
			run := func(keys []string, args []any) []int64 {
				t.Helper()
				reply, err := rdb.Eval(ctx, s.Src, keys, args...).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				return reply
			}
			decide := func(id string, cost int) []any {
				args := wire.AppendDecision(nil, wire.Clock(now, false), id, 0)
				return append(wire.AppendLimit(args, cost, false), gcra10...)
			}
			read := func(reply []int64) (wire.Decision, wire.Limit) {
				t.Helper()
				l := make([]wire.Limit, 1)
				d, err := wire.ReadDecision(reply, l)
				if err != nil {
					t.Fatal(err)
				}
				return d, l[0]
			}
			key := s.Name + ":k"

			d, l := read(run([]string{key}, append([]any{wire.Decide}, decide("", 3)...)))
			if !d.Allowed || d.Clock != 0 || !l.Allowed || l.Remaining != 7 || l.Taken != 0 ||
				l.ResetAfter != 300*time.Millisecond || l.NextAfter != 100*time.Millisecond {
				t.Fatalf("a decision of 3 of 10/s: %+v, %+v; want no clock (no reservation), nothing taken up to", d, l)
			}

			d, l = read(run([]string{key}, append([]any{wire.Decide}, decide("42", 4)...)))
			if !d.Allowed || d.Clock != now.UnixMicro() || l.Remaining != 3 || l.Epoch == 0 {
				t.Fatalf("a reservation of 4: %+v, %+v; want its clock, 3 remaining, an epoch", d, l)
			}
			settle := wire.AppendSettlement([]any{wire.Settle}, wire.Clock(now, false), "42", d.Clock, false)
			settle = wire.AppendSettled(settle, wire.Settled{Delta: -4, Reserved: 4, Reset: l.ResetAfter,
				Mark: l.Mark, Epoch: l.Epoch, Debt: time.Second})
			if reply := run([]string{key}, append(settle, gcra10...)); len(reply) != 1 || reply[0] != 1 {
				t.Fatalf("a settlement replied %v, want [1]", reply)
			}
			if _, l = read(run([]string{key}, append([]any{wire.Decide}, decide("", 0)...))); l.Remaining != 7 {
				t.Fatalf("after the reservation of 4 was refunded: %d remaining, want 7", l.Remaining)
			}

			batch := wire.AppendBatched([]any{wire.Batch}, wire.Decide, 1, decide("", 7))
			batch = wire.AppendBatched(batch, wire.Decide, 1, decide("", 1))
			rest := run([]string{key, key}, batch)
			for i, want := range []bool{true, false} {
				call, ran, r, err := wire.NextBatched(rest)
				if err != nil || !ran {
					t.Fatalf("batch call %d: ran %v, %v (reply %v)", i, ran, err, rest)
				}
				rest = r
				if d, _ := read(call); d.Allowed != want {
					t.Fatalf("batch call %d (7, then 1 of the 7 left): allowed %v, want %v", i, d.Allowed, want)
				}
			}
			if len(rest) != 0 {
				t.Fatalf("%d values past the batch's two calls", len(rest))
			}
		})
	}
}

// TestReadDecisionShort: a reply may leave out 0s at its end, down to its
// last limit's allowed; anything shorter or longer is malformed.
func TestReadDecisionShort(t *testing.T) {
	// allowed, remaining, reset_after, next, retry_after, delay, taken,
	// mark, epoch; clock, fetched
	full := []int64{1, 5, 300, 100, 4, 6, 2, 9, 8, 7, 3}
	for n := len(full); n >= 0; n-- {
		limits := make([]wire.Limit, 1)
		d, err := wire.ReadDecision(full[:n], limits)
		if n == 0 {
			if err == nil {
				t.Errorf("no values for one limit read as %+v", limits[0])
			}
			continue
		}
		l := limits[0]
		if err != nil || !d.Allowed || !l.Allowed {
			t.Errorf("%d values: %+v, %+v, %v", n, d, l, err)
		}
		got := []int64{1, int64(l.Remaining), l.ResetAfter.Microseconds(), l.NextAfter.Microseconds(),
			l.RetryAfter.Microseconds(), l.Delay.Microseconds(), int64(l.Taken), l.Mark, l.Epoch, d.Clock, int64(d.Fetched)}
		for i := range got {
			if want := full[i]; i >= n && got[i] != 0 || i < n && got[i] != want {
				t.Errorf("%d values: value %d read as %d", n, i, got[i])
			}
		}
	}
	two := append(append([]int64{}, full[:9]...), 0, 4)
	limits := make([]wire.Limit, 2)
	if d, err := wire.ReadDecision(two, limits); err != nil || d.Allowed || !limits[0].Allowed || limits[1].Remaining != 4 {
		t.Errorf("two limits, the second denying, left out from its reset_after on: %+v, %+v, %v", d, limits, err)
	}
	if _, err := wire.ReadDecision(full[:9], make([]wire.Limit, 2)); err == nil {
		t.Error("two limits, the second left out: read")
	}
	if _, err := wire.ReadDecision(append(full, 0), make([]wire.Limit, 1)); err == nil {
		t.Error("a value too many: read")
	}
	if _, err := wire.ReadDecision(nil, nil); err == nil {
		t.Error("no limits: read")
	}
}
