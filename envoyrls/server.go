package envoyrls

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

	// Reference makes the Server answer as the reference server,
	// envoyproxy/ratelimit, does (redlimit-rls's REDLIMIT_COMPAT=reference;
	// docs/envoy.md lists what else differs, and what it changes):
	//   - a limit of the format (a fixed window without redlimit's
	//     extensions) counts in the reference's windows: its unit's span
	//     of the Unix epoch, by the Server's Clock (a day from midnight
	//     UTC, a week from a Thursday, a month of 30 days), and
	//     duration_until_reset is the whole seconds to its end;
	//   - hits are counted as the reference counts them, denied ones too:
	//     a charge above what is left answers OVER_LIMIT, with 0 remaining,
	//     and leaves the descriptor over its limit until its window ends,
	//     reads (hits_addend 0) included;
	//   - the rate-limit fields are the reference's: none unless
	//     HeaderNames are given (LIMIT_RESPONSE_HEADERS_ENABLED), then
	//     those three names, as given, with the limit, the remaining count
	//     and the seconds to the window's end of the descriptor with the
	//     fewest remaining (or the last over its limit); Headers is not
	//     read;
	//   - every error, a failed decision's under FailClosed included, is
	//     the gRPC code Unknown, with the reference's words.
	// false, the default, answers with redlimit's engine as it counts.
	Reference bool
	// QuotaMode puts every descriptor in quota mode (the reference
	// server's global QUOTA_MODE): a request is OVER_LIMIT only when every
	// descriptor that is not unlimited is over its limit. false by default.
	QuotaMode bool
	// DynamicMetadata adds the reference server's dynamic metadata to
	// every answer (RESPONSE_DYNAMIC_METADATA): the domain, the request's
	// descriptors and hits_addend, and under "metadata" the metadata
	// blocks of the rules of the descriptors that passed. false by default.
	DynamicMetadata bool
	// Clock, if not nil, is the time with Reference: which window of the
	// reference's a request falls in. nil means time.Now. Its windows'
	// counts live in Redis; the Limiter's clock decides when they expire.
	Clock func() time.Time
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
	// refHeaders: with Options.Reference, the reference's fields are added.
	refHeaders bool
}

// New returns a Server that decides with lim under config. It does no
// I/O. lim must be made by core.New (a nil or zero Limiter is refused).
// A nil config is no configuration loaded yet: every request is answered
// the gRPC error Unavailable (Unknown with Options.Reference), as the
// reference server answers when its files did not load, until SetConfig
// or WatchConfig gives one. Options.Failure must be FailOpen or
// FailClosed.
func New(lim *core.Limiter, config *Config, opts Options) (*Server, error) {
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("envoyrls: New: %w", err)
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
	s.refHeaders = opts.HeaderNames != HeaderNames{}
	for _, n := range []*string{&s.names.Limit, &s.names.Remaining, &s.names.Reset} {
		if *n == "" {
			continue
		}
		if !validHeaderName(*n) {
			return nil, fmt.Errorf("envoyrls: New: %q is not a header name", *n)
		}
		if !opts.Reference {
			*n = strings.ToLower(*n) // HTTP/2 field names are lower case
		}
	}
	if opts.Reference { // the reference's defaults
		s.names.Limit = or(s.names.Limit, "RateLimit-Limit")
		s.names.Remaining = or(s.names.Remaining, "RateLimit-Remaining")
		s.names.Reset = or(s.names.Reset, "RateLimit-Reset")
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
	m        match
	override bool       // the request's limit override applies
	limit    core.Limit // the limit decided
	rate     int        // requests_per_unit, the rule's or the override's
	unit     timeUnit
	hits     int    // hits_addend, at most maxHits
	over     bool   // hits_addend was above maxHits
	key      string // the state's key: the match's, with the window when aligned
	limited  bool   // a limit is decided (not unlimited, unknown or replaced)
	aligned  bool   // a window of the reference server's (Options.Reference)
	res      core.Result
	err      error
	res0     *core.Reservation // to refund, when the request is denied overall
	dur      time.Duration

	// The status answered: within the limit, what is left, and the
	// time until the window resets.
	ok        bool
	remaining int
	reset     time.Duration

	lims [1]core.Limit // an aligned decision's arguments
	cost [1]int
}

// ShouldRateLimit decides a request of Envoy's rate limit filter: each
// descriptor is looked up in the configuration (or limited by the
// request's override, whatever the configuration says of it) and, when
// a limit applies, charged hits_addend (the descriptor's, else the
// request's; 0 means 1) under its own key, one decision each, sent
// together. Hits above what the limit holds are denied, except by a debt
// rule, which charges them (hits above 4294967295, the most one
// settlement takes, that most). The answer is OVER_LIMIT when a
// descriptor not in quota_mode is over its limit (shadow_mode ones
// answer OK), or when every descriptor in quota_mode is. Unless
// Options.ChargeDenied, the descriptors that allowed a request denied
// overall are refunded. Options.Reference answers as the reference server
// does.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, s.fail(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, s.fail(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	cfg := s.config.Load()
	if cfg == nil {
		return nil, s.fail(codes.Unavailable, "no rate limit configuration loaded")
	}
	vs, err := s.verdicts(cfg, req)
	if err != nil {
		return nil, err
	}
	s.decideAll(ctx, vs)
	return s.answer(ctx, req, vs)
}

// fail returns the gRPC error of a request that cannot be decided: with
// code, or, as the reference server answers every error, Unknown.
func (s *Server) fail(code codes.Code, msg string) error {
	if s.opts.Reference {
		code = codes.Unknown
	}
	return status.Error(code, msg)
}

// verdicts looks up each descriptor of req, and says which are limited
// and how.
func (s *Server) verdicts(cfg *Config, req *rlsv3.RateLimitRequest) ([]verdict, error) {
	ds := req.GetDescriptors()
	vs := make([]verdict, len(ds))
	known := cfg.domains[req.GetDomain()] != nil
	var replaced map[string]bool // the names of the rules that matched rules replace
	for i, d := range ds {
		v := &vs[i]
		if o := d.GetLimit(); o != nil && known {
			if err := v.setOverride(req.GetDomain(), d, o); err != nil {
				return nil, s.fail(codes.InvalidArgument, err.Error())
			}
		} else {
			v.m = cfg.lookup(req.GetDomain(), d.GetEntries())
			if r := v.m.rule; r != nil && len(r.replaces) > 0 {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				for _, name := range r.replaces {
					replaced[name] = true
				}
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
	var now time.Time
	if s.opts.Reference {
		now = s.now()
	}
	for i := range vs {
		s.prepare(&vs[i], replaced, now)
	}
	return vs, nil
}

// setOverride makes a descriptor's limit the one the request gives
// (RateLimitOverride), as the reference server applies it: a fixed
// window, under the descriptor's own values, without a name, whatever
// rule the configuration has for it.
func (v *verdict) setOverride(domain string, d *ratelimitv3.RateLimitDescriptor, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) error {
	unit, ok := overrideUnits[o.GetUnit()]
	if !ok {
		return fmt.Errorf("descriptor limit override: unit %v is not served", o.GetUnit())
	}
	l, err := limitOf(int(o.GetRequestsPerUnit()), unit, "", 0, 0, "")
	if err != nil {
		return fmt.Errorf("descriptor limit override: %v", err)
	}
	key, metric := keyOf(domain, d.GetEntries())
	v.m = match{rule: &rule{path: metric, unit: unit, rate: int(o.GetRequestsPerUnit()), limit: l}, key: key, metric: metric}
	v.override = true
	return nil
}

// overrideUnits are the units a request's override may give.
var overrideUnits = map[typev3.RateLimitUnit]timeUnit{
	typev3.RateLimitUnit_SECOND: unitSecond, typev3.RateLimitUnit_MINUTE: unitMinute, typev3.RateLimitUnit_HOUR: unitHour,
	typev3.RateLimitUnit_DAY: unitDay, typev3.RateLimitUnit_MONTH: unitMonth, typev3.RateLimitUnit_YEAR: unitYear,
}

// prepare says whether a verdict's descriptor is limited (a rule that is
// not unlimited, not replaced by another matched rule, or an override),
// and with which limit under which key: with Options.Reference, a fixed
// window of the format's is the reference server's window that holds now.
func (s *Server) prepare(v *verdict, replaced map[string]bool, now time.Time) {
	r := v.m.rule
	if r == nil || r.unlimited || (r.name != "" && replaced[r.name]) {
		return
	}
	v.limited = true
	v.limit, v.rate, v.unit, v.key = r.limit, r.rate, r.unit, v.m.key
	if s.opts.Reference && v.limit.Algorithm == core.FixedWindow && v.limit.Calendar == "" && !r.debt {
		v.align(now)
	}
}

// align makes v a window of the reference server's: its unit's span of
// the Unix epoch that holds now (a day from midnight UTC, a week from a
// Thursday, a month of 30 days), keyed by its start. The state counts
// hits as the reference's INCRBY does, but stops at one above the
// limit: a count above the limit answers OVER_LIMIT whatever it is, so
// the engine holds it as a fixed window of rate+1 (lasting two units, so
// that it never ends before its span, whatever the clocks of Redis and
// this process say) that takes what is left of a charge too large
// (core.Request.TakeRest).
func (v *verdict) align(now time.Time) {
	p := int64(v.unit.period() / time.Second)
	t := now.Unix()
	v.aligned = true
	v.reset = time.Duration(p-t%p) * time.Second
	v.key += "|" + strconv.FormatInt(t/p*p, 10)
	v.limit = core.Limit{Algorithm: core.FixedWindow, Rate: min(v.rate+1, core.MaxCount), Period: 2 * v.unit.period()}
	v.lims[0] = v.limit
}

// now returns the Server's clock's time.
func (s *Server) now() time.Time {
	if s.opts.Clock != nil {
		return s.opts.Clock()
	}
	return time.Now()
}
