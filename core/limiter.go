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

// ErrInvalidCost is wrapped by the error AllowN returns for a negative n.
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
// flight a decision is sent at once. The I/O is done by at most
// WithPipelines goroutines per Limiter, started when there is work and
// stopped after a second without any, never one per decision. A key Redis
// has just denied is answered in process until its RetryAfter
// (WithDenyCache). While Redis keeps failing, decisions fail at once with
// ErrUnavailable (WithBreaker).
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
// Keys are stored as <prefix>{<key>}:<algorithm>[:stepped][:<instance>]
// (":stepped" for a stepped TokenBucket, the instance from WithInstance),
// so all state of one key lands in one Redis Cluster slot. The key's Rate,
// Period and Burst are not part of the name: a limit may change at run time
// and keep its state.
type Limiter struct {
	prefix   string
	instance string // ":" + the instance id, or ""
	clock    func() time.Time
	// localClock replaces time.Now for the deny cache when clock is nil;
	// only tests set it (export_test.go).
	localClock func() time.Time
	timeout    time.Duration
	engine     *engine
	args       argCache
	deny       *denyCache // nil: off
	breaker    breaker

	// options, applied by New
	batch, pipelines int
	denyKeys         int
	denyMaxAge       time.Duration
	log              *slog.Logger
}

// Option configures a Limiter in New.
type Option func(*Limiter)

// WithPrefix sets the string every Redis key starts with. The default is
// DefaultPrefix ("redlimit:"); "" means no prefix. Limiters with different
// prefixes never share state.
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
// using the Redis. Keys become <prefix>{<key>}:<algorithm>:<id>, so the
// state of one identity still lives in one Cluster slot. The default, "",
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
	l.breaker.log = l.log
	l.engine = newEngine(rdb, l.batch, l.pipelines)
	if l.denyKeys > 0 && l.denyMaxAge > 0 {
		l.deny = newDenyCache(l.denyKeys, l.denyMaxAge)
	}
	return l
}

// Request is one decision, for Decide: the arguments of AllowN and a
// timeout of its own.
type Request struct {
	// Key identifies who is limited; see AllowN.
	Key string
	// Limit is the limit to decide under.
	Limit Limit
	// N is the cost: how many events to admit, all or nothing.
	N int
	// Timeout replaces the Limiter's timeout for this decision when it is
	// not 0; InfDuration means none (only the context bounds it).
	Timeout time.Duration
}

// Allow is AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.Decide(ctx, Request{Key: key, Limit: limit, N: 1})
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
	return l.Decide(ctx, Request{Key: key, Limit: limit, N: n})
}

// Decide makes the decision req describes, as AllowN does; it is for
// callers that need a timeout other than the Limiter's, such as the HTTP
// layer's policies.
func (l *Limiter) Decide(ctx context.Context, req Request) (Result, error) {
	limit, n := req.Limit, req.N
	if err := limit.Validate(); err != nil {
		return Result{}, err
	}
	if n < 0 {
		return Result{}, fmt.Errorf("%w: AllowN(n=%d): n must not be negative", ErrInvalidCost, n)
	}
	d := limit.descriptor()
	rkey, err := l.key(req.Key, d)
	if err != nil {
		return Result{}, err
	}
	burst := limit.Capacity()
	cost := n
	if n > burst {
		cost = 0 // report the state; the answer is no
	}
	now := l.now()
	if l.deny != nil && cost > 0 {
		if res, ok := l.deny.get(rkey, limit, cost, now); ok {
			return res, nil
		}
	}

	var clock any = "" // the server's
	if l.clock != nil {
		clock = now.UnixMicro()
	}
	c := newCall(d.script, rkey, clock, cost)
	c.args = append(c.args, l.args.get(limit, d)...)
	reply, err := l.run(ctx, c, req.Timeout)
	if err != nil {
		return Result{}, fmt.Errorf("redlimit: %s decision for %q: %w", d.suffix, req.Key, err)
	}
	res := Result{
		Limit:      limit,
		Allowed:    reply[0] == 1,
		Remaining:  int(reply[1]),
		RetryAfter: time.Duration(reply[2]) * time.Microsecond,
		ResetAfter: time.Duration(reply[3]) * time.Microsecond,
		Delay:      time.Duration(reply[4]) * time.Microsecond,
	}
	if n > burst {
		res.Allowed, res.RetryAfter = false, InfDuration
	} else if !res.Allowed && l.deny != nil {
		l.deny.add(rkey, cost, now, res)
	}
	return res, nil
}

// decisionReply is how many integers every decision script replies.
const decisionReply = 5

// run sends c through the breaker and the engine and returns its reply,
// checked to hold as many integers as c's script promises.
func (l *Limiter) run(ctx context.Context, c *call, timeout time.Duration) ([]int64, error) {
	want := decisionReply
	if c.script == delScript {
		want = 1
	}
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

// Reset forgets the state of key under limit's algorithm (and variant:
// stepped or not), giving it its full allowance back, and clears the key
// from this Limiter's deny cache. Other algorithms' state for the same key
// is untouched. It is bounded like a decision.
func (l *Limiter) Reset(ctx context.Context, key string, limit Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	d := limit.descriptor()
	rkey, err := l.key(key, d)
	if err != nil {
		return err
	}
	if l.deny != nil {
		l.deny.forget(rkey)
	}
	if _, err := l.run(ctx, newCall(delScript, rkey), 0); err != nil {
		return fmt.Errorf("redlimit: reset %s state of %q: %w", d.suffix, key, err)
	}
	if l.deny != nil { // a denial that landed while the reset was in flight
		l.deny.forget(rkey)
	}
	return nil
}

// key returns the Redis key of id under d: <prefix>{<id>}:<suffix>[:<instance>].
// Inside the braces, '%' and '}' are escaped (%25, %7D) so the hash tag is
// always the whole id and distinct ids never share a key.
func (l *Limiter) key(id string, d *descriptor) (string, error) {
	if l.engine == nil {
		return "", errors.New("redlimit: Limiter is not initialised; create it with core.New")
	}
	if id == "" {
		return "", fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(id) > MaxKeyLen {
		return "", fmt.Errorf("%w: key of %d bytes is longer than %d; hash it first", ErrInvalidKey, len(id), MaxKeyLen)
	}
	if strings.ContainsAny(id, "%}") {
		id = keyEscaper.Replace(id)
	}
	return l.prefix + "{" + id + "}:" + d.suffix + l.instance, nil
}

var keyEscaper = strings.NewReplacer("%", "%25", "}", "%7D")

// maxCachedLimits bounds the limits whose arguments a Limiter keeps boxed.
const maxCachedLimits = 1024

// argCache keeps each limit's script arguments (its algorithm's ARGV)
// boxed, so that a decision does not allocate to pass them. Most programs
// use a handful of limits; past maxCachedLimits, arguments are boxed per
// call.
type argCache struct {
	mu sync.RWMutex
	m  map[Limit][]any
}

func (c *argCache) get(l Limit, d *descriptor) []any {
	c.mu.RLock()
	args, ok := c.m[l]
	c.mu.RUnlock()
	if ok {
		return args
	}
	argv, n := d.args(l)
	args = make([]any, n)
	for i := range args {
		args[i] = argv[i]
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[Limit][]any)
	}
	if len(c.m) < maxCachedLimits {
		c.m[l] = args
	}
	c.mu.Unlock()
	return args
}
