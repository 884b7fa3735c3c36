package core

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A limit keeps its state for a key in Redis under a name made of the
// key, the scope the limit is decided in ("" unless the HTTP layer decides
// it for a policy, whose name is its scope), the variant of its algorithm
// whose state it is (the stepped token bucket's differs from the
// continuous one's), its period and its unit (none for requests):
//
//	<prefix>[<scope>:]{<key>}:<variant>:<period>[:<unit>]
//
// for example "redlimit:login:{203.0.113.7}:gcra:1m", or
// "redlimit:{key:k1}:gcra:1m:tokens". Everything else about a limit (Rate,
// Burst, Buckets, ...) is read afresh at every decision, so it may change
// and keep the state. Two limits share state exactly when their scope,
// variant, period and unit are equal; that identity names the Redis key,
// FailLocal's state in process, and the HTTP layer's header members.
//
// The key is a Cluster hash tag, so every limit of one key, in every scope,
// lands in one Redis Cluster slot and can be decided in one script.
//
// The name is one-to-one: two (prefix, scope, key, variant, period) never
// share one, whatever bytes they hold. Written with e(s, x), s with '%' and
// the bytes of x as %XX (e is one-to-one: '%' always starts an escape):
//
//   - the key is e(key, "}"): no '}';
//   - the prefix is e(p, "{}:") + c, where c is its final ':' if it has
//     one (kept, so "redlimit:" stays) and p the rest: no '{', and a ':'
//     only at its end;
//   - a scope is e(scope, "{}:") + ":", after a prefix ending in ':'
//     ("redlimit:login:"), or after "::" otherwise (prefix "" and scope
//     "login": "::login:").
//
// So the first '{' of a name opens the hash tag and the first '}' after it
// closes it: the tag is exactly the escaped key (never empty: an empty key
// is an error), and what follows it is ":<variant>:<period>", split at its
// last ':' (a period has none). What precedes it has 0, 1, 2 or 3 bytes
// ':', one count each for: a prefix without a final ':', with one, with
// one and a scope, without one and with a scope; p and the scope are the
// text before its first ':' and between its last two. Escaping '%' keeps prefix "P%7B" apart from "P{"
// (written "P%257B" and "P%7B"); escaping ':' keeps prefix "P:login:"
// ("P%3Alogin:") apart from prefix "P:" in scope "login" ("P:login:").

// limitInfo is what a decision needs of a valid limit, worked out once.
type limitInfo struct {
	d        *descriptor
	capacity int
	period   string        // the period as keys write it: "1m", "10s", "24h"; "1d", "1w", "1month" on the calendar
	state    string        // ":<variant>:<period>", which follows the key's hash tag
	args     []any         // the algorithm's name and ARGV, boxed
	calendar *calendar     // the boundaries a calendar window sends after args; nil for others
	lease    time.Duration // how long a slot of a limit that holds slots (Concurrency) lasts; 0 for others
	debt     int64         // µs one charge may leave the state in debt (Limit.MaxDebt, or its Period)
}

// appendArgs appends to args the limit's algorithm name and ARGV, with a
// calendar window's boundaries around now.
func (info *limitInfo) appendArgs(args []any, now time.Time) []any {
	args = append(args, info.args...)
	if info.calendar != nil {
		args = info.calendar.appendBounds(args, now)
	}
	return args
}

// stateKey returns the name of the state key keeps under the limit of
// info in scope; prefix is written as escapePrefix returns it.
func stateKey(prefix, scope, key string, info *limitInfo) string {
	if strings.ContainsAny(key, "%}") {
		key = escape(key, "}")
	}
	if scope == "" {
		return prefix + "{" + key + "}" + info.state
	}
	if strings.ContainsAny(scope, "%{}:") {
		scope = escape(scope, "{}:")
	}
	if strings.HasSuffix(prefix, ":") {
		return prefix + scope + ":{" + key + "}" + info.state
	}
	return prefix + "::" + scope + ":{" + key + "}" + info.state
}

// escapePrefix returns prefix as key names write it: '%', '{', '}' and
// every ':' but a final one as %XX.
func escapePrefix(prefix string) string {
	p, colon := strings.CutSuffix(prefix, ":")
	if !strings.ContainsAny(p, "%{}:") {
		return prefix
	}
	if p = escape(p, "{}:"); colon {
		p += ":"
	}
	return p
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

// scopeOf returns the scope of limit i: scopes[i], or "" without scopes.
func scopeOf(scopes []string, i int) string {
	if scopes == nil {
		return ""
	}
	return scopes[i]
}

// CheckLimits reports whether limits, each in its scope (scopes may be
// nil: all ""), can be decided together (a Request): 1 to MaxLimits valid
// limits, no two of which would share state. Errors wrap ErrInvalidLimit.
// It is what ParseLimits and the HTTP layer's policies check their limits
// with.
func CheckLimits(scopes []string, limits []Limit) error {
	if len(limits) == 0 || len(limits) > MaxLimits {
		return fmt.Errorf("%w: %d limits in one decision; want 1 to %d", ErrInvalidLimit, len(limits), MaxLimits)
	}
	if scopes != nil && len(scopes) != len(limits) {
		return fmt.Errorf("redlimit: %d scopes for %d limits", len(scopes), len(limits))
	}
	var buf [MaxLimits]*limitInfo
	for i, l := range limits {
		info, err := workOut(l)
		if err != nil {
			return err
		}
		buf[i] = info
		for j := range i {
			if buf[j].state == info.state && scopeOf(scopes, j) == scopeOf(scopes, i) {
				return errSharedState(limits[j], l)
			}
		}
	}
	return nil
}

func errSharedState(a, b Limit) error {
	return fmt.Errorf("%w: %v and %v on one key would share state; give them different periods, algorithms or units (or scopes)",
		ErrInvalidLimit, a, b)
}

// maxCachedLimits bounds the limits whose checks and arguments are kept.
const maxCachedLimits = 1024

// limitCache keeps the limitInfo of the limits a Limiter has seen, so a
// decision neither validates its limits again nor allocates to pass their
// arguments. Most programs use a handful of limits; past maxCachedLimits,
// limits are worked out per call. pays: bench/cmd/compare core, 1
// goroutine, 7 → 13 allocs/op working each limit out per decision
// (2026-11-28).
type limitCache struct {
	mu   sync.RWMutex
	m    map[Limit]*limitInfo
	long atomic.Bool // a limit of an hour or more was seen, not counting Concurrency leases (loss.go)
}

// get returns the limitInfo of l, or the error that makes l invalid.
func (c *limitCache) get(l Limit) (*limitInfo, error) {
	c.mu.RLock()
	info, ok := c.m[l]
	c.mu.RUnlock()
	if ok {
		return info, nil
	}
	info, err := workOut(l)
	if err != nil {
		return nil, err
	}
	if l.Period >= time.Hour && !info.d.holds {
		c.long.Store(true)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[Limit]*limitInfo{}
	}
	if len(c.m) < maxCachedLimits {
		c.m[l] = info
	}
	return info, nil
}

// workOut returns what a decision needs of l, or the error that makes l
// invalid.
func workOut(l Limit) (*limitInfo, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	d := l.descriptor()
	argv, n := d.args(l)
	period, variant := formatPeriod(l.Period, keyUnits), d.suffix
	if d.bounds { // on the calendar: its own period names, and the zone
		period, variant = calendarPeriod(l.Period), variant+":"+l.Calendar
	}
	if c := period[0]; c < '0' || c > '9' {
		period = "1" + period // keys always write the count: "1m"
	}
	state := ":" + variant + ":" + period
	if l.Unit != "" { // a period starts with a digit: a unit never reads as one
		state += ":" + l.Unit
	}
	info := &limitInfo{d: d, capacity: l.Capacity(), period: period,
		state: state, args: make([]any, 1+n), debt: l.debt()}
	if d.bounds {
		var err error
		if info.calendar, err = newCalendar(l); err != nil {
			return nil, err
		}
	}
	info.args[0] = d.name
	if d.holds {
		info.lease = l.Period
	}
	for i := range n {
		info.args[1+i] = argv[i]
	}
	return info, nil
}

// StateName returns what tells l's state apart from other limits' of one
// key and scope: its algorithm's variant ("gcra", "token_bucket:stepped",
// "fixed_window:calendar:Europe/Berlin") and its period as state keys
// write it ("1m", "10s", "1month"); "", "" if l is invalid. The HTTP layer
// names its header members after it.
func (l Limit) StateName() (variant, period string) {
	info, err := workOut(l)
	if err != nil {
		return "", ""
	}
	return info.d.suffix, info.period
}
