package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// Options configure a Server. The zero value is the default: fail open,
// the X-RateLimit fields, a request denied overall charged to none of its
// descriptors.
type Options struct {
	// Failure says what a descriptor whose decision failed (Redis down,
	// slow past the Limiter's timeout, the breaker open) gets.
	// redlimit.FailOpen, the default, answers it OK without a current
	// limit, as Envoy's failure_mode_deny=false expects, and logs the
	// error. redlimit.FailClosed answers the whole request with the gRPC
	// error Unavailable, as the reference server does on a Redis error:
	// Envoy then applies its failure_mode_deny. redlimit.FailLocal is
	// refused by New.
	Failure redlimit.Failure
	// Headers chooses the rate-limit fields the answer asks Envoy to add
	// to the client's response (response_headers_to_add): X-RateLimit-Limit,
	// -Remaining and -Reset of the binding descriptor (the default,
	// redlimit.HeadersXRateLimit), the IETF draft's RateLimit-Policy and
	// RateLimit fields with one member per limited descriptor
	// (redlimit.HeadersDraft), both, or none. An OVER_LIMIT answer adds
	// Retry-After whatever the profile, unless HeadersNone.
	Headers redlimit.HeaderProfile
	// HeaderNames renames the X-RateLimit fields, as the reference
	// server's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
	// LIMIT_RESET_HEADER do. An empty name keeps the default
	// (x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset).
	HeaderNames HeaderNames
	// ShadowMode answers OK overall whatever the descriptors' statuses
	// (the reference server's global SHADOW_MODE); the statuses still say
	// OVER_LIMIT. false by default.
	ShadowMode bool
	// ChargeDenied keeps the charge of every descriptor that allowed a
	// request that another descriptor denied, as the reference server
	// does. false, the default, refunds them (one more round trip, only
	// for such requests): Envoy rejects the request, so it should count
	// for nothing.
	ChargeDenied bool
	// Observe, if not nil, is called with the decision of each limited
	// descriptor of every request: Policy is the descriptor's metric name
	// (its place in the configuration, or with detailed_metric its
	// values), Outcome what became of it. promlimit's Metrics.Observe
	// (with a nil request) fits. It must be safe for concurrent use and
	// quick.
	Observe func(redlimit.Decision)
	// Logger receives Redis errors (at most one line a second) and
	// configuration reloads. nil means slog.Default().
	Logger *slog.Logger
}

// HeaderNames are the names of the X-RateLimit fields (see
// Options.HeaderNames).
type HeaderNames struct {
	Limit, Remaining, Reset string
}

// Server answers Envoy's rate limit service API (envoy.service.ratelimit.v3,
// ShouldRateLimit) with redlimit's engine and a Config in the reference
// server's format. Register it on a grpc.Server with
// rlsv3.RegisterRateLimitServiceServer. It is safe for concurrent use;
// SetConfig and WatchConfig change its configuration while it serves.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim     *core.Limiter
	opts    Options
	log     *slog.Logger
	config  atomic.Pointer[Config]
	healthy atomic.Bool
	lastLog atomic.Int64 // unix nanoseconds of the last Redis error logged
	names   HeaderNames
}

// New returns a Server that decides with lim under config. It does no
// I/O. lim must be made by core.New (a nil or zero Limiter is refused),
// config must not be nil; Options.Failure must be FailOpen
// or FailClosed.
func New(lim *core.Limiter, config *Config, opts Options) (*Server, error) {
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("envoyrls: New: %w", err)
	}
	if config == nil {
		return nil, errors.New("envoyrls: New: nil Config")
	}
	if opts.Failure != redlimit.FailOpen && opts.Failure != redlimit.FailClosed {
		return nil, fmt.Errorf("envoyrls: New: failure policy %v is not served: fail-open or fail-closed", opts.Failure)
	}
	if opts.Headers < redlimit.HeadersXRateLimit || opts.Headers > redlimit.HeadersNone {
		return nil, fmt.Errorf("envoyrls: New: unknown header profile %d", opts.Headers)
	}
	s := &Server{lim: lim, opts: opts, log: opts.Logger, names: opts.HeaderNames}
	if s.log == nil {
		s.log = slog.Default()
	}
	for _, n := range []*string{&s.names.Limit, &s.names.Remaining, &s.names.Reset} {
		if *n == "" {
			continue
		}
		if !validHeaderName(*n) {
			return nil, fmt.Errorf("envoyrls: New: %q is not a header name", *n)
		}
		*n = strings.ToLower(*n) // HTTP/2 field names are lower case
	}
	s.names.Limit = or(s.names.Limit, "x-ratelimit-limit")
	s.names.Remaining = or(s.names.Remaining, "x-ratelimit-remaining")
	s.names.Reset = or(s.names.Reset, "x-ratelimit-reset")
	s.config.Store(config)
	s.healthy.Store(true)
	return s, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Config returns the configuration the Server decides with now.
func (s *Server) Config() *Config { return s.config.Load() }

// SetConfig replaces the configuration, atomically for requests in
// flight. State is kept by descriptor: a descriptor whose limit keeps its
// algorithm and period (its unit) keeps its count, whatever its
// requests_per_unit becomes.
func (s *Server) SetConfig(c *Config) {
	if c != nil {
		s.config.Store(c)
	}
}

// maxHits is the most one descriptor of a request may be charged: the
// engine's largest cost, 4294967295 (a uint32's range, as the request's
// hits_addend; a descriptor's is a uint64).
const maxHits = core.MaxCount

// verdict is one descriptor's part of an answer.
type verdict struct {
	m       match
	limit   core.Limit // the limit decided, the rule's or the request's override
	rate    int
	unit    timeUnit
	hits    int  // hits_addend, at most maxHits
	over    bool // hits_addend was above maxHits
	res     core.Result
	err     error
	res0    *core.Reservation // to refund, when the request is denied overall
	limited bool              // a limit was decided (not unlimited, not unknown)
	dur     time.Duration
}

// ShouldRateLimit decides a request of Envoy's rate limit filter: each
// descriptor is looked up in the configuration and, when a limit applies,
// charged hits_addend (the descriptor's, else the request's; 0 means 1)
// under its own key, one decision each, sent together. Hits above what
// the limit holds are denied, except by a debt rule, which charges them
// (hits above 4294967295, the most one settlement takes, that most).
// The answer is OVER_LIMIT when any descriptor not in shadow or quota
// mode is over its limit, with a status per descriptor. Unless
// Options.ChargeDenied, the descriptors that allowed a request denied
// overall are refunded.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	cfg := s.config.Load()
	ds := req.GetDescriptors()
	vs := make([]verdict, len(ds))
	var replaced map[string]bool // the names of the rules that matched rules replace
	for i, d := range ds {
		v := &vs[i]
		v.m = cfg.lookup(req.GetDomain(), d.GetEntries())
		if r := v.m.rule; r != nil && len(r.replaces) > 0 {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			for _, name := range r.replaces {
				replaced[name] = true
			}
		}
		if o := d.GetLimit(); o != nil && cfg.domains[req.GetDomain()] != nil {
			if err := v.override(req.GetDomain(), d, o); err != nil {
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
		}
		hits := uint64(req.GetHitsAddend())
		if h := d.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		} else if hits == 0 {
			hits = 1
		}
		v.hits, v.over = int(min(hits, maxHits)), hits > maxHits
	}
	var decide []int // the verdicts that go to Redis
	limited := 0
	for i := range vs {
		v := &vs[i]
		r := v.m.rule
		if r == nil || r.unlimited || (r.name != "" && replaced[r.name]) {
			continue
		}
		v.limited = true
		limited++
		if v.limit == (core.Limit{}) {
			v.limit, v.rate, v.unit = r.limit, r.rate, r.unit
		}
		switch {
		case v.rate == 0: // requests_per_unit 0 denies every request
			p := v.limit.Period
			v.res = core.Result{Limit: v.limit, RetryAfter: p, ResetAfter: p, NextAfter: p}
		case v.over && !r.debt: // more than any limit holds: never allowed
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
	return s.answer(ctx, req, vs)
}

// override makes a descriptor's limit the one the request gives
// (RateLimitOverride), keeping the matched rule's algorithm.
func (v *verdict) override(domain string, d *ratelimitv3.RateLimitDescriptor, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) error {
	unit, ok := overrideUnits[o.GetUnit()]
	if !ok {
		return fmt.Errorf("descriptor limit override: unit %v is not served", o.GetUnit())
	}
	r := v.m.rule
	if r == nil {
		// No rule: the override applies alone, as a fixed window.
		key, metric := keyOf(domain, d.GetEntries())
		r = &rule{path: metric, unit: unit}
		v.m = match{rule: r, key: key, metric: metric}
	} else if r.unlimited {
		return nil
	}
	l, err := limitOf(int(o.GetRequestsPerUnit()), unit, string(r.limit.Algorithm), 0, r.limit.Buckets, "")
	if err != nil {
		return fmt.Errorf("descriptor limit override: %v", err)
	}
	v.limit, v.rate, v.unit = l, int(o.GetRequestsPerUnit()), unit
	return nil
}

// overrideUnits are the units a request's override may give.
var overrideUnits = map[typev3.RateLimitUnit]timeUnit{
	typev3.RateLimitUnit_SECOND: unitSecond, typev3.RateLimitUnit_MINUTE: unitMinute, typev3.RateLimitUnit_HOUR: unitHour,
	typev3.RateLimitUnit_DAY: unitDay, typev3.RateLimitUnit_MONTH: unitMonth, typev3.RateLimitUnit_YEAR: unitYear,
}

// decide makes one descriptor's decision: AllowN, or Reserve when it may
// have to be refunded; a debt rule admits a cost of 1 and charges the
// rest of the hits after, without denying.
func (s *Server) decide(ctx context.Context, v *verdict, refundable bool) {
	var start time.Time
	if s.opts.Observe != nil {
		start = time.Now()
	}
	switch {
	case v.m.rule.debt:
		// Admit while anything is left (a cost of 1, or 0 to read), then
		// charge the rest without denying: the key may go into debt.
		n := min(v.hits, 1)
		r, err := s.lim.Reserve(ctx, v.m.key, []core.Limit{v.limit}, n)
		if err == nil {
			v.res = r.Result()
			if v.res.Allowed && v.hits > n {
				err = r.Settle(context.WithoutCancel(ctx), v.hits)
				v.res.Remaining = max(0, v.res.Remaining-(v.hits-n))
			}
		}
		v.err = err
	case refundable:
		r, err := s.lim.Reserve(ctx, v.m.key, []core.Limit{v.limit}, v.hits)
		if err == nil {
			v.res, v.res0 = r.Result(), r
		}
		v.err = err
	default:
		v.res, v.err = s.lim.AllowN(ctx, v.m.key, v.limit, v.hits)
	}
	if s.opts.Observe != nil {
		v.dur = time.Since(start)
	}
}

// answer builds the response from the verdicts, refunds what a denied
// request charged, and reports each decision.
func (s *Server) answer(ctx context.Context, req *rlsv3.RateLimitRequest, vs []verdict) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(vs))}
	var failed error
	var answered []core.Result // the limited verdicts', each Allowed as its status says, for core.Binding
	var at []int               // their indices in vs
	for i := range vs {
		v := &vs[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case v.m.rule != nil && v.m.rule.unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		case !v.limited:
			continue
		case v.err != nil:
			failed = v.err
			s.observe(v, redlimit.OutcomeError)
			continue
		}
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: v.m.rule.name, RequestsPerUnit: uint32(v.rate), Unit: responseUnits[v.unit]}
		st.LimitRemaining = uint32(min(uint64(max(v.res.Remaining, 0)), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(v.res.ResetAfter)
		if v.res.Allowed {
			s.observe(v, redlimit.OutcomeAllowed)
		} else if v.m.rule.shadow || v.m.rule.quota {
			s.observe(v, redlimit.OutcomeDryRun)
		} else {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if v.res.Cached {
				s.observe(v, redlimit.OutcomeCached)
			} else {
				s.observe(v, redlimit.OutcomeDenied)
			}
		}
		r := v.res
		r.Allowed = st.Code != rlsv3.RateLimitResponse_OVER_LIMIT
		answered, at = append(answered, r), append(at, i)
	}
	if failed != nil {
		s.logError(failed)
		if s.opts.Failure == redlimit.FailClosed {
			return nil, status.Errorf(codes.Unavailable, "envoyrls: %v", failed)
		}
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && s.opts.ShadowMode {
		// Envoy lets the request through: its charges stand.
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		s.refund(ctx, vs, resp.Statuses)
	}
	if len(answered) > 0 {
		_, binding := core.Binding(answered)
		resp.ResponseHeadersToAdd = s.headers(vs, at[binding], resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT)
	}
	return resp, nil
}

// refund gives back what the descriptors that allowed a request denied
// overall charged, with a context the caller's cancelling does not end
// (the Limiter's timeout still bounds it).
func (s *Server) refund(ctx context.Context, vs []verdict, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) {
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for i := range vs {
		if r := vs[i].res0; r != nil && vs[i].res.Allowed {
			// The answer reports what is left once the refund is made.
			vs[i].res.Remaining = min(vs[i].res.Remaining+vs[i].hits, capacity(&vs[i]))
			statuses[i].LimitRemaining = uint32(min(uint64(max(vs[i].res.Remaining, 0)), math.MaxUint32))
			wg.Go(func() {
				if err := r.Settle(ctx, 0); err != nil {
					s.logError(fmt.Errorf("refund of %s: %w", vs[i].m.metric, err))
				}
			})
		}
	}
	wg.Wait()
}

// responseUnits are the units of current_limit.
var responseUnits = map[timeUnit]rlsv3.RateLimitResponse_RateLimit_Unit{
	unitSecond: rlsv3.RateLimitResponse_RateLimit_SECOND, unitMinute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	unitHour: rlsv3.RateLimitResponse_RateLimit_HOUR, unitDay: rlsv3.RateLimitResponse_RateLimit_DAY,
	unitWeek: rlsv3.RateLimitResponse_RateLimit_WEEK, unitMonth: rlsv3.RateLimitResponse_RateLimit_MONTH,
	unitYear: rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// observe reports a descriptor's decision to Options.Observe.
func (s *Server) observe(v *verdict, o redlimit.Outcome) {
	if s.opts.Observe == nil {
		return
	}
	d := redlimit.Decision{Policy: v.m.metric, Key: v.m.key, Outcome: o, Result: v.res, Err: v.err, Duration: v.dur}
	switch o {
	case redlimit.OutcomeDenied, redlimit.OutcomeCached:
		d.Status = 429
	case redlimit.OutcomeError:
		d.Result = core.Result{}
	}
	s.opts.Observe(d)
}

// logError logs a failed decision, at most once a second.
func (s *Server) logError(err error) {
	now := time.Now().UnixNano()
	last := s.lastLog.Load()
	if now-last < int64(time.Second) || !s.lastLog.CompareAndSwap(last, now) {
		return
	}
	s.log.Error("envoyrls: rate limit decision failed", "err", err, "failure", s.opts.Failure.String())
}

// headerValue is one response header to add.
func headerValue(name, value string) *corev3.HeaderValue {
	return &corev3.HeaderValue{Key: name, Value: value}
}
