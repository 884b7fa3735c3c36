package core_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
)

// The model check's run: the operations made, each admission checked.

type outstanding struct {
	r       *core.Reservation
	name    string
	lim     int    // the Limiter that made it
	rid     string // its id, when made by modelFaulty (for a fault on its settlement)
	n       int
	ns      []int        // each model's reserved cost (ReserveEach's may differ)
	limits  []core.Limit // as reserved: a settlement keeps them
	each    bool         // reserved with ReserveEach: settled with SettleEach
	models  []*model
	entries []*mentry
}

type modelResult struct {
	done, failAt                                int
	fail, class                                 string // why it failed; what failed (a shorter run must fail the same)
	err                                         error
	trace                                       []string
	admitted, local, reserved, refunds, charges int
	lost, served, changes, backs, checks        int
}

// runOps runs ops in env until one fails or the deadline passes; then,
// on a fake clock, it releases what is outstanding and checks that no
// Concurrency slot stays held (checkSlots).
func runOps(env *menv, mc modelCase, ops []mop, deadline time.Time, slotWait time.Duration) (res modelResult) {
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
	cur := mc.primary // the primary limit now (opChange)
	prim := newModel(cur, env.prefix, start)
	models := map[string]*model{"p": prim}
	if mc.companion.Rate > 0 {
		models["c"] = newModel(mc.companion, env.prefix, start)
	}
	if mc.conc.Rate > 0 {
		models["k"] = newModel(mc.conc, env.prefix, start)
	}
	for name, m := range models {
		m.name = name
	}
	var flow *httpFlow
	all := func() []*model { // every model of the run
		ms := make([]*model, 0, len(models)+4)
		for _, m := range models {
			ms = append(ms, m)
		}
		if flow != nil {
			for _, m := range flow.models {
				ms = append(ms, m)
			}
		}
		return ms
	}
	if env.fake != nil {
		flow = newHTTPFlow(env, mc, start)
	}
	prefetched := func(l core.Limit) core.Limit {
		l.Prefetch = min(mc.prefetch, l.Capacity())
		return l
	}
	pf := prefetched(cur)
	var open []*outstanding
	// lapsed follows the reservations whose slots the Limiter frees in the
	// background (a reserving decision or a settlement whose reply was
	// lost or whose caller left): by id, the earliest end of their leases,
	// the clock at the failure and the latest clock reached since. The
	// Limiter tries until the lease ends. A lease that had (nearly) ended
	// by the clock at the failure may end, in real time, before the first
	// try (on busy cores, up to half a second late); one the clock has
	// ended since may be given up; either way the slots are left to their
	// lease, which a clock that goes back then shows held again:
	// checkSlots lets those be.
	lapsed := map[string]*[3]int64{}
	failedSlots := func(rid string, limits []core.Limit, entries []*mentry, at int64) {
		for k, l := range limits {
			if l.Algorithm != core.Concurrency || rid == "" {
				continue
			}
			end := entries[k].at + l.Period.Microseconds()
			if x := lapsed[rid]; x == nil {
				lapsed[rid] = &[3]int64{end, at, at}
			} else {
				x[0] = min(x[0], end)
			}
		}
	}
	clockMoved := func(at int64) {
		for _, x := range lapsed {
			x[2] = max(x[2], at)
		}
	}
	lastFetch := make([]int64, len(env.lims)) // per Limiter, its last fetch (µs), 0 none
	fetchSeq := make([]int64, len(env.lims))  // and the operation that made it
	fetchEff := make([]int64, len(env.lims))  // and the instant its events count at (mentry.eff)
	fetchWin := make([]int64, len(env.lims))  // and, for a fixed window, its window
	fetchReg := make([]int, len(env.lims))    // and the regime it was counted in (spanAdmit)
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
	failed := func(class, why string) {
		res.fail, res.class = why, class
		res.trace = append(res.trace, "     ^ "+why)
	}
	// armed arms a fault of kind for the script call of the operation
	// about to be made with the context it returns (a decision, or the
	// settlement of reservation rid), when there is one to make; done
	// disarms it once the call has returned and says what the fault hit
	// (nil: none was injected).
	armed := func(kind faultKind, decision bool, rid string) (context.Context, func() *faultPlan) {
		if kind == faultNone || env.faults == nil || !decision && rid == "" {
			return ctx, func() *faultPlan { return nil }
		}
		c, cancel := context.WithCancel(ctx)
		p := &faultPlan{kind: kind, decision: decision, rid: rid, cancel: cancel, left: make(chan struct{})}
		env.faults.arm(p)
		return c, func() *faultPlan {
			close(p.left)
			env.faults.disarm()
			cancel()
			if !p.hit {
				return nil
			}
			return p
		}
	}
	// settle settles o at costs[k] for its k-th limit (with SettleEach
	// when o.each or costs differ), or releases it; with a fault, on a
	// reservation of modelFaulty's.
	settle := func(i int, o *outstanding, costs []int, release bool, fault faultKind) error {
		before := now()
		rid := ""
		if o.lim == modelFaulty {
			rid = o.rid
		}
		c, done := armed(fault, false, rid)
		var err error
		what := "Release"
		switch {
		case release:
			err = o.r.Release(c)
			costs = o.ns
		case o.each || len(costs) > 1 && costs[0] != costs[1]:
			what = fmt.Sprintf("SettleEach(%v)", costs)
			err = o.r.SettleEach(c, costs)
		default:
			what = fmt.Sprintf("Settle(%d)", costs[0])
			err = o.r.Settle(c, costs[0])
		}
		p := done()
		switch {
		case p != nil && err == nil:
			return fmt.Errorf("%s of %s: its reply was %s, and it returned no error", what, o.name, p.kind)
		case p != nil:
			what += fmt.Sprintf(" = %s (it ran: %v)", p.kind, err)
			res.lost++
			failedSlots(o.rid, o.limits, o.entries, before)
		case err != nil:
			return fmt.Errorf("%s of %s: %w", what, o.name, err)
		}
		for k, m := range o.models {
			if err := m.observe(ctx, env.admin, before); err != nil {
				return err
			}
			m.seq = int64(i) + 1
			m.settle(o.entries[k], int64(o.ns[k]), int64(costs[k]), before, o.limits[k])
			switch {
			case costs[k] < o.ns[k]:
				res.refunds++
			case costs[k] > o.ns[k]:
				res.charges++
			}
		}
		res.trace = append(res.trace, fmtOp(i, before, o.lim, "%s of %s (reserved %v)", what, o.name, o.ns))
		return nil
	}
	// decide makes one decision of op (its kind, Limiter and n) and
	// checks it; stop: the run ends (res says why).
	decide := func(i int, op mop) (allowed, stop bool) {
		fail := func(class, why string) (bool, bool) {
			failed(class, why)
			return false, true
		}
		lim := env.lims[op.lim]
		var limits []core.Limit
		var ms []*model
		switch op.kind {
		case opAllow, opReserve:
			limits, ms = []core.Limit{cur}, []*model{prim}
		case opAllowPrefetch:
			limits, ms = []core.Limit{pf}, []*model{prim}
		case opAllowAll:
			p := cur
			if op.n%2 == 1 && mc.prefetch > 0 {
				p = pf
			}
			limits, ms = []core.Limit{p, mc.companion}, []*model{prim, models["c"]}
		case opReserve2:
			limits, ms = []core.Limit{cur, mc.companion}, []*model{prim, models["c"]}
		case opReserveConc:
			limits, ms = []core.Limit{cur, mc.conc}, []*model{prim, models["k"]}
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
		upTo := each && i%4 == 3 // the companion takes up to its cost (a budget's last tokens)
		fault := faultNone
		if op.lim == modelFaulty {
			fault = op.fault
		}
		c, done := armed(fault, true, "")
		var r core.Result
		var rsv *core.Reservation
		var err error
		switch {
		case upTo:
			rsv, err = lim.ReserveUpTo(c, "k", limits, costs, 1<<1)
			if err == nil {
				r = rsv.Result()
			}
		case each:
			rsv, err = lim.ReserveEach(c, "k", limits, costs)
			if err == nil {
				r = rsv.Result()
			}
		case op.kind == opAllow || op.kind == opAllowPrefetch:
			r, err = lim.AllowN(c, "k", limits[0], op.n)
		case op.kind == opAllowAll:
			r, err = lim.AllowAll(c, "k", limits, op.n)
		default:
			rsv, err = lim.Reserve(c, "k", limits, op.n)
			if err == nil {
				r = rsv.Result()
			}
		}
		p := done()
		rid := ""
		if env.faults != nil && op.lim == modelFaulty {
			rid = env.faults.takeRid()
		}
		switch {
		case p != nil && err == nil:
			res.err = fmt.Errorf("op %d: the decision's reply was %s, and it returned no error", i, p.kind)
			return false, true
		case p != nil: // it ran in Redis: what it did stands, and nobody will settle it
			allowed, each := replyLimits(p.reply, len(costs))
			r = core.Result{Allowed: allowed}
			rsv = nil
			if len(p.costs) != len(costs) {
				res.err = fmt.Errorf("op %d: the lost decision sent %d costs for %d limits", i, len(p.costs), len(costs))
				return false, true
			}
			for k, c := range p.costs { // what it asked for (a cost above the capacity is sent as 0: a look)
				costs[k] = int(c)
				if p.upTo[k] && allowed {
					costs[k] = each[k].Taken
				}
			}
		case err != nil:
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
		switch {
		case p != nil:
			line = fmtOp(i, before, op.lim, "%s([%s], %v) = %s (%v); Redis allowed=%v (reply %v)", verb, strings.Join(names, ", "), costs, p.kind, err, r.Allowed, p.reply)
			if rid != "" {
				line += ", id " + rid
			}
			res.lost++
		case fromLease:
			line += " (from the lease)"
		case r.Cached:
			line += " (deny cache)"
		}
		name := ""
		if rsv != nil && r.Allowed && op.n > 0 {
			name = fmt.Sprintf("r%d", i)
			line += " -> " + name
		}
		res.trace = append(res.trace, line)
		for k, l := range limits {
			if r.Allowed && costs[k] > l.Capacity() {
				return fail("capacity", fmt.Sprintf("allowed %d events, above the capacity %d of %v", costs[k], l.Capacity(), l))
			}
		}
		if r.Remaining > r.Limit.Capacity() {
			return fail("remaining", fmt.Sprintf("Remaining %d above the binding limit's capacity %d (%v)", r.Remaining, r.Limit.Capacity(), r.Limit))
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
		o := &outstanding{r: rsv, name: name, lim: op.lim, rid: rid, n: op.n, ns: costs, limits: limits, each: each}
		lease, fetch := int64(0), false
		switch {
		case fromLease:
			lease = fetchSeq[op.lim]
		case p == nil && (op.kind == opAllowPrefetch || op.kind == opAllowAll && limits[0].Prefetch > 0):
			lastFetch[op.lim], fetchSeq[op.lim], fetch = before, int64(i)+1, true
		}
		fold := int64(math.MaxInt64) // entries before every fetch whose lease may still answer fold
		for _, f := range lastFetch {
			if f > 0 && f > before-leaseHorizon(cur) {
				fold = min(fold, f)
			}
		}
		reserving := rsv != nil || p != nil && op.kind != opAllow && op.kind != opAllowPrefetch && op.kind != opAllowAll
		for k, m := range ms {
			if err := m.observe(ctx, env.admin, before); err != nil {
				res.err = err
				return false, true
			}
			m.lease, m.foldBefore = lease, fold
			m.leaseEff, m.leaseWin, m.leaseRegime = fetchEff[op.lim], fetchWin[op.lim], fetchReg[op.lim]
			e, why := m.admit(before, after, int64(costs[k]), rsv != nil)
			m.lease = 0
			if why != "" {
				return fail("over "+m.name, "over the limit: "+why)
			}
			if fetch && k == 0 {
				fetchEff[op.lim], fetchWin[op.lim], fetchReg[op.lim] = e.eff, m.lastWin, e.regime
			}
			if reserving && rsv == nil { // lost in flight: its slots are the Limiter's to free (checkSlots); the model frees them now, leniently
				m.settle(e, int64(costs[k]), int64(costs[k]), before, limits[k])
			}
			o.models, o.entries = append(o.models, m), append(o.entries, e)
		}
		if p != nil && reserving {
			failedSlots(rid, limits, o.entries, before)
		}
		if rsv != nil {
			res.reserved++
			open = append(open, o)
			if len(open) > 6 { // keep the reservations outstanding few: release one now
				j := i % len(open)
				o := open[j]
				open = append(open[:j], open[j+1:]...)
				if err := settle(i, o, nil, true, faultNone); err != nil {
					res.err = err
					return false, true
				}
			}
		}
		return true, false
	}
	// checkSlots releases every outstanding reservation, then waits (at
	// most slotWait, in real time; the clock stands still) until no Concurrency
	// key holds a slot whose lease has not ended: every request has ended,
	// settled, released or lost in flight, and the Limiter frees the slots
	// of those lost in the background (core.Reservation.Settle). A slot
	// still held is leaked until its lease ends. It also fails a
	// settlement sent twice with its refund or charge.
	checkSlots := func(i int) (stop bool) {
		res.checks++
		for len(open) > 0 {
			o := open[0]
			open = open[1:]
			if err := settle(i, o, nil, true, faultNone); err != nil {
				res.err = err
				return true
			}
		}
		if env.faults != nil {
			if why := env.faults.sentTwice(); why != "" {
				failed("twice", why)
				return true
			}
		}
		var keys []string
		for _, m := range all() {
			if m.kind == kindConcurrency {
				keys = append(keys, m.key)
			}
		}
		at := now()
		mayStay := map[string]bool{}
		for rid, x := range lapsed {
			if x[0]-x[1] < 500_000 || x[2] >= x[0] {
				mayStay[rid] = true
			}
		}
		wait := time.Now().Add(slotWait)
		for {
			held, err := liveSlots(ctx, env.admin, keys, at, mayStay)
			switch {
			case err != nil:
				res.err = err
				return true
			case held == "":
				res.trace = append(res.trace, fmt.Sprintf("%4d %-14s check: no Concurrency slot held", i, fmtAt(at)))
				return false
			case time.Now().After(wait):
				var stats []string
				for k, l := range env.lims {
					stats = append(stats, fmt.Sprintf("L%d %+v", k, l.Stats()))
				}
				failed("slots", fmt.Sprintf("every reservation has ended (settled, released, or lost in flight), and after %v Concurrency slots are still held until their lease ends: %s (Stats: %s)",
					slotWait, held, strings.Join(stats, "; ")))
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i, op := range ops {
		if time.Now().After(deadline) {
			break
		}
		res.done = i + 1
		res.failAt = i
		switch op.kind {
		case opAdvance:
			if env.fake != nil {
				env.fake.Advance(op.d)
				clockMoved(now())
			} else {
				time.Sleep(op.d)
			}
			res.trace = append(res.trace, fmt.Sprintf("%4d advance %v", i, op.d))
			continue
		case opStep:
			at := now()
			if op.d < 0 {
				res.backs++
				for _, m := range all() {
					if err := m.backward(ctx, env.admin, at); err != nil {
						res.err = err
						return res
					}
				}
			}
			env.fake.Advance(op.d)
			clockMoved(now())
			res.trace = append(res.trace, fmt.Sprintf("%4d %-14s the clock steps %v", i, fmtAt(at), op.d))
			continue
		case opChange:
			res.changes++
			cur = mc.alt(op.n)
			pf = prefetched(cur)
			prim.change(cur)
			if flow != nil {
				flow.change(cur)
			}
			res.trace = append(res.trace, fmt.Sprintf("%4d %-14s the primary limit is now %v, its state kept", i, fmtAt(now()), cur))
			continue
		case opCheck:
			if env.fake != nil && checkSlots(i) {
				return res
			}
			continue
		case opHTTP:
			before := now()
			n := flow.cost()
			cost := n
			switch op.cost {
			case 0:
				cost = 0
			case 1:
				cost = op.r % n
			case 3:
				cost = n + 1 + op.r%3
			}
			served, class, why, err := flow.serve(ctx, op.lim, op.http, cost,
				func(m *model) error { return m.observe(ctx, env.admin, before) },
				func(m *model, c int64) (*mentry, string) { return m.admit(before, before, c, true) })
			line := fmtOp(i, before, op.lim, "HTTP request, %v = served=%v", op.http, served)
			if served && !op.http.budget && op.http.panics == 0 {
				line += fmt.Sprintf(", response cost %d", cost)
			}
			res.trace = append(res.trace, line)
			switch {
			case err != nil:
				res.err = fmt.Errorf("op %d: %w", i, err)
				return res
			case why != "":
				failed(class, why)
				return res
			}
			if served {
				res.served++
			}
			continue
		case opSettle, opRelease:
			if len(open) == 0 {
				continue
			}
			j := op.pick % len(open)
			if op.pick < 0 { // the -pick-th newest
				j = max(0, len(open)+op.pick)
			}
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
						costs[k] = n + 1 + r%(3*o.limits[0].Capacity())
					}
				}
			}
			if err := settle(i, o, costs, op.kind == opRelease, op.fault); err != nil {
				res.err = err
				return res
			}
			continue
		case opDrain:
			kind := opAllow
			if op.n%2 == 1 && mc.prefetch > 0 {
				kind = opAllowPrefetch
			}
			for k := 0; k < cur.Capacity()+2; k++ {
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
	if env.fake != nil && checkSlots(res.failAt) {
		return res
	}
	return res
}

// liveSlots returns the slots of the Concurrency keys whose lease ends
// after at (their member "hold" is the key's typical hold, not a slot),
// but those of the reservations mayStay holds (slot members are
// "<id>:<i>"), as "key: n (members), ...", or "" when none.
func liveSlots(ctx context.Context, admin redis.UniversalClient, keys []string, at int64, mayStay map[string]bool) (string, error) {
	var held []string
	for _, key := range keys {
		zs, err := admin.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: fmt.Sprintf("(%d", at), Max: "+inf"}).Result()
		if err != nil {
			return "", err
		}
		var slots []string
		for _, z := range zs {
			member := fmt.Sprint(z.Member)
			if rid, _, _ := strings.Cut(member, ":"); member != "hold" && !mayStay[rid] {
				slots = append(slots, member)
			}
		}
		if len(slots) > 0 {
			held = append(held, fmt.Sprintf("%s: %d (%s)", key, len(slots), strings.Join(slots, " ")))
		}
	}
	return strings.Join(held, ", "), nil
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
