package grpclimit

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// Limiter decides calls as the interceptors do, for code that asks "may
// this call proceed?" before it runs: it satisfies go-grpc-middleware v2's
// ratelimit.Limiter interface (Limit(ctx) error), so
// ratelimit.UnaryServerInterceptor(limiter) uses redlimit without this
// package's interceptors. Prefer the interceptors where you can:
// go-grpc-middleware answers every error of Limit with
// codes.ResourceExhausted and a message of its own, dropping the
// RetryInfo detail and the codes.Unavailable of FailClosed (the header
// metadata still reaches the client), and it has no hook after the
// handler, so a Limiter cannot hold a Concurrency slot for a call or
// settle it at its true cost: NewLimiter refuses Concurrency limits given
// as its limit or in WithRules, and WithResponseCost, or a Concurrency
// limit given through redlimit.WithAlso, is settled as soon as the call is
// admitted. A Limiter is safe for concurrent use.
type Limiter struct {
	p redlimit.Policy
}

// NewLimiter checks limit and opts, as UnaryServerInterceptor does, and
// returns a Limiter that decides by them. It does no I/O.
func NewLimiter(l *core.Limiter, limit core.Limit, opts ...Option) (*Limiter, error) {
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	concurrent := limit.Algorithm == core.Concurrency
	states, _ := c.rules.States("") // a table it cannot read: newPolicy says why
	for _, s := range states {
		concurrent = concurrent || slices.ContainsFunc(s.Request.Limits, func(l core.Limit) bool { return l.Algorithm == core.Concurrency })
	}
	if concurrent {
		return nil, errors.New("grpclimit: a Limiter cannot hold a Concurrency slot until the call ends: use the interceptors")
	}
	p, _, err := newPolicy(l, limit, opts)
	if err != nil {
		return nil, err
	}
	return &Limiter{p: p}, nil
}

// Limit decides the call of a server context: its method is grpc.Method's,
// its peer and metadata are the context's. It sets the rate-limit header
// metadata with grpc.SetHeader (which fails silently outside a server
// call) and returns nil when the call may proceed, or the status the
// interceptors end a refused call with (codes.ResourceExhausted with
// RetryInfo, codes.Unavailable, codes.InvalidArgument), as an error.
func (l *Limiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	md := metadata.MD{}
	d := redlimit.ServeRequest(l.p, request(ctx, method), md, func() int { return http.StatusOK })
	if len(md) > 0 {
		_ = grpc.SetHeader(ctx, md)
	}
	if !d.Allowed() {
		return refusal(ctx, d, md)
	}
	return nil
}
