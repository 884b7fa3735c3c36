package envoyrls

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redlimit/redlimit/core"
)

// takeRest is the core.Request.TakeRest of an aligned decision: a charge
// too large for what is left takes what is left.
var takeRest = []bool{true}

// decideAll makes the decisions of the limited verdicts, sent together,
// and works out each one's status.
func (s *Server) decideAll(ctx context.Context, vs []verdict) {
	var decide []int // the verdicts that go to Redis
	limited := 0
	for i := range vs {
		v := &vs[i]
		if !v.limited {
			continue
		}
		limited++
		switch {
		case v.aligned:
			decide = append(decide, i)
		case v.rate == 0 && v.hits == 0: // a read of a limit of 0: nothing to deny
			v.res = core.Result{Limit: v.limit, Allowed: true}
		case v.rate == 0: // requests_per_unit 0 denies every request
			p := v.limit.Period
			v.res = core.Result{Limit: v.limit, RetryAfter: p, ResetAfter: p, NextAfter: p}
		case v.over && !v.m.rule.debt: // more than any limit holds: never allowed
			v.res = core.Result{Limit: v.limit, RetryAfter: core.InfDuration}
		default:
			decide = append(decide, i)
		}
	}
	// A request of one limited descriptor has nothing to refund: a
	// denial charges nothing.
	refund := !s.opts.ChargeDenied && limited > 1
	if len(decide) == 1 {
		s.decide(ctx, &vs[decide[0]], refund)
	} else if len(decide) > 1 {
		var wg sync.WaitGroup
		for _, i := range decide[1:] {
			wg.Go(func() { s.decide(ctx, &vs[i], refund) })
		}
		s.decide(ctx, &vs[decide[0]], refund)
		wg.Wait()
	}
	for i := range vs {
		if v := &vs[i]; v.limited && !v.aligned {
			v.ok, v.remaining, v.reset = v.res.Allowed, max(v.res.Remaining, 0), v.res.ResetAfter
		}
	}
}

// decide makes one descriptor's decision: AllowN, or Reserve when it may
// have to be refunded; a debt rule admits a cost of 1 and charges the
// rest of the hits after, without denying; an aligned one counts as the
// reference server does.
func (s *Server) decide(ctx context.Context, v *verdict, refundable bool) {
	var start time.Time
	if s.opts.Observe != nil {
		start = time.Now()
	}
	switch {
	case v.aligned:
		s.decideAligned(ctx, v, refundable)
	case v.m.rule.debt:
		// Admit while anything is left (a cost of 1, or 0 to read), then
		// charge the rest without denying: the key may go into debt.
		n := min(v.hits, 1)
		r, err := s.lim.Reserve(ctx, v.key, []core.Limit{v.limit}, n)
		if err == nil {
			v.res = r.Result()
			if v.res.Allowed && v.hits > n {
				err = r.Settle(context.WithoutCancel(ctx), v.hits)
				v.res.Remaining = max(0, v.res.Remaining-(v.hits-n))
			}
		}
		v.err = err
	case refundable:
		r, err := s.lim.Reserve(ctx, v.key, []core.Limit{v.limit}, v.hits)
		if err == nil {
			v.res, v.res0 = r.Result(), r
		}
		v.err = err
	default:
		v.res, v.err = s.lim.AllowN(ctx, v.key, v.limit, v.hits)
	}
	if s.opts.Observe != nil {
		v.dur = time.Since(start)
	}
}

// decideAligned decides an aligned verdict (align): the hits are
// charged, or what is left of the window's rate+1 when they do not fit;
// the status is OK while the count is within the limit, and says what is
// left of it. Hits that fit are one AllowN (the engine's plainest call);
// only hits that do not, with something left, take the rest in a second.
func (s *Server) decideAligned(ctx context.Context, v *verdict, refundable bool) {
	headroom := v.limit.Rate - v.rate // 1, or 0 for a limit of 4294967295
	if !refundable {
		v.res, v.err = s.lim.AllowN(ctx, v.key, v.limit, v.hits)
		if v.err != nil || v.res.Allowed || v.res.Remaining == 0 {
			v.ok = v.err == nil && v.res.Allowed && v.res.Remaining >= headroom
			v.remaining = max(v.res.Remaining-headroom, 0)
			return
		}
	}
	v.cost[0] = v.hits
	q := core.Request{Key: v.key, Limits: v.lims[:], Costs: v.cost[:], TakeRest: takeRest, Reserve: refundable}
	d, err := s.lim.Decide(ctx, &q)
	if v.err = err; err != nil {
		return
	}
	v.res = d.Result
	v.ok = d.Allowed && v.cost[0] == v.hits && d.Remaining >= headroom
	if v.ok {
		v.remaining = d.Remaining - headroom
		v.res0 = d.Reservation
	}
}

// refund gives back what the descriptors that allowed a request denied
// overall charged, with a context the caller's cancelling does not end
// (the Limiter's timeout still bounds it).
func (s *Server) refund(ctx context.Context, vs []verdict) {
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for i := range vs {
		v := &vs[i]
		r := v.res0
		if r == nil || !v.ok {
			continue
		}
		// The answer reports what is left once the refund is made.
		if v.aligned {
			v.remaining = min(v.remaining+v.hits, v.rate)
		} else {
			v.remaining = min(v.remaining+v.hits, capacity(v))
		}
		v.res.Remaining = v.remaining
		wg.Go(func() {
			if err := r.SettleEach(ctx, zeroCost[:]); err != nil {
				s.logError(fmt.Errorf("refund of %s: %w", v.m.metric, err))
			}
		})
	}
	wg.Wait()
}

// zeroCost settles a reservation of one limit at nothing.
var zeroCost = [1]int{}
