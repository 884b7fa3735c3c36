package envoyrls

import (
	"context"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// answer builds the response from the verdicts, refunds what a denied
// request charged, and reports each decision.
func (s *Server) answer(ctx context.Context, req *rlsv3.RateLimitRequest, vs []verdict) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(vs))}
	var failed error
	denied, quota, quotaDenied := 0, 0, 0 // descriptors over the limit out of quota mode; in quota mode, and of those over
	for i := range vs {
		v := &vs[i]
		resp.Statuses[i] = s.status(v)
		if v.err != nil {
			failed = v.err
		}
		if v.m.rule != nil && v.m.rule.unlimited && !v.limited {
			continue
		}
		inQuota := s.opts.QuotaMode || (v.limited && v.m.rule.quota)
		over := resp.Statuses[i].GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case inQuota && over:
			quota, quotaDenied = quota+1, quotaDenied+1
		case inQuota:
			quota++
		case over:
			denied++
		}
	}
	if failed != nil {
		s.logError(failed)
		if s.opts.Failure == redlimit.FailClosed {
			return nil, status.Errorf(s.errorCode(codes.Unavailable), "envoyrls: %v", failed)
		}
	}
	if denied > 0 || (quota > 0 && quota == quotaDenied) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	deniedOverall := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
	if deniedOverall && s.opts.ShadowMode {
		// Envoy lets the request through: its charges stand.
		resp.OverallCode, deniedOverall = rlsv3.RateLimitResponse_OK, false
	}
	if deniedOverall {
		s.refund(ctx, vs)
		for i := range vs {
			if v := &vs[i]; v.res0 != nil && v.ok {
				resp.Statuses[i].LimitRemaining = remainingOf(v.remaining)
			}
		}
	}
	s.observeAll(vs, deniedOverall)
	resp.ResponseHeadersToAdd = s.headersOf(vs, resp)
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, vs, resp.Statuses)
	}
	return resp, nil
}

// errorCode is code, or Unknown, as the reference server answers every
// error, with Options.Reference.
func (s *Server) errorCode(code codes.Code) codes.Code {
	if s.opts.Reference {
		return codes.Unknown
	}
	return code
}

// status returns a verdict's DescriptorStatus: OK without a current limit
// when no limit applies (or its decision failed), the most a uint32 holds
// remaining when the rule is unlimited; else the limit, what is left and
// the time until the window resets, OVER_LIMIT when over the limit but
// in shadow mode.
func (s *Server) status(v *verdict) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	switch {
	case v.m.rule != nil && v.m.rule.unlimited && !v.limited:
		st.LimitRemaining = math.MaxUint32
		return st
	case !v.limited || v.err != nil:
		return st
	}
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: v.m.rule.name, RequestsPerUnit: uint32(v.rate), Unit: responseUnits[v.unit]}
	st.LimitRemaining = remainingOf(v.remaining)
	st.DurationUntilReset = durationpb.New(v.reset)
	if !v.ok && !v.m.rule.shadow {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return st
}

// remainingOf is a count as limit_remaining, a uint32.
func remainingOf(n int) uint32 {
	return uint32(min(uint64(max(n, 0)), math.MaxUint32))
}

// observeAll reports each limited verdict's decision to Options.Observe:
// a descriptor over its limit in shadow mode, or in quota mode when the
// request is not denied overall, is a dry run.
func (s *Server) observeAll(vs []verdict, deniedOverall bool) {
	if s.opts.Observe == nil {
		return
	}
	for i := range vs {
		v := &vs[i]
		switch {
		case !v.limited:
		case v.err != nil:
			s.observe(v, redlimit.OutcomeError)
		case v.ok:
			s.observe(v, redlimit.OutcomeAllowed)
		case v.m.rule.shadow || ((s.opts.QuotaMode || v.m.rule.quota) && !deniedOverall):
			s.observe(v, redlimit.OutcomeDryRun)
		case v.res.Cached:
			s.observe(v, redlimit.OutcomeCached)
		default:
			s.observe(v, redlimit.OutcomeDenied)
		}
	}
}

// observe reports a descriptor's decision to Options.Observe.
func (s *Server) observe(v *verdict, o redlimit.Outcome) {
	d := redlimit.Decision{Policy: v.m.metric, Key: v.key, Outcome: o, Result: v.res, Err: v.err, Duration: v.dur}
	switch o {
	case redlimit.OutcomeDenied, redlimit.OutcomeCached:
		d.Status = 429
	case redlimit.OutcomeError:
		d.Result = core.Result{}
	}
	s.opts.Observe(d)
}

// responseUnits are the units of current_limit.
var responseUnits = map[timeUnit]rlsv3.RateLimitResponse_RateLimit_Unit{
	unitSecond: rlsv3.RateLimitResponse_RateLimit_SECOND, unitMinute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	unitHour: rlsv3.RateLimitResponse_RateLimit_HOUR, unitDay: rlsv3.RateLimitResponse_RateLimit_DAY,
	unitWeek: rlsv3.RateLimitResponse_RateLimit_WEEK, unitMonth: rlsv3.RateLimitResponse_RateLimit_MONTH,
	unitYear: rlsv3.RateLimitResponse_RateLimit_YEAR,
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

// referenceHeaders returns the reference server's rate-limit fields
// (LIMIT_RESPONSE_HEADERS_ENABLED): the limit, the remaining count and
// the seconds to its window's end of the descriptor with the fewest
// remaining, or of the last one over its limit out of quota mode.
func (s *Server) referenceHeaders(vs []verdict, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	pick := -1
	least := uint32(math.MaxUint32)
	for i, st := range statuses {
		if st.GetCurrentLimit() != nil && st.GetLimitRemaining() < least {
			pick, least = i, st.GetLimitRemaining()
		}
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && !s.opts.QuotaMode && !vs[i].m.rule.quota {
			pick, least = i, 0
		}
	}
	if pick < 0 {
		return nil
	}
	st, v := statuses[pick], &vs[pick]
	p := int64(v.unit.period() / time.Second)
	return []*corev3.HeaderValue{
		headerValue(s.names.Limit, strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)),
		headerValue(s.names.Remaining, strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)),
		headerValue(s.names.Reset, strconv.FormatInt(p-s.now().Unix()%p, 10)),
	}
}
