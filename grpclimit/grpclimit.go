// Package grpclimit puts redlimit in front of gRPC services: unary and
// stream server interceptors that decide every call as the HTTP adapters
// decide a request, with the same policies, keys, options and Redis state.
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerSecond(20))),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, core.PerSecond(20))),
//	)
//
// It is a module of its own (github.com/redlimit/redlimit/grpclimit), so
// that HTTP-only users never download grpc.
//
// # A call as the policy sees it
//
// A call is decided through redlimit's one request flow
// (redlimit.ServeRequest) as a redlimit.Request built from the call
// itself: method POST, route and path the call's full method
// ("/pkg.Service/Method"), host its :authority, peer the peer's address
// (peer.FromContext), metadata the incoming metadata, context the call's.
// No *http.Request is made up for it. Calls are keyed by the peer's IP
// address by default (WithIPKey), giving the same "ip:..." keys as
// keyfunc.IP on HTTP, or by a function of the call (WithKey). A policy
// named the same on an HTTP gateway and a gRPC server shares its state.
//
// What the HTTP layer does with functions of an *http.Request, this
// package does with functions of the call's context and full method:
//
//	HTTP (redlimit)              gRPC (grpclimit)
//	WithKey(keyfunc.Func)        WithKey, WithIPKey
//	WithSkip                     WithSkip
//	WithRequestLimits            WithLimits
//	WithObserver                 WithObserver
//	WithResponseCost             WithResponseCost
//
// redlimit.WithKey, WithSkip and WithRequestLimits given through With
// would never see a call: the interceptors refuse them at construction,
// naming the option to use. redlimit.WithObserver's and
// WithResponseCost's functions are called for calls, with a nil
// *http.Request (so promlimit's and otellimit's observers count calls as
// they are).
//
// # Answers
//
// A call that may proceed gets the rate-limit fields in its header
// metadata, lowercase, with the values the HTTP layer writes: x-ratelimit-limit,
// x-ratelimit-remaining and x-ratelimit-reset by default, ratelimit-policy
// and ratelimit with redlimit.WithHeaders(redlimit.HeadersDraft). A call
// that may not proceed is not handed to the handler and ends with a
// status:
//
//   - denied: codes.ResourceExhausted, "rate limit exceeded", with a
//     google.rpc.RetryInfo detail whose retry_delay is the wait
//     (redlimit.Decision.RetryAfter: the binding limit's RetryAfter, with
//     redlimit.WithRetryAfterJitter's jitter, rounded up to the
//     millisecond), and header metadata retry-after (the same, in whole
//     seconds, rounded up) beside the rate-limit fields;
//   - Redis failing under redlimit.FailClosed: codes.Unavailable,
//     "rate limiter unavailable", RetryInfo of 1 s and retry-after: 1;
//   - no key: codes.InvalidArgument, "request has no rate limit key";
//     WithLimits' function failing: codes.InvalidArgument, "request's
//     rate limits could not be chosen"; limits it picked that are invalid,
//     or whose burst is below redlimit.WithCost's n (HTTP's 400):
//     codes.InvalidArgument, "request's rate limits are invalid" or
//     "request costs more than its rate limit allows"; each logged as on
//     HTTP; the status never carries the error's details;
//   - the client gone while a shaping limit made the call wait: the
//     context's status (codes.Canceled or codes.DeadlineExceeded).
//
// Redis failing under the default redlimit.FailOpen lets the call through
// without rate-limit metadata; the error is logged and observed.
//
// # Requests in flight
//
// A policy with a core.Concurrency limit holds a slot per call until its
// handler returns: a unary handler, or a stream handler, that is for the
// stream's whole life. A handler that panics frees its slot, and the panic
// goes on up; no cost function is called for it, and a budget (WithBudget)
// is settled at what it reported to its context's redlimit.Usage. With WithResponseCost, each admitted call is settled after
// its handler, at the cost its function returns for the handler's reply
// and error. The same from redlimit.WithResponseCost gets the HTTP status
// of the call's gRPC code (the usual mapping: OK 200, InvalidArgument 400,
// Unauthenticated 401, PermissionDenied 403, NotFound 404,
// ResourceExhausted 429, Unavailable 503, ...), a nil request and a nil
// header.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// Option configures an interceptor: redlimit's options (With), functions
// of the call (WithKey, WithSkip, WithLimits, WithObserver,
// WithResponseCost), and limits per method (WithRules). Options apply in
// order; of two that set the same thing, the later wins.
type Option func(*config)

// config is what the Options of an interceptor say.
type config struct {
	policy   []redlimit.Option
	rules    redlimit.Rules
	hasRules bool // WithRules was given, maybe with an empty table
	limits   bool // WithLimits was given a function
	outcomes bool // WithResponseCost or WithBudget was given: keep each call's outcome for it
	budgets  bool // WithBudget was given: the handler's context carries a redlimit.Usage
}

// With applies redlimit's options to the interceptor's policy, in order,
// as on every adapter. Those that mean something for calls:
// redlimit.WithName (the state's scope and the metrics label; ignored with
// WithRules, whose rules are named by their patterns), WithAlso,
// WithCost, WithFailure, WithDryRun, WithObserver (so promlimit's and
// otellimit's Metrics.Observer() attach as they are; the request is nil),
// WithResponseCost (request and header nil), WithMaxCost, WithHeaders,
// WithResetUnix, WithRetryAfterJitter and WithPartitionKey.
// redlimit.WithKey, WithSkip and WithRequestLimits take functions of an
// *http.Request, which a call does not have: an interceptor or Limiter
// given one of them through With (and not a later WithKey, WithIPKey,
// WithSkip or WithLimits of this package) is refused at construction.
// WithProblemDetails and WithDenyHandler shape an HTTP body that a call
// does not have: they change nothing, and a call that does not pass
// always ends with the status the package documentation lists.
func With(opts ...redlimit.Option) Option {
	return func(c *config) { c.policy = append(c.policy, opts...) }
}

// WithKey keys calls by what key returns for the call's context and full
// method ("/pkg.Service/Method"), for example a user an authentication
// interceptor put in the context. An error is answered
// codes.InvalidArgument, never let through unlimited; return an error
// wrapping keyfunc.ErrNoKey for a call without the identity. The default
// is the peer's IP address (WithIPKey()). key must be safe for
// concurrent use. Of WithKey and WithIPKey, the later wins.
func WithKey(key func(ctx context.Context, fullMethod string) (string, error)) Option {
	if key == nil {
		return With(redlimit.WithRequestKey(nil)) // refused, as redlimit.WithKey(nil) is
	}
	return With(redlimit.WithRequestKey(func(q redlimit.Request) (string, error) {
		return key(q.Context, q.Route)
	}))
}

// WithIPKey keys calls by the client's IP address, as keyfunc.IP keys HTTP
// requests with the same options: the peer's address by default, the
// default key of an interceptor; behind proxies named with
// keyfunc.TrustProxies, the address they put in the x-forwarded-for
// metadata (or the field TrustHeader names), which a client chooses, so
// only when told to. A peer on a Unix socket is keyfunc.UnixSocketKey.
func WithIPKey(opts ...keyfunc.IPOption) Option {
	ip := keyfunc.IPOf(opts...)
	return With(redlimit.WithRequestKey(func(q redlimit.Request) (string, error) {
		return ip(q.Peer, unixPeer(q.Context), q.Values)
	}))
}

// unixPeer reports whether the call of ctx came over a Unix socket.
func unixPeer(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	switch {
	case !ok || p.Addr == nil:
		return false
	case strings.HasPrefix(p.Addr.Network(), "unix"):
		return true
	}
	return p.LocalAddr != nil && strings.HasPrefix(p.LocalAddr.Network(), "unix")
}

// WithRules limits calls per method, on top of the interceptor's limit: a
// table of patterns, "/pkg.Service/Method" for one method or
// "/pkg.Service/*" for every method of a service, to limit strings
// (core.ParseLimits' grammar), typically loaded with redlimit.ParseRules.
// The interceptor's limit is the table's catch-all ("*", so the table
// must not have one): it applies to every call, decided with the limits
// of the rule that matches the call most specifically, all or nothing, in
// one round trip; a call no rule matches is decided under it alone. Each
// rule is a policy named by its pattern. A pattern of another form, or a
// table without rules, is an error wrapping redlimit.ErrInvalidRules;
// redlimit.WithAlso and WithRequestLimits are not for rules. The default
// is no rules; a later WithRules replaces an earlier one's table.
func WithRules(rules redlimit.Rules) Option {
	copied := make(redlimit.Rules, len(rules))
	for pattern, spec := range rules {
		copied[pattern] = spec
	}
	return func(c *config) { c.rules, c.hasRules = copied, true }
}

// UnaryServerInterceptor returns an interceptor that limits unary calls
// by limit, with opts (see the package documentation for what a call
// looks like to the policy and what a denied call gets). It panics if the
// limit or an option is invalid: it runs at start-up. The interceptor is
// safe for concurrent use. Chain one per server, with WithRules for
// limits per method: each interceptor adds its own rate-limit fields to
// the header metadata, so with two a client sees each field twice.
func UnaryServerInterceptor(l *core.Limiter, limit core.Limit, opts ...Option) grpc.UnaryServerInterceptor {
	p, c, err := newPolicy(l, limit, opts)
	if err != nil {
		panic(err)
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		md := metadata.MD{}
		ctx = redlimit.ContextWithDecisions(ctx) // the handler finds every interceptor's Decision there
		if c.budgets {
			ctx = redlimit.ContextWithUsage(ctx, nil)
		}
		q, out := request(ctx, info.FullMethod), c.outcome()
		if out != nil {
			out.req = req
			q.Context = context.WithValue(ctx, outcomeKey{}, out)
		}
		d := redlimit.ServeRequest(p, q, md, func() int {
			if len(md) > 0 {
				_ = grpc.SetHeader(ctx, md) // fails only once headers were sent: never before the handler
			}
			resp, err = handler(ctx, req)
			if out != nil {
				out.reply, out.err = resp, err
			}
			return httpStatus(err)
		})
		if !d.Allowed() {
			if len(md) > 0 {
				_ = grpc.SetHeader(ctx, md)
			}
			return nil, refusal(ctx, d, md)
		}
		return resp, err
	}
}

// StreamServerInterceptor returns an interceptor that limits streaming
// calls by limit, with opts: one decision when the stream opens, whatever
// it carries; a Concurrency limit's slot is held until the stream handler
// returns. It panics if the limit or an option is invalid: it runs at
// start-up. The interceptor is safe for concurrent use.
func StreamServerInterceptor(l *core.Limiter, limit core.Limit, opts ...Option) grpc.StreamServerInterceptor {
	p, c, err := newPolicy(l, limit, opts)
	if err != nil {
		panic(err)
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		ctx := redlimit.ContextWithDecisions(ss.Context()) // the handler finds every interceptor's Decision there
		if c.budgets {
			ctx = redlimit.ContextWithUsage(ctx, nil)
		}
		if ctx != ss.Context() {
			ss = &usageStream{ServerStream: ss, ctx: ctx}
		}
		md := metadata.MD{}
		q, out := request(ctx, info.FullMethod), c.outcome()
		if out != nil {
			q.Context = context.WithValue(ctx, outcomeKey{}, out)
		}
		d := redlimit.ServeRequest(p, q, md, func() int {
			if len(md) > 0 {
				_ = ss.SetHeader(md)
			}
			err = handler(srv, ss)
			if out != nil {
				out.err = err
			}
			return httpStatus(err)
		})
		if !d.Allowed() {
			if len(md) > 0 {
				_ = ss.SetHeader(md)
			}
			return refusal(ctx, d, md)
		}
		return err
	}
}

// usageStream is a stream whose context carries the record of the
// call's Decisions (redlimit.DecisionsFrom) and a redlimit.Usage, for the
// handler to report a budget's units to as it sends.
type usageStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *usageStream) Context() context.Context { return s.ctx }

// newPolicy checks limit and opts and builds the policy calls are decided
// under: one for every call, or, with WithRules, a rules table whose
// catch-all is limit. It returns what opts say too.
func newPolicy(l *core.Limiter, limit core.Limit, opts []Option) (redlimit.Policy, config, error) {
	c := config{policy: []redlimit.Option{defaultKey}}
	for _, opt := range opts {
		opt(&c)
	}
	if c.hasRules && c.limits {
		return nil, c, errors.New("grpclimit: WithLimits is not for WithRules: write the limits in the rule")
	}
	if !c.hasRules {
		p, err := redlimit.NewPolicy(l, limit, c.policy...)
		if err == nil {
			err = checkCallable(p)
		}
		return p, c, err
	}
	if len(c.rules) == 0 {
		return nil, c, fmt.Errorf("%w: grpclimit.WithRules: the table has no rules", redlimit.ErrInvalidRules)
	}
	if err := limit.Validate(); err != nil {
		return nil, c, fmt.Errorf("grpclimit: the interceptor's limit: %w", err)
	}
	table := redlimit.Rules{"*": limit.String()}
	for pattern, spec := range c.rules {
		if err := checkPattern(pattern); err != nil {
			return nil, c, fmt.Errorf("%w: rule %q: %s", redlimit.ErrInvalidRules, pattern, err)
		}
		table[pattern] = spec
	}
	p, err := redlimit.NewRuleSet(l, table, c.policy...)
	if err == nil {
		err = checkCallable(p)
	}
	return p, c, err
}

// checkCallable refuses a policy built with options that would never see
// a call: the functions of an *http.Request that redlimit's WithKey,
// WithSkip, WithRequestLimits and WithBudget set (redlimit.HTTPOptions).
func checkCallable(p redlimit.Policy) error {
	for _, name := range redlimit.HTTPOptions(p) {
		switch name {
		case "redlimit.WithKey":
			return fmt.Errorf("grpclimit: %s(keyfunc.Func) reads HTTP requests and would find no key in any call (every call would end InvalidArgument): key calls with grpclimit.WithKey, or grpclimit.WithIPKey for keyfunc.IP's client address", name)
		case "redlimit.WithSkip":
			return fmt.Errorf("grpclimit: %s reads HTTP requests and would skip no call: use grpclimit.WithSkip", name)
		case "redlimit.WithBudget":
			return fmt.Errorf("grpclimit: %s's functions read HTTP requests and would see no call: use grpclimit.WithBudget", name)
		default:
			return fmt.Errorf("grpclimit: %s reads HTTP requests and would pick no call's limits: use grpclimit.WithLimits", name)
		}
	}
	return nil
}

// outcome returns where a call's handler leaves its outcome for
// WithResponseCost, nil when there is none.
func (c *config) outcome() *outcome {
	if !c.outcomes {
		return nil
	}
	return new(outcome)
}

// checkPattern accepts "/pkg.Service/Method" and "/pkg.Service/*".
func checkPattern(pattern string) error {
	const form = `a pattern is "/package.Service/Method" or "/package.Service/*"`
	if pattern == "*" {
		return errors.New("the interceptor's limit is the catch-all: leave \"*\" out of the table")
	}
	service, method, ok := strings.Cut(strings.TrimPrefix(pattern, "/"), "/")
	if !strings.HasPrefix(pattern, "/") || !ok || !isName(service, true) || (method != "*" && !isName(method, false)) {
		return errors.New(form)
	}
	return nil
}

// isName reports whether s is a protobuf name: a method's, or with dots a
// service's full name.
func isName(s string, dots bool) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b == '_', 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case b == '.' && dots:
		default:
			return false
		}
	}
	return true
}

// defaultKey keys calls by the peer's address.
var defaultKey = redlimit.WithRequestKey(func(q redlimit.Request) (string, error) {
	return peerIP(q.Peer, unixPeer(q.Context), q.Values)
})

var peerIP = keyfunc.IPOf()

// request returns the call as its policy sees it (see the package
// documentation).
func request(ctx context.Context, fullMethod string) redlimit.Request {
	q := redlimit.Request{Context: ctx, Method: http.MethodPost, Route: fullMethod, Path: fullMethod}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		q.Metadata = md
		if v := md[":authority"]; len(v) > 0 {
			q.Host = v[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		q.Peer = p.Addr.String()
	}
	return q
}

// refusal is the status of a call that may not proceed.
func refusal(ctx context.Context, d redlimit.Decision, md metadata.MD) error {
	var st *status.Status
	switch d.Status {
	case http.StatusTooManyRequests:
		st = withRetry(status.New(codes.ResourceExhausted, d.Message()), retryDelay(d))
	case http.StatusServiceUnavailable:
		if err := ctx.Err(); err != nil && errors.Is(d.Err, err) { // the client left
			return status.FromContextError(err).Err()
		}
		st = withRetry(status.New(codes.Unavailable, d.Message()), time.Second)
	default:
		st = status.New(codes.InvalidArgument, d.Message())
	}
	return st.Err()
}

// retryDelay is a denial's RetryInfo: the wait the policy chose
// (Decision.RetryAfter, jitter included), rounded up to the millisecond.
func retryDelay(d redlimit.Decision) time.Duration {
	wait := d.RetryAfter
	if wait > core.InfDuration-time.Millisecond {
		return wait
	}
	return (wait + time.Millisecond - 1).Truncate(time.Millisecond)
}

// withRetry adds a RetryInfo detail to st.
func withRetry(st *status.Status, delay time.Duration) *status.Status {
	if with, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		return with
	}
	return st
}

// httpStatus is the HTTP status of a handler's error, for WithResponseCost.
func httpStatus(err error) int {
	switch status.Code(err) {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499 // the client closed the request, as nginx and grpc-gateway say
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError // Unknown, Internal, DataLoss
}
