package redlimit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/dunglas/httpsfv"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
)

// Defaults of the options.
const (
	// DefaultTimeout is the Limiter's default timeout (core.DefaultTimeout),
	// which bounds each decision unless WithTimeout, here or on the
	// Limiter (core.WithTimeout), says otherwise.
	DefaultTimeout = core.DefaultTimeout
	// DefaultLocalKeys bounds the keys FailLocal tracks in memory.
	DefaultLocalKeys = 10_000
	// maxNameLen bounds policy names, which are part of every Redis key.
	maxNameLen = 256
	// hashKeysOver: keys longer than this are replaced by their SHA-256, so
	// a client cannot make Redis store long keys.
	hashKeysOver = 128
)

// Policy is one or more limits with everything the HTTP layer needs to
// enforce them: key function, cost, failure policy, headers. Adapters build
// one per middleware; a rules table builds one per rule. It is safe for
// concurrent use.
type Policy struct {
	lim      *core.Limiter
	name     string
	limits   []core.Limit // its own: the first, then WithAlso's
	also     []core.Limit
	quotas   []quota // what a request is decided under: a rules table's catch-all's, then its own
	inherits int     // how many of quotas are the catch-all's
	pick     func(*http.Request) ([]core.Limit, error)

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
	log       *slog.Logger
	errLog    throttle
	dryLog    throttle

	// answers
	profile         HeaderProfile
	resetUnix       bool
	jitter          time.Duration
	pkSecret        []byte
	problem         bool
	frameworkErrors bool
}

// NewPolicy checks the limit and options and returns a Policy. It does no
// I/O. Errors name what is wrong.
func NewPolicy(lim *core.Limiter, limit core.Limit, opts ...Option) (*Policy, error) {
	p, err := newPolicy(lim, []core.Limit{limit}, opts)
	if err != nil {
		return nil, err
	}
	if err := claimName(lim, p.name, p.unnamed()); err != nil {
		return nil, err
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

// newPolicy builds a policy of limits (and WithAlso's) with opts; its name
// is not claimed yet.
func newPolicy(lim *core.Limiter, limits []core.Limit, opts []Option) (*Policy, error) {
	if lim == nil {
		return nil, errors.New("redlimit: nil *core.Limiter")
	}
	p := &Policy{lim: lim, key: keyfunc.IP(), cost: 1, localKeys: DefaultLocalKeys}
	for _, opt := range opts {
		opt(p)
	}
	p.limits = append(limits[:len(limits):len(limits)], p.also...)
	if err := core.ValidateLimits(p.limits); err != nil {
		return nil, err
	}
	burst := smallestBurst(p.limits)
	switch {
	case p.key == nil:
		return nil, errors.New("redlimit: WithKey(nil)")
	case p.cost < 1 || p.cost > burst:
		return nil, fmt.Errorf("redlimit: cost %d must be between 1 and the burst of %v (%d)", p.cost, core.FormatLimits(p.limits), burst)
	case p.timeout < 0:
		return nil, fmt.Errorf("redlimit: negative timeout %v", p.timeout)
	case p.failure < FailOpen || p.failure > FailLocal:
		return nil, fmt.Errorf("redlimit: unknown failure policy %v", p.failure)
	case p.failure == FailLocal && p.localKeys < 1:
		return nil, fmt.Errorf("redlimit: WithLocalKeys(%d) must be at least 1", p.localKeys)
	case p.profile < HeadersXRateLimit || p.profile > HeadersNone:
		return nil, fmt.Errorf("redlimit: unknown header profile %d", p.profile)
	case p.jitter < 0:
		return nil, fmt.Errorf("redlimit: negative Retry-After jitter %v", p.jitter)
	case p.pkSecret != nil && len(p.pkSecret) < 16:
		return nil, fmt.Errorf("redlimit: WithPartitionKey: a secret of %d bytes; want at least 16", len(p.pkSecret))
	}
	if p.name == "" {
		p.name = core.FormatLimits(p.limits)
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if err := checkName(p.name); err != nil {
		return nil, err
	}
	p.quotas = quotasOf(p.name, p.limits)
	if p.failure == FailLocal {
		p.local = newLocalLimiter(p.localKeys)
	}
	return p, nil
}

// unnamed reports whether p's name is its default.
func (p *Policy) unnamed() bool { return p.name == core.FormatLimits(p.limits) }

func smallestBurst(limits []core.Limit) int {
	burst := limits[0].Capacity()
	for _, l := range limits[1:] {
		burst = min(burst, l.Capacity())
	}
	return burst
}

// checkName refuses names the RateLimit headers' structured-field strings
// cannot carry, and names too long for a key.
func checkName(name string) error {
	if len(name) > maxNameLen {
		return fmt.Errorf("redlimit: policy name of %d bytes is longer than %d", len(name), maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("redlimit: policy name %q: byte %d is not printable ASCII, which the RateLimit header fields cannot carry", name, i)
		}
	}
	return nil
}

// Name returns the policy's name: the scope of its state in Redis.
func (p *Policy) Name() string { return p.name }

// Limit returns the policy's own limit (the first of Limits).
func (p *Policy) Limit() core.Limit { return p.limits[0] }

// Limits returns the policy's limits: its own, then WithAlso's. A rules
// table's catch-all limits, which its rules' requests are decided under
// too, are not among them.
func (p *Policy) Limits() []core.Limit { return append([]core.Limit(nil), p.limits...) }

// Match returns p: a single policy applies to every request. It lets
// adapters treat a Policy and a RuleSet alike.
func (p *Policy) Match(*http.Request) *Policy { return p }

// Decide runs the request flow: skip, key, decision (bounded by the
// timeout, with the failure policy on errors), headers on w, and for a
// shaping limit the wait before serving. It does not write a status or
// body: when the Decision is not Allowed, answer with Deny, or in the
// framework's own way.
func (p *Policy) Decide(w http.ResponseWriter, r *http.Request) Decision {
	if p.observe == nil {
		return p.decide(w, r)
	}
	start := time.Now()
	d := p.decide(w, r)
	d.Duration = time.Since(start)
	p.observe(r, d)
	return d
}

func (p *Policy) decide(w http.ResponseWriter, r *http.Request) Decision {
	d := Decision{Policy: p.name}
	if p.skip != nil && p.skip(r) {
		d.Skipped = true
		return d
	}
	key, err := p.key(r)
	var quotas []quota
	if err == nil {
		d.Key = hashLong(key)
		quotas, err = p.requestQuotas(r)
	}
	if err != nil {
		return p.badRequest(d, err)
	}

	var termBuf [core.MaxTerms]core.Term
	var eachBuf [core.MaxTerms]core.Result
	terms, each := termBuf[:len(quotas)], eachBuf[:len(quotas)]
	for i, q := range quotas {
		terms[i] = core.Term{Scope: q.scope, Limit: q.limit, N: p.cost}
	}
	d.Result, d.Err = p.lim.DecideEach(r.Context(), core.Request{Key: d.Key, Terms: terms, Timeout: p.timeout}, each)
	switch {
	case d.Err == nil:
	case isInputError(d.Err): // limits a request picked, or its key: never a pass
		return p.badRequest(d, d.Err)
	case r.Context().Err() != nil: // the client left: not Redis's fault
		d.Status, d.Err = http.StatusServiceUnavailable, r.Context().Err()
		return d
	default:
		p.reportError(r, d.Err)
		switch {
		case p.failure == FailLocal:
			d.Result, d.Local = p.local.allow(d.Key, terms, time.Now(), each), true
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
			p.reportDryRun(r, d.Result)
		}
		return d
	}
	a := answer{quotas: quotas, each: each, res: d.Result}
	if !d.Result.Allowed {
		a.retryAfter = p.retryAfter(d.Result.RetryAfter)
		d.retryAfter = a.retryAfter
		if p.problem {
			d.violated = violated(quotas, each)
		}
	}
	if p.pkSecret != nil {
		a.pk = p.partitionKey(d.Key)
	}
	p.setHeaders(w.Header(), a)
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

// retryAfter is the Retry-After of a denial that must wait d: whole
// seconds, rounded up, at least 1, plus the jitter, which only adds.
func (p *Policy) retryAfter(d time.Duration) int64 {
	if p.jitter > 0 && d < core.InfDuration-p.jitter {
		d += rand.N(p.jitter)
	}
	return max(1, seconds(d))
}

// partitionKey is the draft's pk parameter for key: ";pk=:<base64>:".
func (p *Policy) partitionKey(key string) string {
	mac := hmac.New(sha256.New, p.pkSecret)
	mac.Write([]byte(key))
	pk, err := httpsfv.Marshal(httpsfv.NewItem(mac.Sum(nil)[:12]))
	if err != nil { // not reached: any bytes are a Byte Sequence
		return ""
	}
	return ";pk=" + pk
}

// violated names the list members that denied.
func violated(quotas []quota, each []core.Result) []string {
	var names []string
	for i, r := range each {
		if !r.Allowed {
			names = append(names, quotas[i].name)
		}
	}
	return names
}

// requestQuotas returns what r is decided under: the policy's quotas, or,
// with WithRequestLimits, the catch-all's and the limits r picked.
func (p *Policy) requestQuotas(r *http.Request) ([]quota, error) {
	if p.pick == nil {
		return p.quotas, nil
	}
	limits, err := p.pick(r)
	switch {
	case err != nil:
		return nil, fmt.Errorf("redlimit: the request's limits: %w", err)
	case limits == nil:
		return p.quotas, nil
	case len(limits)+p.inherits > core.MaxTerms:
		return nil, fmt.Errorf("%w: the request picked %d limits; at most %d", core.ErrInvalidLimit, len(limits), core.MaxTerms-p.inherits)
	}
	return append(p.quotas[:p.inherits:p.inherits], quotasOf(p.name, limits)...), nil
}

// badRequest answers a request without a key, or whose limits are wrong:
// 400, or a pass in a dry run.
func (p *Policy) badRequest(d Decision, err error) Decision {
	d.Err, d.invalid = err, true
	if p.dryRun {
		d.DryRun = true // would have answered 400
	} else {
		d.Status = http.StatusBadRequest
	}
	return d
}

// isInputError reports an error of the request's own making, which no
// failure policy may turn into a pass.
func isInputError(err error) bool {
	return errors.Is(err, core.ErrInvalidLimit) || errors.Is(err, core.ErrInvalidCost) || errors.Is(err, core.ErrInvalidKey)
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

// Names of policies, per Limiter: a default name may be used once, so
// that two unnamed policies with the same limits never share state by
// accident; explicit names may be shared on purpose. A Limiter's names are
// forgotten when it is collected.
var policyNames sync.Map // weak.Pointer[core.Limiter] -> *nameSet

type nameSet struct {
	mu    sync.Mutex
	names map[string]bool // name -> used by an unnamed policy
}

// claimName records name for a policy of lim, or says why it may not have it.
func claimName(lim *core.Limiter, name string, unnamed bool) error {
	wp := weak.Make(lim)
	v, loaded := policyNames.LoadOrStore(wp, &nameSet{names: map[string]bool{}})
	if !loaded {
		runtime.AddCleanup(lim, func(wp weak.Pointer[core.Limiter]) { policyNames.Delete(wp) }, wp)
	}
	set := v.(*nameSet)
	set.mu.Lock()
	defer set.mu.Unlock()
	byDefault, used := set.names[name]
	if used && (unnamed || byDefault) {
		return fmt.Errorf("redlimit: two policies of one Limiter are named %q, at least one by default, and would share state; give each its own name with redlimit.WithName", name)
	}
	set.names[name] = unnamed
	return nil
}
