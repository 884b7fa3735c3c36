package core_test

import (
	"context"
	"fmt"
	"math"
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
	forced bool
	open   bool
	win    int64 // fixed window: its window's start
	seq    int64 // a charge: the operation that made it
	end    int64 // concurrency: when its slots are freed
}

type meterState struct{ t, v int64 } // µs; backlog (meter) or tokens (stepped)

type epoch struct{ anchor, from int64 }

// model is the exact reference of one limit's state on the key.
type model struct {
	l         core.Limit
	kind      modelKind
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
	// the folded state.
	lease, foldBefore, seq int64
	buckets                map[int64]int64 // sliding window: net events per sub-bucket
	size, k                int64           // sliding window
}

func newModel(l core.Limit, prefix string, start int64) *model {
	m := &model{l: l, key: stateKey(prefix, "k", l), per: l.Period.Microseconds(), rate: int64(l.Rate),
		capacity: int64(l.Capacity()), lastWin: noWin, foldBefore: math.MaxInt64}
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
	if m.kind == kindMeter {
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
// operation on it: a window's start, a stepped bucket's anchor.
func (m *model) observe(ctx context.Context, admin redis.UniversalClient) error {
	switch m.kind {
	case kindWindow:
		v, err := admin.HGet(ctx, m.key, "w").Int64()
		if err == redis.Nil {
			return nil
		}
		if err != nil {
			return err
		}
		m.lastWin = v
	case kindStepped:
		v, err := admin.HGet(ctx, m.key, "t").Int64()
		if err == redis.Nil {
			return nil
		}
		if err != nil {
			return err
		}
		if len(m.epochs) == 0 || (v-m.epochs[len(m.epochs)-1].anchor)%m.per != 0 {
			m.epochs = append(m.epochs, epoch{anchor: v, from: v})
		}
	}
	return nil
}

// admit checks that c events admitted between before and after (µs; the
// same on a fake clock) fit the model at after, the most lenient instant,
// and logs them at before, the most lenient for later checks. It returns
// the entry, and why they do not fit ("" when they do).
func (m *model) admit(before, after, c int64, open bool) (*mentry, string) {
	e := &mentry{at: before, n: c, open: open, end: before + m.per}
	if c == 0 { // a limit charged nothing (ReserveEach): nothing to check or count
		e.end = before
		return e, ""
	}
	why := ""
	switch m.kind {
	case kindMeter:
		s := m.state(after)
		if s.v+c*m.per > m.capacity*m.per {
			why = fmt.Sprintf("%v: %d events admitted at %s, but the bucket holds %s of %d events then (a backlog of %d µs·rate)",
				m.l, c, fmtAt(after), fmtEvents(s.v, m.per), m.capacity, s.v)
		}
		m.entries = append(m.entries, e)
	case kindStepped:
		s := m.state(after)
		if s.v < c {
			why = fmt.Sprintf("%v: %d events admitted at %s, but the bucket holds %d tokens then (steps at %s)",
				m.l, c, fmtAt(after), s.v, m.fmtEpochs())
		}
		m.entries = append(m.entries, e)
	case kindWindow:
		w := m.lastWin
		if w == noWin || after < w || before >= w+m.per {
			why = fmt.Sprintf("%v: %d events admitted at %s, outside the window the state holds (%s)", m.l, c, fmtAt(after), fmtAt(w))
			break
		}
		e.win = w
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
		for b := range m.buckets {
			if b < cur-2*m.k {
				delete(m.buckets, b)
			}
		}
		m.buckets[floorDiv(before, m.size)] += c
	case kindSlidingLog:
		i := 0
		for i < len(m.entries) && m.entries[i].at <= after-m.per {
			i++
		}
		m.entries = m.entries[i:]
		var n int64
		for _, x := range m.entries {
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
			if x.end > after {
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

// leaseHorizon bounds how long after its fetch a lease of l may answer:
// the lease plus the time of a whole burst, with room to spare.
func leaseHorizon(l core.Limit) int64 {
	return 2*(20_000+int64(l.Capacity())*l.Period.Microseconds()/int64(l.Rate)) + l.Period.Microseconds()
}

// settle applies a settlement at `at` of entry e (reserved n) at cost.
func (m *model) settle(e *mentry, n, cost, at int64) {
	e.open = false
	if m.kind == kindConcurrency {
		e.end = min(e.end, at)
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
	case kindSlidingWindow:
		m.buckets[floorDiv(at, m.size)] += extra
	default:
		m.entries = append(m.entries, &mentry{at: at, n: extra, forced: true, seq: m.seq})
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
