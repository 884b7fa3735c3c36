package core_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
)

// The model check's models: the reference each admission is checked
// against (model_test.go says why each is exact).

type modelKind int

const (
	kindMeter modelKind = iota
	kindStepped
	kindWindow
	kindSlidingWindow
	kindSlidingLog
	kindConcurrency
)

// mentry is a logged admission: n events at `at` (µs), forced for a
// charge; a reservation's is open until settled.
type mentry struct {
	at, n  int64
	eff    int64 // meter, stepped: the instant its events count at in a span (spanAdmit)
	regime int   // the regime it was counted in (spanAdmit), or for a window the change of the limit
	forced bool
	units  int64 // a meter's charge: what it adds to the backlog, when its debt was bounded (debtRoom); 0: n events
	open   bool
	win    int64 // fixed window: its window's start
	seq    int64 // a charge: the operation that made it
	end    int64 // concurrency: when its slots are freed
	freed  bool  // concurrency: settled, released or lost in flight: it holds nothing, whatever the clock says
}

type meterState struct{ t, v int64 } // µs; backlog (meter) or tokens (stepped)

type epoch struct{ anchor, from int64 }

// model is the exact reference of one limit's state on the key.
type model struct {
	l         core.Limit
	kind      modelKind
	name      string // its part in the run: "p" (primary), "c" (companion), "k" (Concurrency), "m:p", ... (HTTP)
	key       string
	per, rate int64 // period in µs, rate
	capacity  int64

	base    meterState // meter, stepped: the state after the entries folded in
	entries []*mentry  // meter, stepped, sliding log, concurrency
	epochs  []epoch    // stepped: the real step boundaries

	net     map[int64]int64 // fixed window: net events per window start
	charges []mentry        // fixed window: each charge, in the window of win
	lastWin int64           // fixed window: the last window seen, noWin for none

	// A Limiter's prefetched events were counted when it fetched them: a
	// charge (a debt) made after that fetch binds what comes after them,
	// not them (docs/lifecycle.md#prefetch). lease, when above 0, is the
	// operation (seq) of the fetch an admission answered in process came
	// from: charges made after it do not count for that admission.
	// foldBefore keeps the entries a live lease may still need apart from
	// the folded state. leaseEff and leaseWin are that fetch's instant in
	// a span (mentry.eff) and, for a fixed window, its window.
	lease, foldBefore, seq int64
	leaseEff, leaseWin     int64
	leaseRegime            int
	buckets                map[int64]int64 // sliding window: net events per sub-bucket
	size, k                int64           // sliding window

	// The span bound (spanAdmit), for a meter or a stepped bucket once the
	// exact model no longer applies: after a change of the limit, or once
	// the clock has gone back.
	span      bool      // checked by the span bound, not the exact model
	clockBack bool      // the clock has gone back in this run
	spanList  []*mentry // the admissions of the regime, their n net of refunds
	spanMax   int64     // the latest eff in spanList
	regime    int       // counts the regimes begun (and the changes of the limit)
	spanNew   []int64   // stepped: the eff of each new series of steps begun in the regime
	gone      bool      // the key was seen absent since the last admission (clockBack)
	goneAt    int64     // the latest clock it was seen absent at
	keyT      int64     // token, leaky, stepped: field t, as last seen (hasT)
	hasT      bool
}

func newModel(l core.Limit, prefix string, start int64) *model {
	return newModelAt(l, stateKey(prefix, "k", l), start)
}

// newModelAt is newModel of the state key key.
func newModelAt(l core.Limit, key string, start int64) *model {
	m := &model{l: l, key: key, per: l.Period.Microseconds(), rate: int64(l.Rate),
		capacity: int64(l.Capacity()), lastWin: noWin, foldBefore: math.MaxInt64, spanMax: math.MinInt64, goneAt: math.MinInt64}
	switch {
	case l.Algorithm == core.TokenBucket && l.Stepped:
		m.kind, m.base = kindStepped, meterState{t: start, v: m.capacity}
	case l.Algorithm == core.GCRA || l.Algorithm == "" || l.Algorithm == core.TokenBucket || l.Algorithm == core.LeakyBucket:
		m.kind, m.base = kindMeter, meterState{t: start}
	case l.Algorithm == core.FixedWindow:
		m.kind, m.net = kindWindow, map[int64]int64{}
	case l.Algorithm == core.SlidingWindow:
		k := int64(l.Buckets)
		if k == 0 {
			k = core.DefaultBuckets
		}
		m.kind, m.buckets, m.k, m.size = kindSlidingWindow, map[int64]int64{}, k, m.per/k
	case l.Algorithm == core.SlidingLog:
		m.kind = kindSlidingLog
	case l.Algorithm == core.Concurrency:
		m.kind = kindConcurrency
	default:
		panic("no model for " + l.String())
	}
	return m
}

// bucket reports whether the model's state is a meter or a stepped bucket,
// whose meaning depends on the rate and on the clock (checked by the span
// bound once those move).
func (m *model) bucket() bool { return m.kind == kindMeter || m.kind == kindStepped }

// keepsT reports whether the state keeps field t: the time of its last
// update (token and leaky buckets) or of its last step (stepped).
func (m *model) keepsT() bool {
	return m.kind == kindStepped || m.kind == kindMeter && (m.l.Algorithm == core.TokenBucket || m.l.Algorithm == core.LeakyBucket)
}

// change is a change of the limit to l, of the same algorithm, period and
// unit (its state kept): a meter's or stepped bucket's admissions are
// checked from now on by the span bound of l, over those admitted from now
// on; the others' by their exact model, at l's rate.
func (m *model) change(l core.Limit) {
	m.l, m.rate, m.capacity = l, int64(l.Rate), int64(l.Capacity())
	m.regime++ // a lease fetched before is the old limit's
	if m.bucket() {
		m.span = true
		m.newRegime()
	}
}

// backward records that the clock went back from at: a meter's or stepped
// bucket's admissions are checked by the span bound from now on (with
// those logged before), and the state is looked at now (probe).
func (m *model) backward(ctx context.Context, admin redis.UniversalClient, at int64) error {
	m.clockBack = true
	if !m.bucket() {
		return nil
	}
	m.span = true
	return m.probe(ctx, admin, at)
}

func (m *model) newRegime() {
	m.regime++
	m.spanList, m.spanNew, m.spanMax, m.gone, m.goneAt = nil, nil, math.MinInt64, false, math.MinInt64
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// steps counts the real step boundaries in (a, b].
func (m *model) steps(a, b int64) int64 {
	var n int64
	for i, e := range m.epochs {
		hi := int64(1<<62 - 1)
		if i+1 < len(m.epochs) {
			hi = m.epochs[i+1].from
		}
		from, to := max(a+1, e.from, e.anchor+m.per), min(b, hi-1)
		if to >= from {
			n += floorDiv(to-e.anchor, m.per) - floorDiv(from-1-e.anchor, m.per)
		}
	}
	return n
}

// advance moves a meter or stepped state to at.
func (m *model) advance(s meterState, at int64) meterState {
	if at <= s.t {
		return s
	}
	if m.kind == kindMeter {
		s.v = max(0, s.v-(at-s.t)*m.rate)
	} else if k := m.steps(s.t, at); k > 0 {
		s.v = min(m.capacity, s.v+k*m.rate)
	}
	s.t = at
	return s
}

func (m *model) apply(s meterState, e *mentry) meterState {
	s = m.advance(s, e.at)
	if m.kind == kindMeter && e.units > 0 {
		s.v += e.units
	} else if m.kind == kindMeter {
		s.v += e.n * m.per
	} else {
		s.v -= e.n
	}
	return s
}

// state returns the meter or stepped state at `at` of every entry logged
// (for an admission from a lease, less the charges after its fetch).
func (m *model) state(at int64) meterState {
	for len(m.entries) > 0 && !m.entries[0].open && m.entries[0].at < m.foldBefore {
		m.base = m.apply(m.base, m.entries[0])
		m.entries = m.entries[1:]
	}
	s := m.base
	for _, e := range m.entries {
		if e.forced && m.lease > 0 && e.seq > m.lease {
			continue
		}
		s = m.apply(s, e)
	}
	return m.advance(s, at)
}

// noWin is a fixed window model's lastWin before it has seen one: below
// every window's start, those before 1970 (below 0) included.
const noWin = math.MinInt64

// observe reads what the model needs of the real state after an
// operation on it at now: a window's start, a stepped bucket's anchor,
// and once the clock has gone back, whether a meter's key exists and its
// field t (probe).
func (m *model) observe(ctx context.Context, admin redis.UniversalClient, now int64) error {
	switch {
	case m.kind == kindWindow:
		v, err := admin.HGet(ctx, m.key, "w").Int64()
		if err == redis.Nil {
			return nil
		}
		if err != nil {
			return err
		}
		m.lastWin = v
	case m.kind == kindStepped || m.clockBack && m.bucket():
		return m.probe(ctx, admin, now)
	}
	return nil
}

// probe looks at a meter's or stepped bucket's key at now: whether it
// exists (a key seen absent, then made again behind the clock it was
// seen absent at, starts a new regime: spanAdmit), its field t, and a
// stepped bucket's new series of steps.
func (m *model) probe(ctx context.Context, admin redis.UniversalClient, now int64) error {
	if !m.keepsT() { // GCRA: a string
		n, err := admin.Exists(ctx, m.key).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			m.gone, m.goneAt = true, max(m.goneAt, now)
		}
		return nil
	}
	v, err := admin.HGet(ctx, m.key, "t").Int64()
	if err == redis.Nil {
		if m.clockBack {
			m.gone, m.goneAt = true, max(m.goneAt, now)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if m.clockBack && m.hasT && v < m.keyT { // t only grows while the key lives: it was made anew
		m.gone, m.goneAt = true, max(m.goneAt, m.keyT)
	}
	m.keyT, m.hasT = v, true
	if m.kind == kindStepped && (len(m.epochs) == 0 || (v-m.epochs[len(m.epochs)-1].anchor)%m.per != 0) {
		m.epochs = append(m.epochs, epoch{anchor: v, from: v})
		if m.span && len(m.spanList) > 0 {
			m.spanNew = append(m.spanNew, max(now, v))
		}
	}
	return nil
}

// effOf returns the instant an admission at before (the clock) counts at
// in a span: for a token, leaky or stepped bucket whose own clock (field
// t, just observed) is ahead of the clock, which went back, that one (its
// state is as it was then: it refills nothing while the clock is behind);
// for an admission answered from a lease, its fetch's.
func (m *model) effOf(before int64) int64 {
	switch {
	case m.lease > 0:
		return m.leaseEff
	case m.clockBack && m.keepsT() && m.hasT:
		return max(before, m.keyT)
	}
	return before
}

// admit checks that c events admitted between before and after (µs; the
// same on a fake clock) fit the model at after, the most lenient instant,
// and logs them at before, the most lenient for later checks. It returns
// the entry, and why they do not fit ("" when they do).
func (m *model) admit(before, after, c int64, open bool) (*mentry, string) {
	e := &mentry{at: before, n: c, open: open, end: before + m.per}
	if c == 0 { // a limit charged nothing (ReserveEach): nothing to check or count
		e.end, e.freed = before, true
		return e, ""
	}
	why := ""
	e.regime = m.regime
	switch m.kind {
	case kindMeter, kindStepped:
		e.eff = m.effOf(before)
		if m.span {
			return e, m.spanAdmit(e)
		}
		m.spanList = append(m.spanList, e) // for the span bound, should the clock go back
		m.spanMax = max(m.spanMax, e.eff)
		m.trimSpan()
		s := m.state(after)
		switch {
		case m.kind == kindMeter && s.v+c*m.per > m.capacity*m.per:
			why = fmt.Sprintf("%v: %d events admitted at %s, but the bucket holds %s of %d events then (a backlog of %d µs·rate)",
				m.l, c, fmtAt(after), fmtEvents(s.v, m.per), m.capacity, s.v)
		case m.kind == kindStepped && s.v < c:
			why = fmt.Sprintf("%v: %d events admitted at %s, but the bucket holds %d tokens then (steps at %s)",
				m.l, c, fmtAt(after), s.v, m.fmtEpochs())
		}
		m.entries = append(m.entries, e)
	case kindWindow:
		w := m.lastWin
		if m.lease > 0 && m.leaseWin != noWin { // counted in its fetch's window
			w = m.leaseWin
		}
		// A clock that went back decides in the window the state holds,
		// which may start after it.
		if w == noWin || after < w && !m.clockBack || before >= w+m.per {
			why = fmt.Sprintf("%v: %d events admitted at %s, outside the window the state holds (%s)", m.l, c, fmtAt(after), fmtAt(w))
			break
		}
		e.win = w
		if m.lease > 0 && m.leaseRegime != m.regime { // fetched under a limit since changed: counted then, at its rate
			m.net[w] += c
			break
		}
		net := m.net[w]
		for _, x := range m.charges {
			if x.win == w && m.lease > 0 && x.seq > m.lease {
				net -= x.n
			}
		}
		if net+c > m.rate {
			why = fmt.Sprintf("%v: %d events admitted at %s in the window from %s, which had %d (net of refunds) of %d",
				m.l, c, fmtAt(after), fmtAt(w), m.net[w], m.rate)
		}
		m.net[w] += c
	case kindSlidingWindow:
		cur := floorDiv(after, m.size)
		into := after - cur*m.size
		weighted := m.buckets[cur-m.k] * (m.size - into)
		for i := cur - m.k + 1; i <= cur; i++ {
			weighted += m.buckets[i] * m.size
		}
		if weighted+c*m.size > m.rate*m.size {
			why = fmt.Sprintf("%v: %d events admitted at %s, but the window's weighted count is %s of %d (sub-buckets %s)",
				m.l, c, fmtAt(after), fmtEvents(weighted, m.size), m.rate, m.fmtBuckets(cur))
		}
		for b := range m.buckets { // as the script drops them when it stores
			if b < cur-m.k {
				delete(m.buckets, b)
			}
		}
		m.buckets[floorDiv(before, m.size)] += c
	case kindSlidingLog:
		m.trimLog(after)
		var n int64
		for _, x := range m.entries { // those ahead of a clock that went back count too, as in the script
			n += x.n
		}
		if n+c > m.rate {
			why = fmt.Sprintf("%v: %d events admitted at %s, but (%s, %s] already holds %d (net of refunds) of %d",
				m.l, c, fmtAt(after), fmtAt(after-m.per), fmtAt(after), n, m.rate)
		}
		m.entries = append(m.entries, e)
	case kindConcurrency:
		kept := m.entries[:0]
		var held int64
		for _, x := range m.entries {
			if x.end > after && !x.freed { // the script drops lease ends at or before now when it stores
				kept = append(kept, x)
				held += x.n
			}
		}
		m.entries = kept
		if held+c > m.rate {
			why = fmt.Sprintf("%v: %d slots taken at %s while %d of %d are held", m.l, c, fmtAt(after), held, m.rate)
		}
		m.entries = append(m.entries, e)
	}
	return e, why
}

// trimLog drops the sliding log's entries at or before at-Period, as the
// script does whenever it logs: all of them, those logged after later
// ones by a clock that went back included.
func (m *model) trimLog(at int64) {
	kept := m.entries[:0]
	for _, x := range m.entries {
		if x.at > at-m.per {
			kept = append(kept, x)
		}
	}
	clear(m.entries[len(kept):])
	m.entries = kept
}

// The span bound. A meter (GCRA, the token and leaky buckets, shaping)
// holds everyone's events in one queue that drains Rate per Period: as a
// theoretical arrival time (TAT) that each admission moves on by its
// events' time and that nothing but a refund moves back. An admission at
// instant τ fits only if TAT − τ, with its events, is at most the
// capacity's time. So for the admissions whose instants lie in [s, t]:
// the first one leaves the TAT at s or later plus its events' time, each
// later one adds its events' time, and the last one fits at t or earlier:
//
//	summed events ≤ capacity + Rate·(t − s)/Period
//
// whatever order they came in, whatever the clock did in between, and
// whatever the state held before the first one. GCRA counts in exact
// units (gcd(Period, Rate)), with no rounding of its interval, so that is
// its exact bound; the check allows capacity + ceil(Rate·(t−s)/Period),
// the rounding up covering, for the rates of these runs (below one event a
// µs), a TAT read across a change of rate, whose fraction of a µs in the
// old rate's units is read in the new one's: less than one µs, much less
// than an event. Refunded events are left out (as if never admitted, the
// most lenient reading of "never more than without them"); a charge's
// debt, only stricter, is left out too.
//
// The instant of an admission (mentry.eff) is the clock it was decided at,
// except: a token or leaky bucket that the clock went back from keeps its
// own clock, field t (it refills nothing until the clock is back), and its
// TAT runs on that one, so its admissions count at max(clock, t); the
// events of a lease count at its fetch, which counted them.
//
// A stepped bucket adds Rate tokens at each step of its series (its
// anchor plus whole Periods; its field t is the last step) and holds at
// most its capacity, so: summed tokens ≤ capacity + Rate·(the steps in
// (s, t]). Its admissions count at max(clock, t) too; a step in (s, t] of
// the series is one of at most ceil((t−s)/Period), and a new series (the
// key emptied and made again, with another anchor) may add one more step
// for each time it begins in the span.
//
// The bound holds from a state the key keeps: a key deleted (a meter
// that drained, a bucket full again) and made anew behind the clock it
// was deleted at (the clock went back) starts afresh, its TAT behind the
// old one; so does a change of the limit (change), whose span counts the
// admissions from the change on. Such a fresh start begins a new regime,
// whose admissions alone are summed; events a lease took in an earlier
// regime (its fetch counted them in the key since deleted) are left out.
func (m *model) spanAdmit(e *mentry) string {
	switch {
	case m.lease > 0 && m.leaseRegime != m.regime:
		return "" // counted in a regime that has ended (its key made anew since): left out
	case m.gone && m.lease == 0: // a decision of Redis's, on the key made anew
		if e.eff < max(m.goneAt, m.spanMax) {
			m.newRegime()
			e.regime = m.regime
		}
		m.gone, m.goneAt = false, math.MinInt64
	}
	why := m.spanCheck(e)
	m.spanList = append(m.spanList, e)
	m.spanMax = max(m.spanMax, e.eff)
	m.trimSpan()
	return why
}

// spanBound returns the most events that may be admitted at instants in
// [s, t] of the regime.
func (m *model) spanBound(s, t int64) int64 {
	if m.kind == kindStepped {
		steps := ceilDiv(t-s, m.per)
		for _, x := range m.spanNew {
			if s < x && x <= t {
				steps++
			}
		}
		return m.capacity + m.rate*steps
	}
	return m.capacity + ceilDiv(m.rate*(t-s), m.per)
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// spanCheck checks every span [s, t] of the regime's instants that holds
// e's, with e's events, against spanBound.
func (m *model) spanCheck(e *mentry) string {
	type point struct{ at, n int64 }
	ps := make([]point, 0, len(m.spanList)+1)
	for _, x := range m.spanList {
		if x.n > 0 {
			ps = append(ps, point{x.eff, x.n})
		}
	}
	ps = append(ps, point{e.eff, e.n})
	slices.SortFunc(ps, func(a, b point) int { return cmp.Compare(a.at, b.at) })
	sum := make([]int64, len(ps)+1)
	for i, p := range ps {
		sum[i+1] = sum[i] + p.n
	}
	for i := 0; i < len(ps) && ps[i].at <= e.eff; i++ {
		if i > 0 && ps[i-1].at == ps[i].at {
			continue // the first of equal instants starts the span
		}
		for j := len(ps) - 1; j >= i && ps[j].at >= e.eff; j-- {
			if j+1 < len(ps) && ps[j+1].at == ps[j].at {
				continue // the last of equal instants ends it
			}
			if got, most := sum[j+1]-sum[i], m.spanBound(ps[i].at, ps[j].at); got > most {
				return fmt.Sprintf("%v: %d events admitted counting at %s, and the admissions counting from %s to %s (since %s), net of refunds, are %d; at most %d fit in that span (the capacity %d and %d refilled)",
					m.l, e.n, fmtAt(e.eff), fmtAt(ps[i].at), fmtAt(ps[j].at), m.regimeWhy(), got, most, m.capacity, most-m.capacity)
			}
		}
	}
	return ""
}

func (m *model) regimeWhy() string {
	if m.clockBack {
		return "the regime began: the run's start, the limit's last change or the key made anew behind the clock"
	}
	return "the limit's last change"
}

// trimSpan keeps the regime's admissions bounded: those that have counted
// for long before the latest no longer take part in a span that could
// fail (a loss of strictness only), and at most 300.
func (m *model) trimSpan() {
	horizon := 3*m.per*ceilDiv(m.capacity, m.rate) + 2*m.per
	kept := m.spanList[:0]
	for _, x := range m.spanList {
		if x.n > 0 && x.eff >= m.spanMax-horizon {
			kept = append(kept, x)
		}
	}
	clear(m.spanList[len(kept):])
	m.spanList = kept
	if len(m.spanList) > 300 {
		m.spanList = m.spanList[len(m.spanList)-300:]
	}
}

// leaseHorizon bounds how long after its fetch a lease of l may answer:
// the lease plus the time of a whole burst, with room to spare.
func leaseHorizon(l core.Limit) int64 {
	return 2*(20_000+int64(l.Capacity())*l.Period.Microseconds()/int64(l.Rate)) + l.Period.Microseconds()
}

// settle applies a settlement at `at` of entry e (reserved n) at cost,
// under the limit l it was reserved with.
func (m *model) settle(e *mentry, n, cost, at int64, l core.Limit) {
	e.open = false
	if m.kind == kindConcurrency {
		e.end, e.freed = min(e.end, at), true
		return
	}
	if cost < n {
		switch m.kind {
		case kindWindow:
			m.net[e.win] -= n - cost
		case kindSlidingWindow:
			m.buckets[floorDiv(e.at, m.size)] -= n - cost
		}
		e.n = cost
		return
	}
	if cost == n {
		return
	}
	extra := cost - n
	switch m.kind {
	case kindWindow: // in the window of now, as observed after the settlement
		if m.lastWin != noWin {
			m.net[m.lastWin] += extra
			kept := m.charges[:0]
			for _, x := range m.charges {
				if x.win+m.per > at {
					kept = append(kept, x)
				}
			}
			m.charges = append(kept, mentry{at: at, n: extra, win: m.lastWin, seq: m.seq})
		}
	case kindSlidingWindow: // in now's sub-bucket, up to three allowances in the window, as the script bounds a debt
		cur, held := floorDiv(at, m.size), int64(0)
		for b, n := range m.buckets {
			if (b-cur)*m.size > -m.per {
				held += n
			}
		}
		if extra = min(extra, 3*int64(l.Capacity())-held); extra > 0 {
			m.buckets[cur] += extra
		}
	case kindSlidingLog: // logged at now, at most the burst (more would change nothing), as the script trims
		m.trimLog(at)
		m.entries = append(m.entries, &mentry{at: at, n: min(extra, int64(l.Capacity())), forced: true, seq: m.seq})
	default:
		if !m.span { // a debt is left out of the span bound: only stricter
			e := &mentry{at: at, n: extra, forced: true, seq: m.seq}
			m.boundDebt(e, at, l)
			m.entries = append(m.entries, e)
		}
	}
}

// boundDebt bounds the charge e at `at` under l as the scripts bound a
// debt: a meter's backlog goes up to at most l's capacity and MaxDebt's
// worth of events (one Period's by default), a stepped bucket's tokens
// down to at most that far below 0 in whole steps, and a charge never
// lowers the debt it finds. It counts from the model's state now, which
// never holds more than the real one (refunds count from the instant of
// their reservation): a debt the model bounds is as deep as the real one,
// or deeper.
func (m *model) boundDebt(e *mentry, at int64, l core.Limit) {
	debt := l.MaxDebt.Microseconds()
	if debt == 0 {
		debt = m.per
	}
	s := m.state(at)
	if m.kind == kindStepped {
		e.n = min(e.n, max(0, s.v+debt/m.per*int64(l.Rate)))
		return
	}
	room := int64(l.Capacity())*m.per + debt*int64(l.Rate) - s.v // in units: an event is per
	if room < e.n*m.per {
		e.units = max(0, room)
		e.n = 0
	}
}

func (m *model) fmtEpochs() string {
	var s []string
	for _, e := range m.epochs {
		s = append(s, fmt.Sprintf("%s+k·%v from %s", fmtAt(e.anchor), m.l.Period, fmtAt(e.from)))
	}
	return strings.Join(s, "; ")
}

func (m *model) fmtBuckets(cur int64) string {
	var s []string
	for i := cur - m.k; i <= cur; i++ {
		s = append(s, fmt.Sprintf("%s:%d", fmtAt(i*m.size), m.buckets[i]))
	}
	return strings.Join(s, " ")
}

func fmtAt(us int64) string {
	return fmt.Sprintf("+%v", time.Duration(us-modelT0.UnixMicro())*time.Microsecond)
}

func fmtEvents(v, unit int64) string {
	return strconv.FormatFloat(float64(v)/float64(unit), 'f', -1, 64)
}
