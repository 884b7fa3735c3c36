package core_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
)

// The model check's run: the operations made, each admission checked.

type outstanding struct {
	r       *core.Reservation
	name    string
	n       int
	ns      []int // each model's reserved cost (ReserveEach's may differ)
	each    bool  // reserved with ReserveEach: settled with SettleEach
	models  []*model
	entries []*mentry
}

type modelResult struct {
	done, failAt                                int
	fail                                        string
	err                                         error
	trace                                       []string
	admitted, local, reserved, refunds, charges int
}

// runOps runs ops in env until one fails or the deadline passes.
func runOps(env *menv, mc modelCase, ops []mop, deadline time.Time) (res modelResult) {
	ctx := context.Background()
	var start int64
	if env.fake != nil {
		start = env.fake.Now().UnixMicro()
	} else {
		tm, err := env.admin.Time(ctx).Result()
		if err != nil {
			res.err = err
			return res
		}
		start = tm.UnixMicro()
	}
	prim := newModel(mc.primary, env.prefix, start)
	models := map[string]*model{"p": prim}
	if mc.companion.Rate > 0 {
		models["c"] = newModel(mc.companion, env.prefix, start)
	}
	if mc.conc.Rate > 0 {
		models["k"] = newModel(mc.conc, env.prefix, start)
	}
	pf := mc.primary
	pf.Prefetch = mc.prefetch
	var open []*outstanding
	lastFetch := make([]int64, len(env.lims)) // per Limiter, its last fetch (µs), 0 none
	fetchSeq := make([]int64, len(env.lims))  // and the operation that made it
	now := func() int64 {
		if env.fake != nil {
			return env.fake.Now().UnixMicro()
		}
		tm, err := env.admin.Time(ctx).Result()
		if err != nil {
			panic(err) // a real server that stopped answering TIME
		}
		return tm.UnixMicro()
	}
	fmtOp := func(i int, at int64, lim int, s string, a ...any) string {
		return fmt.Sprintf("%4d %-14s L%d %s", i, fmtAt(at), lim, fmt.Sprintf(s, a...))
	}
	// settle settles o at costs[k] for its k-th limit (with SettleEach
	// when o.each or costs differ), or releases it.
	settle := func(i, lim int, o *outstanding, costs []int, release bool) error {
		before := now()
		var err error
		what := "Release"
		switch {
		case release:
			err = o.r.Release(ctx)
			costs = o.ns
		case o.each || len(costs) > 1 && costs[0] != costs[1]:
			what = fmt.Sprintf("SettleEach(%v)", costs)
			err = o.r.SettleEach(ctx, costs)
		default:
			what = fmt.Sprintf("Settle(%d)", costs[0])
			err = o.r.Settle(ctx, costs[0])
		}
		if err != nil {
			return fmt.Errorf("%s of %s: %w", what, o.name, err)
		}
		for k, m := range o.models {
			if err := m.observe(ctx, env.admin); err != nil {
				return err
			}
			m.seq = int64(i) + 1
			m.settle(o.entries[k], int64(o.ns[k]), int64(costs[k]), before)
			switch {
			case costs[k] < o.ns[k]:
				res.refunds++
			case costs[k] > o.ns[k]:
				res.charges++
			}
		}
		res.trace = append(res.trace, fmtOp(i, before, lim, "%s of %s (reserved %v)", what, o.name, o.ns))
		return nil
	}
	// decide makes one decision of op (its kind, Limiter and n) and
	// checks it; stop: the run ends (res says why).
	decide := func(i int, op mop) (allowed, stop bool) {
		fail := func(why string) (bool, bool) {
			res.fail = why
			res.trace = append(res.trace, "     ^ "+why)
			return false, true
		}
		lim := env.lims[op.lim]
		var limits []core.Limit
		var ms []*model
		switch op.kind {
		case opAllow, opReserve:
			limits, ms = []core.Limit{mc.primary}, []*model{prim}
		case opAllowPrefetch:
			limits, ms = []core.Limit{pf}, []*model{prim}
		case opAllowAll:
			p := mc.primary
			if op.n%2 == 1 && mc.prefetch > 0 {
				p = pf
			}
			limits, ms = []core.Limit{p, mc.companion}, []*model{prim, models["c"]}
		case opReserve2:
			limits, ms = []core.Limit{mc.primary, mc.companion}, []*model{prim, models["c"]}
		case opReserveConc:
			limits, ms = []core.Limit{mc.primary, mc.conc}, []*model{prim, models["k"]}
		}
		// A decision. With prefetch, a decision that the lease cannot
		// answer gives back what the lease holds if it may still use it:
		// wait for that give-back, so that it lands at this instant.
		held, valid := 0, false
		if op.kind == opAllowPrefetch && env.fake != nil {
			held, valid = lim.Held("k", pf)
		}
		gb := env.giveBacks.Load()
		before := now()
		// Every other two-limit reservation is a ReserveEach, the
		// companion's cost apart from the primary's.
		costs := make([]int, len(limits))
		for k := range costs {
			costs[k] = op.n
		}
		each := op.kind == opReserve2 && i%2 == 1
		if each {
			costs[1] = (op.n*7 + i) % (mc.companion.Capacity() + 2)
		}
		var r core.Result
		var rsv *core.Reservation
		var err error
		switch {
		case each && i%4 == 3: // the companion takes up to its cost (a budget's last tokens)
			rsv, err = lim.ReserveUpTo(ctx, "k", limits, costs, 1<<1)
			if err == nil {
				r = rsv.Result()
			}
		case each:
			rsv, err = lim.ReserveEach(ctx, "k", limits, costs)
			if err == nil {
				r = rsv.Result()
			}
		case op.kind == opAllow || op.kind == opAllowPrefetch:
			r, err = lim.AllowN(ctx, "k", limits[0], op.n)
		case op.kind == opAllowAll:
			r, err = lim.AllowAll(ctx, "k", limits, op.n)
		default:
			rsv, err = lim.Reserve(ctx, "k", limits, op.n)
			if err == nil {
				r = rsv.Result()
			}
		}
		if err != nil {
			res.err = err
			return false, true
		}
		after := before
		if env.fake == nil {
			after = now()
		}
		fromLease := r.Cached && r.Allowed
		if op.kind == opAllowPrefetch && env.fake != nil && op.n > 0 && op.n <= pf.Capacity() && !fromLease && held > 0 && valid {
			if !waitGiveBack(env.giveBacks, gb+1) {
				res.err = fmt.Errorf("op %d: the give-back of %d held events did not reach Redis within 10 s", i, held)
				return false, true
			}
		}
		names := make([]string, len(limits))
		for k, l := range limits {
			names[k] = l.String()
		}
		verb := map[opKind]string{opAllow: "AllowN", opAllowPrefetch: "AllowN", opAllowAll: "AllowAll", opReserve: "Reserve", opReserve2: "Reserve", opReserveConc: "Reserve"}[op.kind]
		line := fmtOp(i, before, op.lim, "%s([%s], %d) = allowed=%v remaining=%d", verb, strings.Join(names, ", "), op.n, r.Allowed, r.Remaining)
		if each {
			line = fmtOp(i, before, op.lim, "ReserveEach([%s], %v) = allowed=%v remaining=%d", strings.Join(names, ", "), costs, r.Allowed, r.Remaining)
		}
		if fromLease {
			line += " (from the lease)"
		} else if r.Cached {
			line += " (deny cache)"
		}
		name := ""
		if rsv != nil && r.Allowed && op.n > 0 {
			name = fmt.Sprintf("r%d", i)
			line += " -> " + name
		}
		res.trace = append(res.trace, line)
		capacity := limits[0].Capacity()
		for _, l := range limits[1:] {
			capacity = min(capacity, l.Capacity())
		}
		for k, l := range limits {
			if r.Allowed && costs[k] > l.Capacity() {
				return fail(fmt.Sprintf("allowed %d events, above the capacity %d of %v", costs[k], l.Capacity(), l))
			}
		}
		if r.Remaining > r.Limit.Capacity() {
			return fail(fmt.Sprintf("Remaining %d above the binding limit's capacity %d (%v)", r.Remaining, r.Limit.Capacity(), r.Limit))
		}
		nothing := true
		for _, c := range costs {
			nothing = nothing && c == 0
		}
		if !r.Allowed || nothing {
			return r.Allowed, false
		}
		res.admitted++
		if fromLease {
			res.local++
		}
		o := &outstanding{r: rsv, name: name, n: op.n, ns: costs, each: each}
		lease := int64(0)
		switch {
		case fromLease:
			lease = fetchSeq[op.lim]
		case op.kind == opAllowPrefetch || op.kind == opAllowAll && limits[0].Prefetch > 0:
			lastFetch[op.lim], fetchSeq[op.lim] = before, int64(i)+1
		}
		fold := int64(math.MaxInt64) // entries before every fetch whose lease may still answer fold
		for _, f := range lastFetch {
			if f > 0 && f > before-leaseHorizon(mc.primary) {
				fold = min(fold, f)
			}
		}
		for k, m := range ms {
			if err := m.observe(ctx, env.admin); err != nil {
				res.err = err
				return false, true
			}
			m.lease, m.foldBefore = lease, fold
			e, why := m.admit(before, after, int64(costs[k]), rsv != nil)
			m.lease = 0
			if why != "" {
				return fail("over the limit: " + why)
			}
			o.models, o.entries = append(o.models, m), append(o.entries, e)
		}
		if rsv != nil {
			res.reserved++
			open = append(open, o)
			if len(open) > 6 { // keep the reservations outstanding few: release one now
				j := i % len(open)
				o := open[j]
				open = append(open[:j], open[j+1:]...)
				if err := settle(i, op.lim, o, nil, true); err != nil {
					res.err = err
					return false, true
				}
			}
		}
		return true, false
	}
	for i, op := range ops {
		if time.Now().After(deadline) {
			break
		}
		res.done = i + 1
		res.failAt = i
		if op.kind == opAdvance {
			if env.fake != nil {
				env.fake.Advance(op.d)
			} else {
				time.Sleep(op.d)
			}
			res.trace = append(res.trace, fmt.Sprintf("%4d advance %v", i, op.d))
			continue
		}
		if op.kind == opSettle || op.kind == opRelease {
			if len(open) == 0 {
				continue
			}
			j := op.pick % len(open)
			o := open[j]
			open = append(open[:j], open[j+1:]...)
			// Each limit's cost from the op's class; a reservation of two
			// limits now and then settles them apart (SettleEach).
			costs := make([]int, len(o.ns))
			for k, n := range o.ns {
				class, r := op.cost, op.r
				if k > 0 && (o.each || op.r%4 == 0) {
					class, r = (op.r>>4)%4, op.r>>6
				}
				costs[k] = n
				switch {
				case class == 0:
					costs[k] = 0
				case class == 1 && n > 0:
					costs[k] = r % n
				case class == 3:
					costs[k] = n + 1 + r%3
					if r%8 == 0 { // now and then a deep debt
						costs[k] = n + 1 + r%(3*mc.primary.Capacity())
					}
				}
			}
			if err := settle(i, op.lim, o, costs, op.kind == opRelease); err != nil {
				res.err = err
				return res
			}
			continue
		}

		if op.kind == opDrain {
			kind := opAllow
			if op.n%2 == 1 && mc.prefetch > 0 {
				kind = opAllowPrefetch
			}
			for k := 0; k < mc.primary.Capacity()+2; k++ {
				allowed, stop := decide(i, mop{kind: kind, lim: op.lim, n: 1})
				if stop {
					return res
				}
				if !allowed {
					break
				}
			}
			continue
		}
		if _, stop := decide(i, op); stop {
			return res
		}
	}
	res.failAt = res.done - 1
	return res
}

func waitGiveBack(n *atomic.Int64, want int64) bool {
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}
