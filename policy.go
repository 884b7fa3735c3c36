package redlimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// Failure says what a Policy does when Redis fails or does not answer
// within the timeout. The error goes to the error handler in every case.
type Failure int

const (
	// FailOpen lets the request through, without rate-limit headers. It is
	// the default: an outage of the limiter is not an outage of the API.
	FailOpen Failure = iota
	// FailClosed answers 503 Service Unavailable with Retry-After.
	FailClosed
	// FailLocal enforces the same Rate, Period and Burst in this process
	// (as GCRA, per instance rather than shared) until Redis answers again.
	// Its memory is bounded by WithLocalKeys.
	FailLocal
)

// String returns the policy's name: "fail-open", "fail-closed" or
// "fail-local".
func (f Failure) String() string {
	switch f {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	case FailLocal:
		return "fail-local"
	}
	return "Failure(" + strconv.Itoa(int(f)) + ")"
}

// Defaults of the options.
const (
	// DefaultTimeout is the Limiter's default timeout (core.DefaultTimeout),
	// which bounds each decision unless WithTimeout, here or on the
	// Limiter (core.WithTimeout), says otherwise.
	DefaultTimeout = core.DefaultTimeout
	// DefaultLocalKeys bounds the keys FailLocal tracks in memory.
	DefaultLocalKeys = 10_000
	// MaxNameLen bounds policy names, which are part of every Redis key.
	MaxNameLen = 256
	// hashKeysOver: keys longer than this are replaced by their SHA-256, so
	// a client cannot make Redis store long keys.
	hashKeysOver = 128
)

// Option configures a Policy. Every adapter (nethttp, ginlimit, echolimit)
// takes the same Options.
type Option func(*Policy)

// WithName names the policy. The name namespaces its Redis keys, so two
// policies share state exactly when they share a name, and it is the name
// in the RateLimit-Policy header. The default is the limit's string
// ("100/m"); if this process already has a policy of that name, "#2", "#3",
// ... is appended in order of creation, so two middlewares never share
// state by accident. Name policies explicitly when different builds of a
// service run side by side. At most MaxNameLen bytes.
func WithName(name string) Option {
	return func(p *Policy) { p.name = name }
}

// WithKey sets how requests are told apart. The default is keyfunc.IP():
// the peer address, ignoring forwarding headers. A request for which the
// Func fails is answered 400 Bad Request (see Decision.Status); use
// keyfunc.First to fall back to another key instead.
func WithKey(f keyfunc.Func) Option {
	return func(p *Policy) { p.key = f }
}

// WithCost sets how many events each request counts for; the default is 1.
// It must be between 1 and the limit's burst.
func WithCost(n int) Option {
	return func(p *Policy) { p.cost = n }
}

// WithSkip exempts the requests for which skip returns true (health checks,
// allow-lists): they pass without a decision and without headers. The
// default skips nothing.
func WithSkip(skip func(r *http.Request) bool) Option {
	return func(p *Policy) { p.skip = skip }
}

// WithDenyHandler replaces the answer to a request that does not pass:
// denied (429), unavailable under FailClosed (503), or without a key (400).
// The rate-limit headers and Retry-After are already set on w when it is
// called; it writes the status and body. The default writes
// {"error":"...","retry_after":N} as JSON (gin and echo answer in their
// own way, see their packages).
func WithDenyHandler(deny func(w http.ResponseWriter, r *http.Request, d Decision)) Option {
	return func(p *Policy) { p.deny = deny }
}

// WithErrorHandler receives every Redis error (including timeouts), after
// which the failure policy decides the request. The default logs with
// log/slog at error level, at most once a second per policy, counting the
// errors it left out.
func WithErrorHandler(report func(r *http.Request, err error)) Option {
	return func(p *Policy) { p.onError = report }
}

// WithFailure sets what happens when Redis fails; the default is FailOpen.
func WithFailure(f Failure) Option {
	return func(p *Policy) { p.failure = f }
}

// WithLocalKeys bounds the keys the FailLocal fallback keeps in memory; the
// default is DefaultLocalKeys. When full, it forgets an arbitrary key,
// preferring one whose state has expired.
func WithLocalKeys(n int) Option {
	return func(p *Policy) { p.localKeys = n }
}

// WithTimeout bounds each of the policy's decisions, so a slow Redis cannot
// stall requests; past it, the decision fails with an error wrapping
// core.ErrTimeout and the failure policy applies. Without it the Limiter's
// timeout applies (core.WithTimeout; DefaultTimeout unless set). 0 means
// only the request's own context bounds it. The wait costs no goroutine.
func WithTimeout(d time.Duration) Option {
	return func(p *Policy) {
		p.timeout = d
		if d == 0 {
			p.timeout = core.InfDuration
		}
	}
}

// WithDryRun makes the policy decide and report but never block: every
// request passes, no rate-limit headers are sent, and requests that would
// have been denied are logged with log/slog at info level and reported to
// the observer with Decision.DryRun set. Requests without a key and Redis
// failures pass too, whatever the failure policy. Use it to roll out a new
// limit.
func WithDryRun() Option {
	return func(p *Policy) { p.dryRun = true }
}

// WithObserver calls observe with every decision, after it is made and
// before the request is served or denied: for metrics. The default does
// nothing. It must be fast and safe for concurrent use.
func WithObserver(observe func(r *http.Request, d Decision)) Option {
	return func(p *Policy) { p.observe = observe }
}

// WithHeaders chooses the rate-limit response fields; the default is
// HeadersXRateLimit.
func WithHeaders(profile HeaderProfile) Option {
	return func(p *Policy) { p.headers.profile = profile }
}

// Decision is the outcome of the request flow for one request.
type Decision struct {
	// Policy is the name of the policy that decided.
	Policy string
	// Key is the request's key, from the key function, as the Limiter was
	// given it (hashed when long); the policy's name is the scope of its
	// state (see core.Term). "" when skipped or when the key function
	// failed.
	Key string
	// Result is the limiter's answer. It is zero when the request was
	// skipped, had no key, or Redis failed under FailOpen or FailClosed.
	Result core.Result
	// Status is 0 when the request may proceed. Otherwise it is the status
	// to answer with: 429 Too Many Requests, 503 Service Unavailable
	// (FailClosed, or the client left while queued by a shaping limit) or
	// 400 Bad Request (the key function found no key).
	Status int
	// Err is the Redis error, the key function's error, or the context's
	// error when a queued client left; nil otherwise.
	Err error
	// Skipped is true when WithSkip exempted the request.
	Skipped bool
	// Local is true when the FailLocal fallback decided.
	Local bool
	// DryRun is true when the policy runs dry and would have denied.
	DryRun bool
}

// Allowed reports whether the request may proceed.
func (d Decision) Allowed() bool { return d.Status == 0 }

// Message is a short, safe text for the answer to a request that does not
// pass; it never contains error details.
func (d Decision) Message() string {
	switch d.Status {
	case 0:
		return ""
	case http.StatusTooManyRequests:
		return "rate limit exceeded"
	case http.StatusBadRequest:
		return "request has no rate limit key"
	default:
		return "rate limiter unavailable"
	}
}

// Body is the default JSON answer for a request that does not pass.
type Body struct {
	Error string `json:"error"`
	// RetryAfter is the Retry-After header's value, in seconds; omitted
	// when there is none (400).
	RetryAfter int64 `json:"retry_after,omitempty"`
}

// Body returns the default JSON body for d; gin's adapter sends it with
// AbortWithStatusJSON.
func (d Decision) Body() Body {
	b := Body{Error: d.Message()}
	switch d.Status {
	case http.StatusTooManyRequests:
		b.RetryAfter = max(1, seconds(d.Result.RetryAfter))
	case http.StatusServiceUnavailable:
		b.RetryAfter = 1
	}
	return b
}

// Policy is a limit with everything the HTTP layer needs to enforce it: key
// function, cost, failure policy, headers. Adapters build one per
// middleware; it is safe for concurrent use.
type Policy struct {
	lim       *core.Limiter
	limit     core.Limit
	name      string
	key       keyfunc.Func
	cost      int
	skip      func(*http.Request) bool
	deny      func(http.ResponseWriter, *http.Request, Decision)
	onError   func(*http.Request, error)
	observe   func(*http.Request, Decision)
	failure   Failure
	localKeys int
	local     *localLimiter
	timeout   time.Duration // core.Request.Timeout: 0 is the Limiter's
	dryRun    bool
	headers   headerValues
	errLog    throttle
}

// NewPolicy checks the limit and options and returns a Policy. It does no
// I/O. Errors name what is wrong.
func NewPolicy(lim *core.Limiter, limit core.Limit, opts ...Option) (*Policy, error) {
	if lim == nil {
		return nil, errors.New("redlimit: nil *core.Limiter")
	}
	if err := limit.Validate(); err != nil {
		return nil, err
	}
	p := &Policy{lim: lim, limit: limit, key: keyfunc.IP(), cost: 1, localKeys: DefaultLocalKeys}
	for _, opt := range opts {
		opt(p)
	}
	burst := limit.Capacity()
	switch {
	case p.key == nil:
		return nil, errors.New("redlimit: WithKey(nil)")
	case p.cost < 1 || p.cost > burst:
		return nil, fmt.Errorf("redlimit: cost %d must be between 1 and the burst of %v (%d)", p.cost, limit, burst)
	case p.timeout < 0:
		return nil, fmt.Errorf("redlimit: negative timeout %v", p.timeout)
	case p.failure < FailOpen || p.failure > FailLocal:
		return nil, fmt.Errorf("redlimit: unknown failure policy %v", p.failure)
	case p.failure == FailLocal && p.localKeys < 1:
		return nil, fmt.Errorf("redlimit: WithLocalKeys(%d) must be at least 1", p.localKeys)
	case p.headers.profile < HeadersXRateLimit || p.headers.profile > HeadersNone:
		return nil, fmt.Errorf("redlimit: unknown header profile %d", p.headers.profile)
	case len(p.name) > MaxNameLen:
		return nil, fmt.Errorf("redlimit: policy name of %d bytes is longer than %d", len(p.name), MaxNameLen)
	}
	p.name = names.claim(p.name, limit)
	p.headers = newHeaderValues(p.headers.profile, p.name, limit)
	if p.failure == FailLocal {
		p.local = newLocalLimiter(limit, p.localKeys)
	}
	return p, nil
}

// MustPolicy is NewPolicy that panics on an error: for the adapters' one-line
// constructors, which run at start-up.
func MustPolicy(lim *core.Limiter, limit core.Limit, opts ...Option) *Policy {
	p, err := NewPolicy(lim, limit, opts...)
	if err != nil {
		panic(err)
	}
	return p
}

// Name returns the policy's name.
func (p *Policy) Name() string { return p.name }

// Limit returns the policy's limit.
func (p *Policy) Limit() core.Limit { return p.limit }

// Match returns p: a single policy applies to every request. It lets
// adapters treat a Policy and a RuleSet alike.
func (p *Policy) Match(*http.Request) *Policy { return p }

// Decide runs the request flow: skip, key, decision (bounded by the
// timeout, with the failure policy on errors), headers on w, and for a
// shaping limit the wait before serving. It does not write a status or
// body: when the Decision is not Allowed, answer with Deny, or in the
// framework's own way.
func (p *Policy) Decide(w http.ResponseWriter, r *http.Request) Decision {
	d := p.decide(w, r)
	if p.observe != nil {
		p.observe(r, d)
	}
	return d
}

func (p *Policy) decide(w http.ResponseWriter, r *http.Request) Decision {
	d := Decision{Policy: p.name}
	if p.skip != nil && p.skip(r) {
		d.Skipped = true
		return d
	}
	key, err := p.key(r)
	if err != nil {
		d.Err = err
		if p.dryRun {
			d.DryRun = true // would have answered 400
		} else {
			d.Status = http.StatusBadRequest
		}
		return d
	}
	d.Key = hashLong(key)

	d.Result, d.Err = p.allow(r.Context(), d.Key)
	if d.Err != nil {
		if err := r.Context().Err(); err != nil { // the client left: not Redis's fault
			d.Status, d.Err = http.StatusServiceUnavailable, err
			return d
		}
		p.reportError(r, d.Err)
		switch {
		case p.failure == FailLocal:
			d.Result, d.Local = p.local.allow(d.Key, time.Now(), p.cost), true
		case p.failure == FailClosed && !p.dryRun:
			d.Status = http.StatusServiceUnavailable
			setRetryAfter(w.Header(), time.Second)
			return d
		default: // fail open, or a dry run, which never blocks
			return d
		}
	}

	if p.dryRun {
		if !d.Result.Allowed {
			d.DryRun = true
			slog.InfoContext(r.Context(), "redlimit: dry run: would deny", "policy", p.name,
				"retry_after", d.Result.RetryAfter)
		}
		return d
	}
	p.headers.set(w.Header(), d.Result, !d.Result.Allowed)
	if !d.Result.Allowed {
		d.Status = http.StatusTooManyRequests
		return d
	}
	if d.Result.Delay > 0 {
		if err := sleep(r.Context(), d.Result.Delay); err != nil {
			d.Status, d.Err = http.StatusServiceUnavailable, err
		}
	}
	return d
}

// allow asks the Limiter, within the policy's timeout if it has one (else
// the Limiter's) and the request's context. The Limiter bounds the wait
// without a goroutine per request.
func (p *Policy) allow(ctx context.Context, key string) (core.Result, error) {
	terms := [1]core.Term{{Scope: p.name, Limit: p.limit, N: p.cost}}
	return p.lim.Decide(ctx, core.Request{Key: key, Terms: terms[:], Timeout: p.timeout})
}

// Deny answers a request whose Decision is not Allowed: with the deny
// handler if one was given, else with the default JSON Body.
func (p *Policy) Deny(w http.ResponseWriter, r *http.Request, d Decision) {
	if p.deny != nil {
		p.deny(w, r, d)
		return
	}
	WriteBody(w, d)
}

// HasDenyHandler reports whether WithDenyHandler was given, for adapters
// that answer in their framework's own way otherwise.
func (p *Policy) HasDenyHandler() bool { return p.deny != nil }

// WriteBody writes d's status and default JSON Body to w.
func WriteBody(w http.ResponseWriter, d Decision) {
	b := d.Body()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	buf := make([]byte, 0, 64)
	buf = append(buf, `{"error":"`...)
	buf = append(buf, b.Error...) // a fixed message: nothing to escape
	buf = append(buf, '"')
	if b.RetryAfter > 0 {
		buf = append(buf, `,"retry_after":`...)
		buf = strconv.AppendInt(buf, b.RetryAfter, 10)
	}
	buf = append(buf, "}\n"...)
	_, _ = w.Write(buf)
}

func (p *Policy) reportError(r *http.Request, err error) {
	if p.onError != nil {
		p.onError(r, err)
		return
	}
	if skipped, ok := p.errLog.allow(time.Now()); ok {
		slog.ErrorContext(r.Context(), "redlimit: rate limit decision failed", "policy", p.name,
			"failure", p.failure.String(), "error", err, "errors_not_logged", skipped)
	}
}

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hashLong replaces keys longer than hashKeysOver bytes by "sha256:<hex>".
func hashLong(key string) string {
	if len(key) <= hashKeysOver {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// throttle lets one event through per second and counts the rest.
type throttle struct {
	last    atomic.Int64 // unix nanoseconds of the last event let through
	skipped atomic.Int64
}

// allow reports whether to log now, and how many events were held back
// since the last one.
func (t *throttle) allow(now time.Time) (skipped int64, ok bool) {
	last := t.last.Load()
	if now.UnixNano()-last < int64(time.Second) || !t.last.CompareAndSwap(last, now.UnixNano()) {
		t.skipped.Add(1)
		return 0, false
	}
	return t.skipped.Swap(0), true
}

// names hands out default policy names: the first use of a name keeps it,
// later default names get "#2", "#3", ...
var names = nameRegistry{used: map[string]int{}}

type nameRegistry struct {
	mu   sync.Mutex
	used map[string]int
}

// claim returns name if set (recording it), else a fresh name for l.
func (n *nameRegistry) claim(name string, l core.Limit) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if name != "" {
		n.used[name]++
		return name
	}
	base := l.String()
	for {
		n.used[base]++
		count := n.used[base]
		if count == 1 {
			return base
		}
		candidate := base + "#" + strconv.Itoa(count)
		if n.used[candidate] == 0 {
			n.used[candidate] = 1
			return candidate
		}
	}
}
