// Package roundtrip limits the requests an http.Client sends, with one rate
// shared by every process: 100 requests a second to a payment provider, all
// pods together.
//
//	client := &http.Client{Transport: roundtrip.New(lim, core.PerSecond(100))}
//
// Before each request, the Transport waits until its limit admits it
// (core.Limiter.WaitN, on Redis), then hands it to the base transport
// (http.DefaultTransport unless WithBase says otherwise). Every Transport,
// in every process, whose Limiter uses the same Redis (and key prefix)
// shares the rate of each key: by default one key per host the requests go
// to, so calls to "api.stripe.com" share one rate, and calls to other
// hosts have rates of their own. Workers that are not HTTP clients join the
// same rate by waiting on the same key:
//
//	lim.Wait(ctx, "api.stripe.com", core.PerSecond(100))
//
// The wait is bounded by the request's context, and so by http.Client's
// Timeout: when the context ends, or its deadline comes before the
// request's turn, RoundTrip fails at once without sending anything.
package roundtrip

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/redlimit/redlimit/core"
)

// Transport is an http.RoundTripper that waits for a shared rate limit
// before it sends each request through its base transport. It is safe for
// concurrent use by multiple goroutines, as http.Client requires. Create
// Transports with New; the zero Transport fails every request.
type Transport struct {
	lim     *core.Limiter
	limit   core.Limit
	base    http.RoundTripper // nil: http.DefaultTransport
	key     func(*http.Request) (string, error)
	cost    func(*http.Request) int // nil: 1
	onError func(*http.Request, error) error
}

var _ http.RoundTripper = (*Transport)(nil)

// Option configures a Transport in New.
type Option func(*Transport)

// WithBase sets the transport that sends the requests once they are
// admitted. The default, and nil, is http.DefaultTransport (read at each
// request).
func WithBase(base http.RoundTripper) Option {
	return func(t *Transport) { t.base = base }
}

// WithKey limits every request under one key, whatever its host: several
// hosts of one provider, or one host shared with workers that call
// core.Limiter.Wait with the same key. An empty key fails every request.
func WithKey(key string) Option {
	return func(t *Transport) {
		t.key = func(*http.Request) (string, error) { return key, nil }
	}
}

// WithKeyFunc sets how a request's key is found: for example a key per
// tenant, or per API token, toward one host. It must not modify the
// request. An error fails the request (see WithOnError). The default, and
// nil, is Host.
func WithKeyFunc(key func(r *http.Request) (string, error)) Option {
	return func(t *Transport) {
		t.key = key
		if key == nil {
			t.key = Host
		}
	}
}

// WithCost sets how many events of the limit a request takes: for
// example more for a batch endpoint, or 0 for requests that the provider
// does not count (they are sent without waiting). It must not modify the
// request. A cost above the limit's burst, or below 0, fails the request
// (the error wraps core.ErrInvalidCost). The default, and nil, is 1 per
// request.
func WithCost(cost func(r *http.Request) int) Option {
	return func(t *Transport) { t.cost = cost }
}

// WithOnError decides what a request does when waiting fails for a reason
// other than its context: Redis failed (errors wrapping core.ErrTimeout,
// core.ErrUnavailable, or the client's), or the request's key or cost is
// invalid (core.ErrInvalidKey, core.ErrInvalidCost), or the key function
// failed. onError receives the request and the error; if it returns nil,
// the request is sent anyway, unlimited (fail open); otherwise RoundTrip
// returns its error. It is not called when the request's context ended,
// or its deadline comes before the request's turn: those always fail.
//
// The default, and nil, fails the request with the error (fail closed):
// without Redis, nothing says how much of the provider's allowance is
// left. Fail open when going over it costs less than not calling at all.
func WithOnError(onError func(r *http.Request, err error) error) Option {
	return func(t *Transport) { t.onError = onError }
}

// New returns a Transport that waits until l admits each request under
// limit before it sends it, with the Options. By default each request
// costs 1 under the key Host gives (the URL's host) and is sent through
// http.DefaultTransport. New panics if l is nil or a zero core.Limiter{}
// (make it with core.New), or the limit is invalid:
// it runs at start-up.
func New(l *core.Limiter, limit core.Limit, opts ...Option) *Transport {
	if err := l.Validate(); err != nil {
		panic(fmt.Sprintf("redlimit: roundtrip.New: %v", err))
	}
	if err := limit.Validate(); err != nil {
		panic(fmt.Errorf("redlimit: roundtrip.New: %w", err))
	}
	t := &Transport{lim: l, limit: limit, key: Host}
	for _, opt := range opts {
		opt(t)
	}
	return t
}

// RoundTrip waits until the request is admitted, then sends it through the
// base transport and returns what that returns. It does not modify the
// request. When it cannot send the request (its context ended, its
// deadline comes before its turn, Redis failed and WithOnError did not let
// it through), it closes the request's body and returns a nil response and
// an error that wraps the cause: errors.Is finds context.Canceled or
// context.DeadlineExceeded (see core.Limiter.WaitN), or the Limiter's
// errors.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.wait(req); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return t.baseTransport().RoundTrip(req)
}

// wait blocks until req is admitted, or returns why it must not be sent.
func (t *Transport) wait(req *http.Request) error {
	if t == nil || t.lim == nil {
		return errors.New("roundtrip: Transport is not initialised; create it with roundtrip.New")
	}
	ctx := req.Context()
	key, err := t.key(req)
	if err == nil {
		n := 1
		if t.cost != nil {
			n = t.cost(req)
		}
		if err = t.lim.WaitN(ctx, key, t.limit, n); err == nil {
			return nil
		}
		err = fmt.Errorf("roundtrip: waiting to send under %v for %q: %w", t.limit, key, err)
	} else {
		err = fmt.Errorf("roundtrip: key of the request: %w", err)
	}
	if t.onError == nil || contextEnded(ctx, err) {
		return err
	}
	return t.onError(req, err)
}

// contextEnded reports whether err is the request context's doing: it has
// ended, or its deadline comes before the request's turn.
func contextEnded(ctx context.Context, err error) bool {
	return ctx.Err() != nil ||
		errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, core.ErrTimeout)
}

func (t *Transport) baseTransport() http.RoundTripper {
	if t.base != nil {
		return t.base
	}
	return http.DefaultTransport
}

// CloseIdleConnections closes the base transport's idle connections, if it
// has such a method (http.Transport has); http.Client.CloseIdleConnections
// calls it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.baseTransport().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Host is the default key of a request: its URL's host in lower case, with
// the port if the URL has one other than its scheme's default. So
// "https://API.Stripe.com/v1/charges" and "https://api.stripe.com:443/"
// both give "api.stripe.com", and "http://127.0.0.1:8080/" gives
// "127.0.0.1:8080". A URL without a host is an error.
func Host(r *http.Request) (string, error) {
	if r.URL == nil || r.URL.Host == "" {
		return "", errors.New("roundtrip: the request's URL has no host")
	}
	host := strings.ToLower(r.URL.Host)
	switch {
	case r.URL.Scheme == "https" && strings.HasSuffix(host, ":443"):
		host = strings.TrimSuffix(host, ":443")
	case r.URL.Scheme == "http" && strings.HasSuffix(host, ":80"):
		host = strings.TrimSuffix(host, ":80")
	}
	return host, nil
}
