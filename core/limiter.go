package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrInvalidKey is wrapped by the error a Limiter returns for a key it will
// not store: empty, or longer than MaxKeyLen bytes.
var ErrInvalidKey = errors.New("redlimit: invalid key")

// ErrInvalidCost is wrapped by the error AllowN returns for a negative n,
// and by the error WaitN returns at once for an n above the limit's burst,
// which no wait can admit.
var ErrInvalidCost = errors.New("redlimit: invalid cost")

// ErrTimeout is wrapped by the error of a decision that got no answer from
// Redis within the Limiter's timeout (WithTimeout). That error wraps
// context.DeadlineExceeded too. The decision may still reach Redis and
// count.
var ErrTimeout = errors.New("redlimit: no answer from Redis in time")

// ErrUnavailable is wrapped by the error of a decision answered at once,
// without asking Redis, because Redis keeps failing (the breaker is open;
// see WithBreaker) or because too many decisions already wait for it. It
// is retried soon: one decision in a while tests whether Redis is back.
var ErrUnavailable = errors.New("redlimit: Redis unavailable")

// MaxKeyLen is the longest key, in bytes, a Limiter accepts. Hash longer
// identities before passing them (the HTTP layer does).
const MaxKeyLen = 1024

// DefaultPrefix starts every Redis key a Limiter writes unless WithPrefix
// says otherwise.
const DefaultPrefix = "redlimit:"

// DefaultTimeout bounds each decision unless WithTimeout says otherwise.
const DefaultTimeout = 100 * time.Millisecond

// InfDuration is the RetryAfter of a request that can never be allowed: one
// whose cost exceeds the limit's burst. As a timeout it means none.
const InfDuration = time.Duration(math.MaxInt64)

func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// Result is the outcome of one decision.
type Result struct {
	// Limit is the limit the decision was made under.
	Limit Limit
	// Allowed reports whether the events were admitted (and counted).
	Allowed bool
	// Remaining is how many more single events would be allowed right now.
	Remaining int
	// RetryAfter is 0 when Allowed. Otherwise a retry of the same cost after
	// RetryAfter is allowed, absent other traffic on the key; InfDuration
	// when the cost exceeds the burst and can never be allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to its full allowance,
	// absent other traffic; 0 when it is full now.
	ResetAfter time.Duration
	// NextAfter is the time until one more event is allowed (Remaining
	// grows by one), absent other traffic; 0 when Remaining is already the
	// limit's capacity. It is at most ResetAfter, and when denied at most
	// RetryAfter: what the IETF draft's RateLimit field calls the time until
	// additional quota is available.
	NextAfter time.Duration
	// Delay is how long an allowed event must wait before it is served: the
	// place in the queue of a LeakyBucket with Shape. It is 0 for every
	// other limit, for denied events and for n = 0. Callers that shape
	// should sleep Delay (watching their context) before serving.
	Delay time.Duration
	// Cached reports a denial answered by the Limiter's deny cache, without
	// asking Redis: Redis denied at least this cost for the key moments
	// ago, and nothing but time (or a Reset) can change that. RetryAfter and
	// ResetAfter count down from Redis's answer, and Remaining is what Redis
	// said then. For a cost above the denied one, RetryAfter is a lower
	// bound. See WithDenyCache.
	Cached bool
}

// Limiter makes rate-limit decisions, each one atomic Lua script run on
// Redis (EVALSHA; EVAL when the server does not have the script yet, for
// example after SCRIPT FLUSH or a restart).
//
// A Limiter is safe for concurrent use by multiple goroutines, and any number
// of Limiters, in any number of processes, may share keys through one Redis:
// that is the point. The zero value is not usable (its methods return an
// error); create Limiters with New.
//
// A Limiter owns time and transport. Each decision is bounded by its
// timeout and its context, whichever ends first (WithTimeout). Concurrent
// decisions share round trips: what waits while a pipeline is in flight is
// sent together in the next (WithBatchSize, WithPipelines); with nothing in
// flight a decision is sent at once. To a single server a batch is one
// call of a script that makes each decision in turn (WithBatchScript). The
// I/O is done by at most WithPipelines goroutines per Limiter, started
// when there is work and stopped after a second without any, never one per
// decision. With a client whose commands go-redis bounds by their
// context's deadline (ContextTimeoutEnabled), a decision made while
// nothing is in flight is sent from the caller's goroutine instead, saving
// the hand-off (about 25 µs on a 2-core machine) at the cost of five
// allocations; a cancellation without a deadline is then seen when the
// round trip ends, at the latest at the timeout. A key Redis has just
// denied is answered in process until its RetryAfter (WithDenyCache).
// While Redis keeps failing, decisions fail at once with ErrUnavailable
// (WithBreaker).
//
// A decision is sent to Redis at most once: a script that may have run is
// never sent again, since that could count it twice. The Limiter tells
// go-redis not to retry its commands, whatever the client's MaxRetries,
// and handles NOSCRIPT itself. A decision whose reply is lost (a killed
// connection, a timeout) is an error, and may or may not have counted.
// MOVED and ASK redirections on a Cluster are still followed: the script
// did not run where it was refused. A redis.Scripter that is not a go-redis
// client (no Process method) is asked through its Eval methods, with its
// own retries.
//
// Keys are stored as
//
//	<prefix>[<scope>:]{<key>}:<algorithm>[:stepped]:<period>[:<instance>]
//
// for example "redlimit:login:{203.0.113.7}:gcra:1m" (the scope from a
// Term, ":stepped" for a stepped TokenBucket, the period written with its
// count, the instance from WithInstance). The key is a Cluster hash tag,
// so every limit of one key, in every scope, lands in one Redis Cluster
// slot and can be decided in one script. Rate and Burst are not part of
// the name: a limit may change at run time and keep its state. Limits of
// different periods or algorithms on one key keep apart.
type Limiter struct {
	prefix   string
	instance string // ":" + the instance id, or ""
	clock    func() time.Time
	// localClock replaces time.Now for the deny cache when clock is nil;
	// only tests set it (export_test.go).
	localClock func() time.Time
	timeout    time.Duration
	engine     *engine
	limits     limitCache
	deny       *denyCache // nil: off
	breaker    breaker

	// options, applied by New
	batch, pipelines int
	noBatchScript    bool
	denyKeys         int
	denyMaxAge       time.Duration
	log              *slog.Logger
}

// Option configures a Limiter in New.
type Option func(*Limiter)

// WithPrefix sets the string every Redis key starts with. The default is
// DefaultPrefix ("redlimit:"); "" means no prefix. Limiters with different
// prefixes never share state. Braces (and then '%') in it are written as
// %7B, %7D (and %25), so that they cannot move the Cluster hash tag off the
// key.
func WithPrefix(prefix string) Option {
	return func(l *Limiter) { l.prefix = prefix }
}

// WithClock makes the Limiter read time from now and pass it to the
// scripts, instead of each script reading the Redis server's clock (TIME),
// which is the default. The deny cache then runs on it too. Use it for
// deterministic tests. In production every process sharing keys must then
// have closely synchronised clocks; with the default, one key always sees
// one clock. nil restores the default.
func WithClock(now func() time.Time) Option {
	return func(l *Limiter) { l.clock = now }
}

// WithInstance scopes every key of the Limiter to one app instance: its
// limits then apply per instance instead of being shared by all instances
// using the Redis. Keys end in ":<id>" (see Limiter), so the state of one
// identity still lives in one Cluster slot. The default, "",
// shares limits between all instances. Use a stable id (a hostname, a pod
// name) so that a restarted instance finds its state. For both kinds of
// limit, make two Limiters; they may share one client.
func WithInstance(id string) Option {
	return func(l *Limiter) {
		l.instance = ""
		if id != "" {
			l.instance = ":" + id
		}
	}
}

// WithTimeout bounds each decision: past d without an answer from Redis, it
// returns an error wrapping ErrTimeout and context.DeadlineExceeded. The
// default is DefaultTimeout (100 ms); 0 means only the context bounds a
// decision. The context always does, whichever ends first. Negative
// durations are treated as 0.
func WithTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.timeout = max(0, d) }
}

// WithBatchSize sets the most decisions sent to Redis in one round trip (a
// pipeline; on a Cluster, one per node). The default is DefaultBatchSize;
// 1 turns batching off, so each decision is its own round trip. Values
// below 1 are treated as 1.
func WithBatchSize(n int) Option {
	return func(l *Limiter) { l.batch = max(1, n) }
}

// WithPipelines sets the most round trips the Limiter has in flight at once,
// which is also the most goroutines it runs for I/O (and connections it
// holds). The default is DefaultPipelines. With batching off
// (WithBatchSize(1)) it bounds the decisions in flight, so raise it
// towards the client's PoolSize. Values below 1 are treated as 1.
func WithPipelines(n int) Option {
	return func(l *Limiter) { l.pipelines = max(1, n) }
}

// WithBatchScript sets whether a batch sent to a single Redis server (a
// *redis.Client: standalone, or Sentinel's failover client) goes as one
// call of a script that makes every decision in it, instead of a pipeline
// of one script call per decision. The decisions stay independent and each
// stays atomic; one call costs the server about a third less per decision
// (see bench/). The default is on. Turn it off behind a proxy that sends a
// script wherever its first key belongs (twemproxy, Envoy's Redis proxy),
// which would run a batch of many keys on one shard. A server that refuses
// the call as CROSSSLOT (a cluster behind one endpoint) turns it off by
// itself, with a warning: that call did not run and is sent again as a
// pipeline. On a Cluster or Ring client, the decisions of one batch that
// share a hash tag (one key decided by many requests at once) go as one
// call of that script, the others one call each, pipelined per node; off,
// every decision is a call of its own.
func WithBatchScript(on bool) Option {
	return func(l *Limiter) { l.noBatchScript = !on }
}

// WithDenyCache sets how many denied keys the Limiter remembers, to answer
// them in process until their RetryAfter instead of asking Redis again.
// The default is DefaultDenyCacheKeys; 0 turns the cache off. When full, it
// forgets the least recently denied key. A denial is exact until its
// RetryAfter, except for what other processes do to the key: a Reset or a
// raised limit through another Limiter takes effect here within
// WithDenyCacheMaxAge. Through this Limiter, Reset clears the key and a
// changed Limit never finds the old entry.
func WithDenyCache(keys int) Option {
	return func(l *Limiter) { l.denyKeys = max(0, keys) }
}

// WithDenyCacheMaxAge bounds how long the deny cache answers for a key
// without asking Redis, whatever its RetryAfter. The default is
// DefaultDenyCacheMaxAge (1 s). Values of 0 or below turn the cache off.
func WithDenyCacheMaxAge(d time.Duration) Option {
	return func(l *Limiter) { l.denyMaxAge = d }
}

// WithBreaker sets how long decisions must keep failing (errors or
// timeouts, at least BreakerMinFailures in a row, no success between)
// before the Limiter stops asking Redis and fails them at once with an
// error wrapping ErrUnavailable. While it is open, one decision every
// BreakerProbeInterval is sent as a probe; the first that succeeds closes
// it. The default is DefaultBreakerAfter (500 ms), so under steady traffic
// the breaker opens within about a second of Redis failing and closes
// within about a second of its return. 0 turns it off.
//
// It also keeps a dead Redis from flooding logs: go-redis logs each failed
// dial through its own logger (redis.SetLogger), and with the breaker open
// only probes dial.
func WithBreaker(after time.Duration) Option {
	return func(l *Limiter) { l.breaker.after = max(0, after) }
}

// WithLogger sets where the Limiter logs the breaker opening (warning) and
// closing (info). It logs nothing per decision. The default is
// slog.Default() at the time New runs; nil restores it.
func WithLogger(log *slog.Logger) Option {
	return func(l *Limiter) { l.log = log }
}

// New returns a Limiter that runs its scripts on rdb: a *redis.Client,
// *redis.ClusterClient, *redis.Ring, a Sentinel failover client or any
// redis.UniversalClient. New does no I/O and starts no goroutine. It panics
// if rdb is nil, a programming error better found at start-up than on the
// first request.
func New(rdb redis.Scripter, opts ...Option) *Limiter {
	if rdb == nil {
		panic("redlimit: core.New: nil redis client")
	}
	l := &Limiter{prefix: DefaultPrefix, timeout: DefaultTimeout,
		batch: DefaultBatchSize, pipelines: DefaultPipelines,
		denyKeys: DefaultDenyCacheKeys, denyMaxAge: DefaultDenyCacheMaxAge}
	l.breaker.after = DefaultBreakerAfter
	for _, opt := range opts {
		opt(l)
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if strings.ContainsAny(l.prefix, "{}") {
		l.prefix = escape(l.prefix, "{}")
	}
	l.breaker.log = l.log
	l.engine = newEngine(rdb, l.batch, l.pipelines, !l.noBatchScript, l.log)
	if l.denyKeys > 0 && l.denyMaxAge > 0 {
		l.deny = newDenyCache(l.denyKeys, l.denyMaxAge)
	}
	return l
}

// MaxTerms is the most limits one decision may hold.
const MaxTerms = 16

// Term is one limit of a decision: N events for the decision's key under
// Limit, its state kept in Scope. Scope namespaces state outside the key's
// Cluster hash tag (the HTTP layer puts its policy name there), so every
// scope of one key lands in one slot and can be decided in one script.
// Terms of one decision must not share state: they must differ in Scope,
// in algorithm (and variant) or in Period.
type Term struct {
	// Scope is "" (the default) or a name; it is part of the Redis key
	// (see Limiter), with '{', '}' and '%' escaped.
	Scope string
	// Limit is the limit to decide under.
	Limit Limit
	// N is the cost: how many events to admit, all or nothing.
	N int
}

// Request is one decision, for Decide: a key, one or more terms decided
// together, all or nothing, and a timeout of its own.
type Request struct {
	// Key identifies who is limited; see AllowN.
	Key string
	// Terms are the limits to decide under, 1 to MaxTerms of them. The
	// decision admits every term's N or none; see AllowAll.
	Terms []Term
	// Timeout replaces the Limiter's timeout for this decision when it is
	// not 0; InfDuration means none (only the context bounds it).
	Timeout time.Duration
}

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN asks to admit n events for key under limit, all or nothing: either
// all n are counted and Result.Allowed is true, or none is.
//
// n = 0 reports the key's state without changing it (Allowed is true). An n
// above the limit's burst can never be allowed: the result is not Allowed,
// consumes nothing, reports the state, and has RetryAfter InfDuration. A
// negative n, an invalid limit or an invalid key is an error and nothing is
// sent to Redis. A failed decision returns a zero Result and an error that
// wraps the cause (errors.Is works): ErrTimeout, ErrUnavailable, the
// context's error, or the client's.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	terms := [1]Term{{Limit: limit, N: n}}
	return l.decide(ctx, key, terms[:], 0, nil)
}

// AllowAll admits n events for key only if every limit allows them, in one
// atomic decision (one script, one round trip): a denial by any limit
// changes the state of none. Limits on one key must differ in Algorithm
// (or variant: stepped, shape) or Period, else the error wraps
// ErrInvalidLimit. A limit's state on a key is the same whether it is
// decided alone (AllowN) or with others, so the two may be mixed.
//
// The Result is the binding limit's: Result.Limit is the denying limit with
// the longest RetryAfter, or, when allowed, the limit with the fewest
// Remaining; ResetAfter is the longest of all and Delay the longest of the
// allowed. An n above any limit's burst is never allowed (RetryAfter
// InfDuration) and consumes nothing. Errors are as AllowN's.
func (l *Limiter) AllowAll(ctx context.Context, key string, limits []Limit, n int) (Result, error) {
	if len(limits) > MaxTerms {
		return Result{}, fmt.Errorf("%w: %d limits in one decision; at most %d", ErrInvalidLimit, len(limits), MaxTerms)
	}
	var buf [MaxTerms]Term
	terms := buf[:len(limits)]
	for i, lim := range limits {
		terms[i] = Term{Limit: lim, N: n}
	}
	return l.decide(ctx, key, terms, 0, nil)
}

// Decide makes the decision req describes, as AllowAll does but with a
// scope and a cost per term and a timeout of its own: for callers such as
// the HTTP layer, whose policies each keep their state in their own scope.
func (l *Limiter) Decide(ctx context.Context, req Request) (Result, error) {
	return l.decide(ctx, req.Key, req.Terms, req.Timeout, nil)
}

// DecideEach is Decide that also stores each term's own result in each,
// which must be nil or as long as req.Terms. When the decision is denied,
// terms that did not deny report their state as it stays (as for N = 0),
// since nothing is counted.
func (l *Limiter) DecideEach(ctx context.Context, req Request, each []Result) (Result, error) {
	if each != nil && len(each) != len(req.Terms) {
		return Result{}, fmt.Errorf("redlimit: DecideEach: %d results for %d terms", len(each), len(req.Terms))
	}
	return l.decide(ctx, req.Key, req.Terms, req.Timeout, each)
}

// decisionWidth is how many integers a decision script replies per term.
const decisionWidth = 6

// decide checks the terms, answers from the deny cache or asks Redis, and
// returns the binding result (and each term's in each, if not nil).
func (l *Limiter) decide(ctx context.Context, id string, terms []Term, timeout time.Duration, each []Result) (Result, error) {
	if err := l.checkID(id); err != nil {
		return Result{}, err
	}
	if len(terms) == 0 || len(terms) > MaxTerms {
		return Result{}, fmt.Errorf("%w: %d limits in one decision; want 1 to %d", ErrInvalidLimit, len(terms), MaxTerms)
	}
	var keyBuf [MaxTerms]string
	var infoBuf [MaxTerms]*limitInfo
	keys, infos := keyBuf[:len(terms)], infoBuf[:len(terms)]
	never, mixed := false, false // a cost above a burst; several scripts' algorithms
	for i, t := range terms {
		info, err := l.limits.get(t.Limit)
		if err != nil {
			return Result{}, err
		}
		if t.N < 0 {
			return Result{}, fmt.Errorf("%w: n=%d must not be negative", ErrInvalidCost, t.N)
		}
		infos[i], keys[i] = info, l.key(t.Scope, id, info)
		never = never || t.N > info.capacity
		mixed = mixed || info.d.file != infos[0].d.file
		for j := range i {
			if keys[j] == keys[i] {
				return Result{}, errSharedState(terms[j].Limit, t.Limit)
			}
		}
	}

	now := l.now()
	var cacheID string
	var seq uint64
	refresh := false // this decision refreshes a cached denial
	if l.deny != nil && !never {
		cacheID = keys[0]
		if len(keys) > 1 {
			cacheID = strings.Join(keys, "\x00")
		}
		var res Result
		var ok bool
		if res, ok, refresh = l.deny.get(cacheID, keys, terms, now, each); ok {
			return res, nil
		}
		seq = l.deny.sent()
	}

	s := infos[0].d.script
	if mixed {
		s = mixedScript
	}
	c := newCall(s, len(keys))
	for _, k := range keys {
		c.args = append(c.args, k)
	}
	var clock any = "" // the server's
	if l.clock != nil {
		clock = now.UnixMicro()
	}
	c.args = append(c.args, clock)
	for i, t := range terms {
		cost := t.N
		if never {
			cost = 0 // report the state; the answer is no
		}
		c.args = append(append(c.args, cost), infos[i].args...)
	}
	reply, err := l.run(ctx, c, timeout, 1+decisionWidth*len(terms))
	if err != nil {
		// A copy of id: were id itself to reach the heap, so would the
		// Request holding it, Terms included (escape analysis does not
		// tell fields apart), costing callers an allocation per decision.
		return Result{}, fmt.Errorf("redlimit: %s decision for %q: %w", algorithmsOf(infos), strings.Clone(id), err)
	}

	var buf [MaxTerms]Result
	results := buf[:len(terms)]
	for i, t := range terms {
		r := reply[1+decisionWidth*i:]
		results[i] = Result{
			Limit:      t.Limit,
			Allowed:    r[0] == 1,
			Remaining:  int(r[1]),
			RetryAfter: time.Duration(r[2]) * time.Microsecond,
			ResetAfter: time.Duration(r[3]) * time.Microsecond,
			Delay:      time.Duration(r[4]) * time.Microsecond,
			NextAfter:  time.Duration(r[5]) * time.Microsecond,
		}
		if t.N > infos[i].capacity {
			results[i].Allowed, results[i].RetryAfter = false, InfDuration
		}
	}
	copy(each, results)
	res := Binding(results)
	switch {
	case !res.Allowed && l.deny != nil && !never:
		l.deny.add(cacheID, keys, terms, now, seq, results)
	case refresh: // allowed after all: another process reset or raised a limit
		l.deny.forget(cacheID)
	}
	return res, nil
}

// algorithmsOf names the algorithms of a decision, for errors:
// "gcra", "gcra+fixed_window".
func algorithmsOf(infos []*limitInfo) string {
	names := make([]string, len(infos))
	for i, info := range infos {
		names[i] = info.d.name
	}
	return strings.Join(names, "+")
}

// Binding returns the result of a decision of several limits from each
// limit's own result, as AllowAll does: the denying limit's with the
// longest RetryAfter, or, when all allow, the one with the fewest
// Remaining (the first of equals); with the longest ResetAfter of all, and
// the longest Delay when allowed. results must not be empty.
func Binding(results []Result) Result {
	res := results[0]
	for _, r := range results[1:] {
		switch {
		case res.Allowed && !r.Allowed,
			!res.Allowed && !r.Allowed && r.RetryAfter > res.RetryAfter,
			res.Allowed && r.Allowed && r.Remaining < res.Remaining:
			r.ResetAfter, r.Delay = max(r.ResetAfter, res.ResetAfter), max(r.Delay, res.Delay)
			res = r
		default:
			res.ResetAfter, res.Delay = max(res.ResetAfter, r.ResetAfter), max(res.Delay, r.Delay)
		}
	}
	if !res.Allowed {
		res.Delay = 0
	}
	return res
}

// run sends c through the breaker and the engine and returns its reply,
// checked to hold want integers.
func (l *Limiter) run(ctx context.Context, c *call, timeout time.Duration, want int) ([]int64, error) {
	probe, err := l.breaker.admit(time.Now())
	if err != nil {
		c.recycle()
		return nil, err
	}
	switch {
	case timeout == 0:
		timeout = l.timeout
	case timeout == InfDuration:
		timeout = 0
	}
	reply, err := l.engine.do(ctx, c, timeout)
	switch {
	case err == nil:
	case ctx.Err() != nil && !errors.Is(err, ErrTimeout): // the caller left: not Redis's failure
		l.breaker.release(probe)
		return nil, err
	default:
		l.breaker.failure(time.Now(), probe, err)
		return nil, err
	}
	if len(reply) != want {
		err := fmt.Errorf("script replied %d values, want %d", len(reply), want)
		l.breaker.failure(time.Now(), probe, err)
		return nil, err
	}
	l.breaker.success(probe)
	return reply, nil
}

// now reads the Limiter's clock: WithClock's, in the whole microseconds the
// scripts see (so that the deny cache's instants are Redis's), else the
// process's.
func (l *Limiter) now() time.Time {
	switch {
	case l.clock != nil:
		return time.UnixMicro(l.clock().UnixMicro())
	case l.localClock != nil:
		return l.localClock()
	}
	return time.Now()
}

// Reset forgets the state of key under limit (its algorithm, variant and
// period), giving it its full allowance back, and makes this Limiter's deny
// cache forget every denial that involved it. Other limits' state for the
// same key is untouched. It is bounded like a decision.
func (l *Limiter) Reset(ctx context.Context, key string, limit Limit) error {
	return l.ResetScope(ctx, "", key, limit)
}

// ResetScope is Reset for the state key keeps under limit in scope (see
// Term).
func (l *Limiter) ResetScope(ctx context.Context, scope, key string, limit Limit) error {
	if err := l.checkID(key); err != nil {
		return err
	}
	info, err := l.limits.get(limit)
	if err != nil {
		return err
	}
	rkey := l.key(scope, key, info)
	c := newCall(delScript, 1)
	c.args = append(c.args, rkey)
	_, err = l.run(ctx, c, 0, 1)
	if l.deny != nil { // after the reset, so that denials sent meanwhile go too
		l.deny.reset(rkey)
	}
	if err != nil {
		return fmt.Errorf("redlimit: reset %v state of %q: %w", limit, key, err)
	}
	return nil
}

// checkID reports whether the Limiter can store state for id.
func (l *Limiter) checkID(id string) error {
	switch {
	case l.engine == nil:
		return errors.New("redlimit: Limiter is not initialised; create it with core.New")
	case id == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(id) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes is longer than %d; hash it first", ErrInvalidKey, len(id), MaxKeyLen)
	}
	return nil
}

// key returns the Redis key of id under a limit in scope:
// <prefix>[<scope>:]{<id>}:<suffix>:<period>[:<instance>]. The scope is
// outside the hash tag, so every scope and limit of one id lands in one
// Cluster slot. In the scope, '{', '}' and '%' are escaped (%7B, %7D, %25);
// inside the braces, '%' and '}', so the hash tag is always the whole id
// and distinct ids or scopes never share a key.
func (l *Limiter) key(scope, id string, info *limitInfo) string {
	if strings.ContainsAny(id, "%}") {
		id = escape(id, "}")
	}
	if scope != "" {
		if strings.ContainsAny(scope, "%{}") {
			scope = escape(scope, "{}")
		}
		return l.prefix + scope + ":{" + id + "}" + info.tail + l.instance
	}
	return l.prefix + "{" + id + "}" + info.tail + l.instance
}

// escape returns a copy of s with '%' and the bytes of special written as
// %XX. It always copies, so that s need not reach the heap.
func escape(s, special string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' || strings.IndexByte(special, c) >= 0 {
			b.Write([]byte{'%', hex[c>>4], hex[c&15]})
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// maxCachedLimits bounds the limits whose checks and arguments a Limiter
// keeps.
const maxCachedLimits = 1024

// limitInfo is what a decision needs of a valid limit, worked out once.
type limitInfo struct {
	d        *descriptor
	capacity int
	tail     string // the key after the id's "}": ":<suffix>:<period>"
	args     []any  // the algorithm's name and ARGV, boxed
}

// limitCache keeps the limitInfo of the limits a Limiter has seen, so a
// decision neither validates its limits again nor allocates to pass their
// arguments. Most programs use a handful of limits; past maxCachedLimits,
// limits are worked out per call.
type limitCache struct {
	mu sync.RWMutex
	m  map[Limit]*limitInfo
}

func (c *limitCache) get(l Limit) (*limitInfo, error) {
	c.mu.RLock()
	info, ok := c.m[l]
	c.mu.RUnlock()
	if ok {
		return info, nil
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	d := l.descriptor()
	argv, n := d.args(l)
	info = &limitInfo{d: d, capacity: l.Capacity(), args: make([]any, 1+n),
		tail: ":" + d.suffix + ":" + periodKey(l.Period)}
	info.args[0] = d.name
	for i := range n {
		info.args[1+i] = argv[i]
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[Limit]*limitInfo)
	}
	if len(c.m) < maxCachedLimits {
		c.m[l] = info
	}
	c.mu.Unlock()
	return info, nil
}
