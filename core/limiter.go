package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/lua"
)

// ErrInvalidKey is wrapped by the error a Limiter returns for a key it will
// not store: empty, or longer than MaxKeyLen bytes.
var ErrInvalidKey = errors.New("redlimit: invalid key")

// ErrInvalidCost is wrapped by the error AllowN returns for a negative n.
var ErrInvalidCost = errors.New("redlimit: invalid cost")

// MaxKeyLen is the longest key, in bytes, a Limiter accepts. Hash longer
// identities before passing them (the HTTP layer does).
const MaxKeyLen = 1024

// DefaultPrefix starts every Redis key a Limiter writes unless WithPrefix
// says otherwise.
const DefaultPrefix = "redlimit:"

// InfDuration is the RetryAfter of a request that can never be allowed: one
// whose cost exceeds the limit's burst.
const InfDuration = time.Duration(math.MaxInt64)

// algorithmSpec is what the Limiter knows of one algorithm.
type algorithmSpec struct {
	plain variant
	// stepped is the TokenBucket's stepped-refill variant; zero elsewhere.
	stepped variant
	// window: the allowance is Rate per Period, and Burst must equal Rate.
	window bool
	// span returns the largest integer the script will hold for l, beyond
	// the clock, so Validate can refuse limits Lua cannot count exactly. It
	// is a float64 so that absurd limits cannot overflow the check itself.
	span func(l Limit) float64
}

// variant is one script and the key suffix (after "}:") its state lives
// under. Variants whose state means different things never share a key.
type variant struct {
	script *redis.Script
	suffix string
}

func newVariant(src, suffix string) variant {
	return variant{redis.NewScript(src), suffix}
}

var algorithms = map[Algorithm]algorithmSpec{
	GCRA: {
		plain: newVariant(lua.GCRA, string(GCRA)),
		span: func(l Limit) float64 {
			interval := (micros(l.Period) + int64(l.Rate) - 1) / int64(l.Rate)
			return float64(l.Capacity()) * float64(interval)
		},
	},
	TokenBucket: {
		plain:   newVariant(lua.TokenBucket, string(TokenBucket)),
		stepped: newVariant(lua.TokenBucketStepped, string(TokenBucket)+":stepped"),
		span:    unitSpan,
	},
	LeakyBucket: {
		plain: newVariant(lua.LeakyBucket, string(LeakyBucket)),
		span:  unitSpan,
	},
	FixedWindow: {
		plain:  newVariant(lua.FixedWindow, string(FixedWindow)),
		window: true,
		span:   func(l Limit) float64 { return float64(micros(l.Period)) },
	},
	SlidingWindow: {
		plain:  newVariant(lua.SlidingWindow, string(SlidingWindow)),
		window: true,
		span: func(l Limit) float64 { // rate times the sub-bucket size
			return float64(l.Rate) * float64(micros(l.Period)/int64(l.buckets()))
		},
	},
	SlidingLog: {
		plain:  newVariant(lua.SlidingLog, string(SlidingLog)),
		window: true,
		span:   func(l Limit) float64 { return float64(micros(l.Period)) },
	},
}

// unitSpan bounds the bucket scripts' credit or level: burst events of
// period/gcd(period, rate) units each.
func unitSpan(l Limit) float64 {
	p := micros(l.Period)
	return float64(l.Capacity()) * float64(p/gcd(p, int64(l.Rate)))
}

// variant picks the script and key suffix for l, which must be valid.
func (l Limit) variant() variant {
	spec := algorithms[l.algorithm()]
	if l.Stepped {
		return spec.stepped
	}
	return spec.plain
}

var delScript = redis.NewScript(lua.Del)

// algorithmNames lists the known algorithms for error messages.
func algorithmNames() string {
	names := make([]string, 0, len(algorithms))
	for a := range algorithms {
		names = append(names, string(a))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

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
}

// Limiter makes rate-limit decisions, each one atomic Lua script run on
// Redis with a single EVALSHA (EVAL when the server does not have the script
// yet, for example after SCRIPT FLUSH or a restart).
//
// A Limiter is safe for concurrent use by multiple goroutines, and any number
// of Limiters, in any number of processes, may share keys through one Redis:
// that is the point. It holds no state besides its options. The zero value
// is not usable (its methods return an error); create Limiters with New.
//
// Keys are stored as <prefix>{<key>}:<algorithm>[:stepped][:<instance>]
// (":stepped" for a stepped TokenBucket, the instance from WithInstance),
// so all state of one key lands in one Redis Cluster slot. The key's Rate, Period and Burst are not
// part of the name: a limit may change at run time and keep its state.
type Limiter struct {
	rdb      redis.Scripter
	prefix   string
	instance string // ":" + the instance id, or ""
	clock    func() time.Time
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
// which is the default. Use it for deterministic tests. In production every
// process sharing keys must then have closely synchronised clocks; with the
// default, one key always sees one clock. nil restores the default.
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

// New returns a Limiter that runs its scripts on rdb: a *redis.Client,
// *redis.ClusterClient, *redis.Ring or any redis.UniversalClient. New does no
// I/O. It panics if rdb is nil, a programming error better found at start-up
// than on the first request.
func New(rdb redis.Scripter, opts ...Option) *Limiter {
	if rdb == nil {
		panic("redlimit: core.New: nil redis client")
	}
	l := &Limiter{rdb: rdb, prefix: DefaultPrefix}
	for _, opt := range opts {
		opt(l)
	}
	return l
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
// sent to Redis. Redis errors are returned wrapped (errors.Is works) with a
// zero Result.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	if err := limit.Validate(); err != nil {
		return Result{}, err
	}
	if n < 0 {
		return Result{}, fmt.Errorf("%w: AllowN(n=%d): n must not be negative", ErrInvalidCost, n)
	}
	burst := limit.Capacity()
	cost := n
	if n > burst {
		cost = 0 // report the state; the answer is no
	}
	v := limit.variant()
	rkey, err := l.key(key, v)
	if err != nil {
		return Result{}, err
	}
	var now any = ""
	if l.clock != nil {
		now = l.clock().UnixMicro()
	}
	var buckets, shape int
	if limit.algorithm() == SlidingWindow {
		buckets = limit.buckets()
	}
	if limit.Shape {
		shape = 1
	}
	reply, err := v.script.Run(ctx, l.rdb, []string{rkey}, now, limit.Rate, micros(limit.Period),
		burst, cost, buckets, shape, micros(limit.MaxDelay)).Slice()
	if err == nil {
		err = checkReply(reply)
	}
	if err != nil {
		return Result{}, fmt.Errorf("redlimit: %s decision for %q: %w", v.suffix, key, err)
	}
	res := Result{
		Limit:      limit,
		Allowed:    reply[0].(int64) == 1,
		Remaining:  int(reply[1].(int64)),
		RetryAfter: time.Duration(reply[2].(int64)) * time.Microsecond,
		ResetAfter: time.Duration(reply[3].(int64)) * time.Microsecond,
		Delay:      time.Duration(reply[4].(int64)) * time.Microsecond,
	}
	if n > burst {
		res.Allowed, res.RetryAfter = false, InfDuration
	}
	return res, nil
}

// checkReply makes sure a script replied with five integers, so reading
// them cannot panic.
func checkReply(reply []any) error {
	if len(reply) != 5 {
		return fmt.Errorf("script replied %d values, want 5", len(reply))
	}
	for i, v := range reply {
		if _, ok := v.(int64); !ok {
			return fmt.Errorf("script reply %d is %T, want an integer", i, v)
		}
	}
	return nil
}

// Reset forgets the state of key under limit's algorithm (and variant:
// stepped or not), giving it its full allowance back. Other algorithms'
// state for the same key is untouched.
func (l *Limiter) Reset(ctx context.Context, key string, limit Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	v := limit.variant()
	rkey, err := l.key(key, v)
	if err != nil {
		return err
	}
	if err := delScript.Run(ctx, l.rdb, []string{rkey}).Err(); err != nil {
		return fmt.Errorf("redlimit: reset %s state of %q: %w", v.suffix, key, err)
	}
	return nil
}

// key returns the Redis key of id under v: <prefix>{<id>}:<suffix>[:<instance>].
// Inside the braces, '%' and '}' are escaped (%25, %7D) so the hash tag is
// always the whole id and distinct ids never share a key.
func (l *Limiter) key(id string, v variant) (string, error) {
	if l.rdb == nil {
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
	return l.prefix + "{" + id + "}:" + v.suffix + l.instance, nil
}

var keyEscaper = strings.NewReplacer("%", "%25", "}", "%7D")
