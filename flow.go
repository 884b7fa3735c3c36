package redlimit

import (
	"net/http"
	"slices"
)

// The one request flow, for every protocol: a protocol describes its
// request (Request), the policy decides it (key, limits, one decision on
// Redis, the failure policy), the verdict's rate-limit fields are written
// under the protocol's names, and the protocol answers in its own way.
// Serve is the flow of an *http.Request (nethttp, ginlimit, echolimit);
// ServeRequest that of any other protocol (grpclimit).

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
	if pol.budgets != nil { // a Usage for the handler to report to
		if ctx := ContextWithUsage(q.Context, nil); ctx != q.Context {
			r = r.WithContext(ctx)
			q.Context, q.HTTP = ctx, r
		}
	}
	d, held := pol.decide(&q, w.Header(), httpFields)
	switch {
	case !d.Allowed():
		pol.answer.deny(w, r, d)
	case held != nil:
		var sw *statusWriter
		if pol.ResponseCost != nil || pol.budgets != nil { // a cost function is told the status
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
// limits, WithResponseCost, budgets) with next, then settles it, however
// the handler ends, and frees its slots.
//
// When next returns, a request is settled at the cost WithResponseCost
// reports for the status and header next returns, capped at the policy's
// maximum, and at each budget's cost (budgetCost); a limit without one
// (none given, or a negative one) at what it reserved.
//
// When the handler panics (http.ErrAbortHandler included: httputil.ReverseProxy
// ends a response whose client left with it), or a cost function does, no
// cost function is called: the request limits' reserved cost stands, each
// budget is settled at what the handler reported to its Usage (its
// reservation if it reported nothing), and the panic goes on up.
func (p *policy) serveHeld(q *Request, held *hold, next func() (status int, header http.Header)) {
	returned := false
	defer func() {
		if !returned { // a panic, on its way up
			p.settleHeld(q, held, -1, p.reportedCosts(q, held))
		}
	}()
	status, header := next()
	cost, costs := p.finalCosts(q, held, status, header)
	returned = true
	p.settleHeld(q, held, cost, costs)
}

// settleHeld settles held at costs, one per limit, when the policy has
// budgets; else at cost (-1: the reserved n).
func (p *policy) settleHeld(q *Request, held *hold, cost int, costs []int) {
	if costs != nil {
		p.settleEach(q.Context, held.r, costs)
		return
	}
	p.settle(q.Context, held.r, cost)
}

// finalCosts returns what a request whose handler returned status and
// header is settled at: with budgets, each limit's cost (costs), else the
// cost of every limit (-1: the reserved n). It calls the cost functions.
func (p *policy) finalCosts(q *Request, held *hold, status int, header http.Header) (cost int, costs []int) {
	c := -1
	if p.ResponseCost != nil {
		c = p.boundCost(q.Context, p.ResponseCost(*q, status, header))
	}
	if held.costs == nil {
		return c, nil
	}
	costs = slices.Clone(held.costs) // each limit's reserved cost: what a -1 leaves
	tail := len(costs) - p.spent
	if c >= 0 {
		for i := range costs[:tail] {
			costs[i] = c
		}
	}
	for _, b := range p.budgets {
		if n := p.budgetCost(q, b, status, header); n >= 0 {
			for i := tail + b.at; i < tail+b.at+b.n; i++ {
				costs[i] = n
			}
		}
	}
	return -1, costs
}

// reportedCosts returns what a request whose handler did not return (it
// panicked) is settled at, without calling a cost function: with
// budgets, each limit's reserved cost but a budget's, which is what the
// handler reported to its Usage if it reported any; nil without budgets
// (the reserved n).
func (p *policy) reportedCosts(q *Request, held *hold) []int {
	if held.costs == nil {
		return nil
	}
	costs := slices.Clone(held.costs)
	tail := len(costs) - p.spent
	for _, b := range p.budgets {
		if n := p.reported(q, b); n >= 0 {
			for i := tail + b.at; i < tail+b.at+b.n; i++ {
				costs[i] = n
			}
		}
	}
	return costs
}
