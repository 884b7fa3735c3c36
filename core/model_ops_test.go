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
)

// mop is one operation, drawn before the run: what it does does not depend
// on earlier answers, so that a shorter list can be replayed.
type mop struct {
	kind opKind
	lim  int
	n    int
	d    time.Duration // opAdvance
	pick int           // opSettle, opRelease: which outstanding reservation
	cost int           // opSettle: 0: zero, 1: below n, 2: n, 3: above n
	r    int           // opSettle: random for the cost
}

const modelLimiters = 3

func genOps(rng *rand.Rand, mc modelCase, count int, realClock bool) []mop {
	l := mc.primary
	c := l.Capacity()
	interval := l.Period / time.Duration(l.Rate)
	ops := make([]mop, 0, count)
	for len(ops) < count {
		if !mc.reserving && rng.IntN(12) == 0 { // a cluster: reservations, then refunds in random order between drains
			lim := rng.IntN(modelLimiters)
			k := 2 + rng.IntN(3)
			if rng.IntN(2) == 0 { // from a full bucket
				ops = append(ops, mop{kind: opAdvance, d: l.Period * time.Duration((c+l.Rate-1)/l.Rate)})
			}
			for j := 0; j < k; j++ {
				ops = append(ops, mop{kind: opReserve, lim: lim, n: 1 + rng.IntN(c/2)})
			}
			for j := 0; j < k; j++ {
				ops = append(ops, mop{kind: opSettle, lim: rng.IntN(modelLimiters), pick: rng.IntN(1 << 20), cost: rng.IntN(2), r: rng.IntN(1 << 20)})
				if !realClock {
					ops = append(ops, mop{kind: opAdvance, d: time.Duration(1+rng.Int64N(int64(interval)*int64(c)/2000)) * time.Microsecond})
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
			op.pick, op.r = rng.IntN(1<<20), rng.IntN(1<<20)
			switch r := rng.IntN(100); {
			case r < 45:
				op.cost = 0
			case r < 70:
				op.cost = 1
			case r < 85:
				op.cost = 2
			default:
				op.cost = 3
			}
		}
		if op.kind == opRelease {
			op.pick = rng.IntN(1 << 20)
		}
		ops = append(ops, op)
	}
	return ops
}
