package core_test

import (
	"math/rand/v2"
	"time"
)

// The model check's operations (model_test.go says what it checks): what
// each does, and how a run's list of them is drawn.

type opKind int

const (
	opAdvance       opKind = iota
	opAllow                // AllowN of primary
	opAllowPrefetch        // AllowN of primary with Prefetch
	opAllowAll             // AllowAll of primary (or its prefetch variant) and companion
	opReserve              // Reserve of primary
	opReserve2             // Reserve of primary and companion
	opReserveConc          // Reserve of primary and conc
	opSettle               // Settle a random outstanding reservation
	opRelease              // Release a random outstanding reservation
	opDrain                // AllowN of 1 (primary, or its prefetch variant) until denied
	opChange               // change primary's Rate and Burst to mc.alts[n], its state kept, for every Limiter
	opStep                 // step the clock by d: back (d < 0) or far forward
	opHTTP                 // one request through an HTTP policy (model_http_test.go)
	opCheck                // release every outstanding reservation; no Concurrency slot may stay held
)

// mop is one operation, drawn before the run: what it does does not depend
// on earlier answers, so that a shorter list can be replayed.
type mop struct {
	kind  opKind
	lim   int
	n     int
	d     time.Duration // opAdvance, opStep
	pick  int           // opSettle, opRelease: which outstanding reservation (below 0: the -pick-th newest)
	cost  int           // opSettle, opHTTP: 0: zero, 1: below n, 2: n, 3: above n
	r     int           // opSettle, opHTTP: random for the cost
	fault faultKind     // a decision or settlement of Limiter modelFaulty: its reply lost, or its caller gone
	http  httpOp        // opHTTP
}

const modelLimiters = 3

func genOps(rng *rand.Rand, mc modelCase, count int, realClock bool) []mop {
	l := mc.primary
	c := l.Capacity()
	interval := l.Period / time.Duration(l.Rate)
	full := l.Period * time.Duration((c+l.Rate-1)/l.Rate) // a drained bucket's time to refill
	small := func() mop {                                 // a step of the clock within a burst's time
		return mop{kind: opAdvance, d: time.Duration(1+rng.Int64N(int64(interval)*int64(c)/2000)) * time.Microsecond}
	}
	settleCost := func() int {
		switch r := rng.IntN(100); {
		case r < 45:
			return 0
		case r < 70:
			return 1
		case r < 85:
			return 2
		}
		return 3
	}
	reserveKind := opReserve // one that holds Concurrency slots
	if mc.conc.Rate > 0 {
		reserveKind = opReserveConc
	}
	drain := func() []mop { // take what is left (a Concurrency limit: a few slots)
		if mc.reserving {
			return []mop{{kind: opReserve, lim: rng.IntN(modelLimiters), n: 1}, {kind: opReserve, lim: rng.IntN(modelLimiters), n: 1}}
		}
		return []mop{{kind: opDrain, lim: rng.IntN(modelLimiters), n: rng.IntN(2)}}
	}
	ops := make([]mop, 0, count)
	for len(ops) < count {
		if !realClock { // the clusters of issue 32's defects
			switch rng.IntN(500) {
			case 0, 1, 2, 3, 4: // a reservation made under one rate, refunded under another (state kept)
				lim := rng.IntN(modelLimiters)
				ops = append(ops, mop{kind: opChange, n: rng.IntN(len(mc.alts))})
				if rng.IntN(2) == 0 {
					ops = append(ops, mop{kind: opAdvance, d: full})
				}
				ops = append(ops, mop{kind: opReserve, lim: lim, n: 1 + rng.IntN(max(1, c/2))},
					mop{kind: opChange, n: rng.IntN(len(mc.alts))}, small())
				ops = append(ops, drain()...)
				ops = append(ops, small(), mop{kind: opSettle, lim: lim, pick: -1, cost: 0, r: rng.IntN(1 << 20)})
				ops = append(ops, drain()...)
				continue
			case 5, 6, 7, 8, 9: // a reservation outlives its key's state, the clock goes back, then it is refunded
				lim := rng.IntN(modelLimiters)
				ops = append(ops, mop{kind: opReserve, lim: lim, n: 1 + rng.IntN(max(1, c/4))},
					mop{kind: opReserve, lim: lim, n: 1 + rng.IntN(max(1, c/2))})
				ops = append(ops, drain()...)
				ops = append(ops, mop{kind: opAdvance, d: full + time.Duration(rng.Int64N(int64(l.Period)))},
					mop{kind: opSettle, lim: lim, pick: -2, cost: 0, r: rng.IntN(1 << 20)}, // drained: its refund empties the key
					mop{kind: opStep, d: -time.Duration(1+rng.Int64N(3_000_000)) * time.Microsecond})
				if rng.IntN(2) == 0 {
					ops = append(ops, drain()...)
				} else {
					for j := 0; j < 3; j++ {
						ops = append(ops, mop{kind: reserveKind, lim: rng.IntN(modelLimiters), n: 1 + rng.IntN(max(1, c/3))})
					}
				}
				ops = append(ops, mop{kind: opSettle, lim: lim, pick: -1 - rng.IntN(2), cost: 0, r: rng.IntN(1 << 20)})
				ops = append(ops, drain()...)
				continue
			case 10, 11: // a reserving decision or a settlement whose reply is lost, or whose caller leaves; then no slot may stay held
				for j := 1 + rng.IntN(2); j > 0; j-- {
					ops = append(ops, mop{kind: reserveKind, lim: modelFaulty, n: 1 + rng.IntN(max(1, min(c, 3))), fault: faultLost + faultKind(rng.IntN(2))})
				}
				for j := rng.IntN(3); j > 0; j-- {
					ops = append(ops, small(), mop{kind: opSettle, lim: modelFaulty, pick: rng.IntN(1 << 20), cost: settleCost(),
						r: rng.IntN(1 << 20), fault: faultLost + faultKind(rng.IntN(2))})
				}
				ops = append(ops, small(), mop{kind: opCheck})
				continue
			}
		}
		if !mc.reserving && rng.IntN(12) == 0 { // a cluster: reservations, then refunds in random order between drains
			lim := rng.IntN(modelLimiters)
			k := 2 + rng.IntN(3)
			if rng.IntN(2) == 0 { // from a full bucket
				ops = append(ops, mop{kind: opAdvance, d: full})
			}
			for j := 0; j < k; j++ {
				ops = append(ops, mop{kind: opReserve, lim: lim, n: 1 + rng.IntN(c/2)})
			}
			for j := 0; j < k; j++ {
				ops = append(ops, mop{kind: opSettle, lim: rng.IntN(modelLimiters), pick: rng.IntN(1 << 20), cost: rng.IntN(2), r: rng.IntN(1 << 20)})
				if !realClock {
					ops = append(ops, small())
				} else {
					ops = append(ops, mop{kind: opAdvance, d: time.Duration(rng.Int64N(int64(interval)))})
				}
				ops = append(ops, mop{kind: opDrain, lim: rng.IntN(modelLimiters), n: rng.IntN(2)})
			}
			continue
		}
		if rng.IntN(2) == 0 {
			var d time.Duration
			if realClock {
				switch r := rng.IntN(100); {
				case r < 35:
				case r < 75:
					d = time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
				case r < 97:
					d = time.Duration(rng.Int64N(int64(interval)))
				default:
					d = l.Period
				}
			} else {
				switch r := rng.IntN(100); {
				case r < 35:
				case r < 45:
					d = time.Microsecond
				case r < 70:
					d = time.Duration(1+rng.Int64N(int64(interval/10)/1000)) * time.Microsecond
				case r < 87:
					d = time.Duration(1+rng.Int64N(int64(interval)/1000)) * time.Microsecond
				case r < 92:
					d = interval * time.Duration(1+rng.IntN(4)) / 4
				case r < 97:
					d = time.Duration(int64(interval)+rng.Int64N(int64(2*interval)/1000)*1000) / 1000 * 1000
				default:
					d = l.Period * time.Duration(1+rng.IntN(2))
				}
			}
			if d > 0 {
				ops = append(ops, mop{kind: opAdvance, d: d})
			}
		}
		if !realClock {
			switch r := rng.IntN(1000); {
			case r < 7: // the clock steps back by 1 µs to 3 s
				ops = append(ops, mop{kind: opStep, d: -time.Duration(1+rng.Int64N(3_000_000)) * time.Microsecond})
				continue
			case r < 12: // or far forward
				ops = append(ops, mop{kind: opStep, d: time.Duration(1+rng.Int64N(3_000_000)) * time.Microsecond})
				continue
			case r < 16:
				ops = append(ops, mop{kind: opChange, n: rng.IntN(len(mc.alts))})
				continue
			case r < 19:
				ops = append(ops, mop{kind: opCheck})
				continue
			case r < 80:
				ops = append(ops, mop{kind: opHTTP, lim: rng.IntN(modelLimiters), http: genHTTP(rng, mc), cost: settleCost(), r: rng.IntN(1 << 20)})
				continue
			}
		}
		op := mop{lim: rng.IntN(modelLimiters)}
		switch r := rng.IntN(100); {
		case r < 5:
			op.n = 0
		case r < 8:
			op.n = c + 1 + rng.IntN(2)
		case r < 60:
			op.n = 1 + rng.IntN(min(c, 3))
		default:
			op.n = 1 + rng.IntN(c)
		}
		r := rng.IntN(100)
		switch {
		case mc.reserving:
			switch {
			case r < 45:
				op.kind = opReserve
			case r < 55:
				op.kind = opReserve2
			case r < 85:
				op.kind = opSettle
			default:
				op.kind = opRelease
			}
		case r < 18:
			op.kind = opAllow
		case r < 30:
			op.kind = opAllowPrefetch
		case r < 36:
			op.kind = opAllowAll
		case r < 44:
			op.kind = opDrain
		case r < 62:
			op.kind = opReserve
		case r < 67:
			op.kind = opReserve2
		case r < 71:
			op.kind = opReserveConc
		case r < 94:
			op.kind = opSettle
		default:
			op.kind = opRelease
		}
		if op.kind == opAllowPrefetch && mc.prefetch == 0 {
			op.kind = opAllow
		}
		if op.kind == opReserveConc && mc.conc.Rate == 0 {
			op.kind = opReserve
		}
		if op.kind == opSettle {
			op.pick, op.r, op.cost = rng.IntN(1<<20), rng.IntN(1<<20), settleCost()
		}
		if op.kind == opRelease {
			op.pick = rng.IntN(1 << 20)
		}
		// Now and then a fault: on the faulty Limiter's decisions, on any
		// settlement (of a reservation of that Limiter's, when it is one).
		if !realClock && op.kind != opDrain && (op.lim == modelFaulty || op.kind == opSettle || op.kind == opRelease) && rng.IntN(8) == 0 {
			op.fault = faultLost + faultKind(rng.IntN(2))
		}
		ops = append(ops, op)
	}
	return ops
}
