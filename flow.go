package redlimit

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// The one request flow, for every protocol: a protocol describes its
// request (Request), the policy decides it (key, limits, one decision on
// Redis, the failure policy), the verdict's rate-limit fields are written
// under the protocol's names, and the protocol answers in its own way.
// Serve is the flow of an *http.Request (nethttp, ginlimit, echolimit);
// ServeRequest that of any other protocol (grpclimit).

// Request is a request as a policy decides it: what every protocol can
// say of one. Serve builds it from an *http.Request; grpclimit builds it
// from a gRPC call's context, metadata and peer.
type Request struct {
	// Context is the request's: it bounds the decision, and a shaping
	// limit's wait ends with it.
	Context context.Context
	// Method is the HTTP method; "POST" for a gRPC call.
	Method string
	// Route is the route template ("GET /users/{id}", or gin's and echo's
	// "/users/:id"), "" when unknown; a gRPC call's full method
	// ("/pkg.Service/Method").
	Route string
	// Path is the URL path; a gRPC call's full method. Rules match it.
	Path string
	// Host is the host the request was sent to: HTTP's Host, a gRPC
	// call's :authority.
	Host string
	// Peer is the address of the peer it came from, as
	// http.Request.RemoteAddr writes it ("192.0.2.1:1234").
	Peer string
	// Metadata is a gRPC call's incoming metadata, keys in lowercase; nil
	// for an HTTP request, whose header is HTTP's.
	Metadata map[string][]string
	// HTTP is the HTTP request, nil for a request of another protocol.
	// The options that take an *http.Request are HTTP's: a keyfunc.Func
	// (WithKey) finds no key in a request without one, and WithSkip and
	// WithRequestLimits are not asked about it; WithObserver and
	// WithResponseCost get a nil *http.Request.
	HTTP *http.Request
}

// Values returns the values of the header field (HTTP) or metadata key
// (gRPC) name, which is matched in any case.
func (q *Request) Values(name string) []string {
	if q.HTTP != nil {
		return q.HTTP.Header.Values(name)
	}
	return q.Metadata[strings.ToLower(name)]
}

// Serve runs one HTTP request through p, top to bottom: it finds the
// policy that applies (none: next serves it), decides (skip, key, limits,
// one decision on Redis, the failure policy), sets the rate-limit headers,
// and either answers a request that may not proceed (429, 503 or 400, with
// the deny handler, a problem or the JSON body) or hands it to next. next
// serves the request and returns the status it answered with, 0 if it
// cannot tell. It returns the Decision, the zero Decision when no policy
// applied. It is what the HTTP adapters call; gin's aborts the chain when
// the Decision is not Allowed.
func Serve(p Policy, w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request) int) Decision {
	q := Request{Context: r.Context(), Method: r.Method, Route: r.Pattern, Path: r.URL.Path, Host: r.Host, Peer: r.RemoteAddr, HTTP: r}
	pol := p.policyFor(q)
	if pol == nil {
		next(w, r)
		return Decision{}
	}
	d, held := pol.decide(&q, w.Header(), httpFields)
	switch {
	case !d.Allowed():
		pol.answer.deny(w, r, d)
	case held != nil:
		var sw *statusWriter
		if pol.responseCost != nil { // WithResponseCost is told the status
			sw = &statusWriter{ResponseWriter: w}
			w = sw
		}
		pol.serveHeld(&q, held, func() (int, http.Header) {
			status := next(w, r)
			if status == 0 && sw != nil {
				status = sw.statusCode()
			}
			return status, w.Header()
		})
	default:
		next(w, r)
	}
	return d
}

// ServeRequest runs one request of a protocol other than HTTP through p,
// as Serve runs an HTTP request: it finds the policy that applies (none:
// next serves it), decides, and writes the verdict's rate-limit fields to
// md as gRPC metadata (lowercase keys: x-ratelimit-remaining,
// retry-after, ratelimit, ...). When the Decision is Allowed it calls
// next, which serves the request and returns its HTTP status (for
// WithResponseCost); otherwise the caller answers as its protocol does,
// after the Decision's Status. md must not be nil.
func ServeRequest(p Policy, q Request, md map[string][]string, next func() int) Decision {
	q.HTTP = nil // the flow of an HTTP request is Serve's
	pol := p.policyFor(q)
	if pol == nil {
		next()
		return Decision{}
	}
	d, held := pol.decide(&q, md, metadataFields)
	switch {
	case !d.Allowed():
	case held != nil:
		pol.serveHeld(&q, held, func() (int, http.Header) { return next(), nil })
	default:
		next()
	}
	return d
}

// serveHeld serves a request whose decision is a reservation (Concurrency
// limits, WithResponseCost) with next, then settles it, whatever the
// handler did: with the cost WithResponseCost reports for the status and
// header next returns, capped at the policy's maximum, or releasing it
// (the cost stands, slots are freed) when there is none, when it is
// negative, or when the handler or the cost function panicked, before the
// panic goes on up.
func (p *policy) serveHeld(q *Request, held *core.Reservation, next func() (status int, header http.Header)) {
	cost := -1 // the reserved n
	defer func() { p.settle(q.Context, held, cost) }()
	status, header := next()
	if p.responseCost != nil {
		cost = p.boundCost(q.Context, p.responseCost(q.HTTP, status, header))
	}
}

// boundCost returns what a request whose WithResponseCost is cost is
// settled at: cost, the maximum if cost is above it, or -1 (the reserved
// n stands) if it is negative. Either bound is logged, each at most once
// a second per policy: neither is a failure of the decision, which stands.
func (p *policy) boundCost(ctx context.Context, cost int) int {
	switch {
	case cost < 0:
		if skipped, ok := p.invalidCostLog.allow(time.Now()); ok {
			p.log.ErrorContext(ctx, "redlimit: invalid response cost: WithResponseCost returned a negative cost; settled at the reserved cost, which stands, and its slots freed",
				"policy", p.name, "cost", cost, "reserved", p.cost, "costs_not_logged", skipped)
		}
		return -1
	case cost > p.maxCost:
		if skipped, ok := p.maxCostLog.allow(time.Now()); ok {
			p.log.WarnContext(ctx, "redlimit: response cost above the maximum a request may be charged (WithMaxCost); charged the maximum",
				"policy", p.name, "cost", cost, "charged", p.maxCost, "costs_not_logged", skipped)
		}
		return p.maxCost
	}
	return cost
}

// settle settles held at cost (-1: the reserved n), with a context the
// client's leaving does not cancel: the Limiter's timeout bounds it.
func (p *policy) settle(ctx context.Context, held *core.Reservation, cost int) {
	ctx = context.WithoutCancel(ctx)
	var err error
	if cost < 0 {
		err = held.Release(ctx)
	} else {
		err = held.Settle(ctx, cost)
	}
	if err != nil {
		p.reportSettleError(ctx, err)
	}
}

// reportSettleError logs an error settling a request's reservation after
// its handler, at error level, at most once a second per policy. The
// request was decided and served; what the settlement would have changed
// (a refund, a charge) may not have been made, and a slot it did not free
// ends with its lease.
func (p *policy) reportSettleError(ctx context.Context, err error) {
	if skipped, ok := p.settleLog.allow(time.Now()); ok {
		p.log.ErrorContext(ctx, "redlimit: settling a served request's reservation failed; a slot it held is freed when its lease ends",
			"policy", p.name, "error", err, "errors_not_logged", skipped)
	}
}

// errNotHTTP is the key error of a request without an *http.Request under
// a keyfunc.Func.
var errNotHTTP = fmt.Errorf("%w: the key function (redlimit.WithKey) reads HTTP requests, and this request is of another protocol", keyfunc.ErrNoKey)

// keyOf returns q's key, by WithRequestKey's function or, for an HTTP
// request, WithKey's.
func (p *policy) keyOf(q *Request) (string, error) {
	switch {
	case p.requestKey != nil:
		return p.requestKey(*q)
	case q.HTTP == nil:
		return "", errNotHTTP
	}
	return p.key(q.HTTP)
}
