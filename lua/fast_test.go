package lua

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestFastPathsAgree: the fast paths (each algorithm file's "--- fast ---"
// section, run by decide.lua's quick) answer and store exactly as the
// general path does. Random sequences of operations run twice, on twin
// keys of one server: once through the scripts as Decision and Batch
// assemble them, once through the same scripts without the fast paths
// (general), so that every decision goes the general way. After every
// operation the replies must be equal, and so must the twins' states and
// their times to live (to the millisecond on miniredis, whose clock
// stands still; on redis-server, where a twin is written a moment after
// the other, within 50 ms).
//
// The operations: decisions of one limit (costs 0, 1, the burst, above
// it, multiples of drip, "take up to"), on the client's clock or the
// server's (miniredis, whose TIME the test sets), alone or several in a
// batch; reservations, prefetches, their settlements (refunds, charges,
// a prefetch's give-back); decisions of two limits at once; the clock
// stepping by nothing, a µs, fractions of the interval, periods, or back;
// limits changing their rate; and states written directly in every form
// a script reads (absent, "t", "t:q:0:b:a", with a floor or refunds, the
// old "t:f"; a window's hash, in debt or not; a bucket's hash). REDLIMIT_FAST_SEED
// replays a run.
func TestFastPathsAgree(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("REDLIMIT_FAST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		newTwins(t, rdb, m, seed).run(3000)
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		newTwins(t, redistest.Standalone(t).Client(t), nil, seed+1).run(1500)
	})
}

// TestFastPathsEdges: states and clocks that the random operations reach
// rarely, decided by both paths: a meter whose position a is at
// max_units (2^51), where it starts counting afresh, or just below it;
// and a clock before 1970 (negative µs: WithClock may send one), on which
// the general path keeps a key at least -now µs, so that the fast path
// leaves such a write to it.
func TestFastPathsEdges(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	w := newTwins(t, rdb, m, 1)
	now := w.now
	cases := []struct {
		name  string
		state any // a string, a hash's fields, or nil for none
		now   int64
	}{
		{"gcra", fmt.Sprintf("%d:0:0:10000:1:%d:7:%d", now+5000, now-9, int64(1)<<51), now}, // half an event's backlog
		{"gcra", fmt.Sprintf("%d:0:0:10000:1:%d:7:%d", now+5000, now-9, int64(1)<<51-1), now},
		{"token_bucket", []any{"c", 970000, "t", now, "u", 10000, "d", 1, "k", 100, "f", 0, "h", now - 9, "e", 7, "a", int64(1) << 51, "p", ""}, now},
		{"token_bucket", []any{"c", 970000, "t", now, "u", 10000, "d", 1, "k", 100, "f", 0, "h", now - 9, "e", 7, "a", int64(1)<<51 - 1, "p", ""}, now},
		{"gcra", nil, -2_000_000}, {"gcra", nil, -1},
		{"fixed_window", nil, -1}, {"token_bucket", nil, -1},
	}
	for _, c := range cases {
		w.now = c.now
		for _, cost := range []string{"1", "0", "2", "200"} { // written, read, denied
			w.set(c.name, c.state, time.Minute)
			args := append([]string{"d", itoa(c.now), "", "0", cost, "0", c.name}, w.limit[c.name].args...)
			w.compare(fmt.Sprintf("%s %v at %d, cost %s", c.name, c.state, c.now, cost), "", []string{c.name}, args)
			w.compare(fmt.Sprintf("%s %v at %d, cost %s, again", c.name, c.state, c.now, cost), "", []string{c.name}, args)
		}
	}
}

// set gives both twins of the named algorithm the state (a string, a
// hash's fields, or nil for none) to live for ttl.
func (w *twins) set(name string, state any, ttl time.Duration) {
	f, g := twinKeys(name)
	var before, after *redis.TimeCmd
	_, err := w.rdb.TxPipelined(w.ctx, func(p redis.Pipeliner) error {
		before = p.Time(w.ctx)
		defer func() { after = p.Time(w.ctx) }()
		for _, key := range []string{f, g} {
			p.Del(w.ctx, key)
			switch state := state.(type) {
			case string:
				p.Set(w.ctx, key, state, ttl)
			case []any:
				p.HSet(w.ctx, key, state...)
				p.PExpire(w.ctx, key, ttl)
			}
		}
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	// The twins' times to live start apart by up to the transaction's
	// span, which a busy machine may stretch (compare allows for it).
	w.setSpan[name] = after.Val().Sub(before.Val()).Milliseconds()
}

// general returns src without its fast paths (src/<name>_fast.lua) and
// quick's choice of them: quick finds none, and every decision goes the
// general way.
func general(t *testing.T, src string) string {
	for _, name := range fastAlgorithms {
		src = strings.Replace(src, read("src/"+name+"_fast"), "", 1)
		src = strings.Replace(src, fmt.Sprintf("  if name == '%s' then f = %s_fast end\n", name, name), "", 1)
		if strings.Contains(src, "local function "+name+"_fast(") || strings.Contains(src, name+"_fast end") {
			t.Fatalf("the fast path of %s is left in the general script", name)
		}
	}
	return src
}

// The algorithms with a fast path, and the twins' keys: the fast script
// decides on "{f}:<name>", the general one on "{g}:<name>".
var fastAlgorithms = []string{"gcra", "fixed_window", "token_bucket"}

func twinKeys(name string) (fast, general string) { return "{f}:" + name, "{g}:" + name }

// A limit as core sends it: its algorithm's name and arguments.
type limit struct {
	name string
	args []string
	drip int64 // gcra, token_bucket; 1 for a window
	unit int64
	// brief: its state lives about a millisecond, which on redis-server
	// may end while the twin's lives on (a PEXPIRE of 1 ms that stalls a
	// millisecond deletes the key at once): miniredis only.
	brief bool
}

func meterLimit(name string, period, rate, burst int64) limit {
	g := gcd(period, rate)
	return limit{name, []string{itoa(period / g), itoa(rate / g), itoa(burst)}, rate / g, period / g, period/rate < 10000}
}

func windowLimit(period, burst int64) limit {
	return limit{"fixed_window", []string{itoa(period), itoa(burst)}, 1, 1, period < 1000000}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// limits: periods and rates whose drip is 1 and whose drip is not (3/s,
// 7/min, a billion a second), bursts of 1 up to the rate and above.
var limits = map[string][]limit{
	"gcra": {
		meterLimit("gcra", 1e6, 100, 100), meterLimit("gcra", 1e6, 3, 3), meterLimit("gcra", 1e6, 1e9, 1e9),
		meterLimit("gcra", 60e6, 7, 10), meterLimit("gcra", 1000, 1, 1), meterLimit("gcra", 3e6, 2, 5),
		meterLimit("gcra", 1e6, 7, 1),
	},
	"token_bucket": {
		meterLimit("token_bucket", 1e6, 100, 100), meterLimit("token_bucket", 1e6, 3, 3),
		meterLimit("token_bucket", 1e6, 1e9, 1e9), meterLimit("token_bucket", 60e6, 7, 10),
		meterLimit("token_bucket", 1000, 1, 1), meterLimit("token_bucket", 1e6, 7, 1),
	},
	"fixed_window": {
		windowLimit(1e6, 10), windowLimit(1000, 1), windowLimit(60e6, 100), windowLimit(7, 3),
	},
}

// twins runs operations on the twin keys of one server.
type twins struct {
	t                *testing.T
	ctx              context.Context
	rdb              *redis.Client
	mini             *miniredis.Miniredis // nil: redis-server
	rng              *rand.Rand
	now              int64            // the client's clock, µs
	limit            map[string]limit // each algorithm's, as it is now
	fast, gen        map[string]*redis.Script
	reservations     []reservation
	decided, quicker int // decisions, and those a fast path may take
	// setSpan is, by algorithm, the ms its twins' last write spanned, until
	// a comparison gives both the same time to live again.
	setSpan map[string]int64
}

// reservation is what a settlement sends back of a decision.
type reservation struct {
	limit    limit
	rid      string
	giveBack bool // a prefetch's
	n        int64
	reply    []int64 // the decision's (lua/src/decide.lua)
}

func newTwins(t *testing.T, rdb *redis.Client, mini *miniredis.Miniredis, seed uint64) *twins {
	t.Logf("seed %d (REDLIMIT_FAST_SEED)", seed)
	w := &twins{t: t, ctx: context.Background(), rdb: rdb, mini: mini, rng: rand.New(rand.NewPCG(seed, seed)),
		now: 1_764_000_000_000_000, limit: map[string]limit{}, setSpan: map[string]int64{},
		fast: map[string]*redis.Script{}, gen: map[string]*redis.Script{}}
	for _, name := range fastAlgorithms {
		w.limit[name] = limits[name][0]
		w.fast[name], w.gen[name] = redis.NewScript(Script(name)), redis.NewScript(general(t, Script(name)))
	}
	w.fast["all"], w.gen["all"] = redis.NewScript(Script("all")), redis.NewScript(general(t, Script("all")))
	for _, s := range append(slices.Collect(maps.Values(w.fast)), append(slices.Collect(maps.Values(w.gen)), stateScript)...) {
		if err := s.Load(w.ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *twins) run(steps int) {
	for i := 0; i < steps && !w.t.Failed(); i++ {
		switch r := w.rng.IntN(100); {
		case r < 15:
			w.step()
		case r < 25:
			name := w.pick()
			w.limit[name] = w.anyLimit(name)
		case r < 35:
			w.write(w.pick())
		case r < 60:
			name := w.pick()
			w.compare(fmt.Sprintf("step %d: %s", i, name), "", []string{name}, append([]string{"d"}, w.decision(name, 0)...))
		case r < 75:
			w.batch(i)
		case r < 82:
			w.compare(fmt.Sprintf("step %d: both limits", i), "all", fastAlgorithms, append([]string{"d"}, w.both()...))
		default:
			w.settle(i)
		}
	}
	if w.t.Failed() {
		return
	}
	// The fast paths must have had work: most decisions are theirs to take.
	if w.quicker < w.decided/2 {
		w.t.Errorf("%d of %d decisions were common ones; the operations hardly test the fast paths", w.quicker, w.decided)
	}
}

// delete deletes every twin, and forgets the reservations made on them.
func (w *twins) delete() {
	for _, name := range fastAlgorithms {
		f, g := twinKeys(name)
		if err := w.rdb.Del(w.ctx, f, g).Err(); err != nil {
			w.t.Fatal(err)
		}
	}
	w.reservations = nil
}

func (w *twins) pick() string { return fastAlgorithms[w.rng.IntN(len(fastAlgorithms))] }

func (w *twins) anyLimit(name string) limit {
	for {
		if l := limits[name][w.rng.IntN(len(limits[name]))]; w.mini != nil || !l.brief {
			return l
		}
	}
}

// step moves the client's clock: not at all, a µs, a fraction of an
// event's interval or a period, whole periods, or back; rarely to just
// after 1970 (no state is kept across such a jump) or back to the present.
func (w *twins) step() {
	interval := max(1, w.limit["gcra"].unit/w.limit["gcra"].drip)
	switch w.rng.IntN(40) {
	case 0, 1:
		w.now = w.rng.Int64N(2_000_000)
		if w.rng.IntN(2) == 0 {
			w.now = 1_764_000_000_000_000 + w.rng.Int64N(1_000_000)
		}
		w.delete()
	}
	switch w.rng.IntN(6) {
	case 1:
		w.now++
	case 2:
		w.now += w.rng.Int64N(3 * interval)
	case 3:
		w.now += w.rng.Int64N(2_000_000)
	case 4:
		w.now += (1 + w.rng.Int64N(3)) * 60_000_000
	case 5:
		w.now = max(0, w.now-w.rng.Int64N(2*interval))
	}
}

// decision returns the arguments of one decision of the named algorithm's
// limit (lua/src/decide.lua): its clock, a reservation id ("" mostly; one
// of n events if n is above 0, or a prefetch's), the events a prefetch
// asks for, its cost and whether it takes up to it, its name and
// arguments.
func (w *twins) decision(name string, n int64) []string {
	l := w.limit[name]
	clock := itoa(w.now)
	if w.mini != nil && w.rng.IntN(3) == 0 {
		w.mini.SetTime(time.UnixMicro(w.now))
		clock = "" // the server's clock, set to the same instant
	}
	burst, _ := strconv.ParseInt(l.args[len(l.args)-1], 10, 64)
	costs := []int64{0, 1, 1, 1, 2, burst, burst + 1, l.drip, 2 * l.drip, w.rng.Int64N(burst + 2), -1, -burst}
	cost, rid, more := costs[w.rng.IntN(len(costs))], "", "0"
	switch {
	case n > 0:
		cost, rid = n, itoa(1+w.rng.Int64N(1<<52-1))
	case w.rng.IntN(15) == 0 && name == "gcra":
		rid, more = itoa(1+w.rng.Int64N(1<<52-1)), itoa(1+w.rng.Int64N(5)) // a prefetch
	}
	w.decided++
	if rid == "" && cost >= 0 {
		w.quicker++
	}
	upTo := "0"
	if cost < 0 {
		cost, upTo = -cost, "1"
	}
	return append([]string{clock, rid, more, itoa(cost), upTo, name}, l.args...)
}

// both returns a decision of every fast algorithm's limit at once.
func (w *twins) both() []string {
	args := w.decision(fastAlgorithms[0], 0)
	for _, name := range fastAlgorithms[1:] {
		args = append(args, w.decision(name, 0)[3:]...)
	}
	return args
}

// batch compares a batch call of up to five decisions and settlements.
func (w *twins) batch(i int) {
	var args, names []string
	args = append(args, "b")
	for range 1 + w.rng.IntN(5) {
		name := w.pick()
		d := w.decision(name, 0)
		args = append(append(args, "d", "1", strconv.Itoa(len(d))), d...)
		names = append(names, name)
	}
	w.compare(fmt.Sprintf("step %d: a batch", i), "all", names, args)
}

// settle makes a reservation or a prefetch and later settles one.
func (w *twins) settle(i int) {
	if len(w.reservations) == 0 || w.rng.IntN(2) == 0 {
		name := w.pick()
		n := 1 + w.rng.Int64N(3)
		args := w.decision(name, n)
		fetch := w.rng.IntN(3) == 0 && name == "gcra"
		if fetch {
			args[2], args[3] = itoa(1+w.rng.Int64N(4)), itoa(n) // a prefetch of more than n
		}
		reply := w.compare(fmt.Sprintf("step %d: a reservation", i), "", []string{name}, append([]string{"d"}, args...))
		if reply[0] == 1 {
			if fetch {
				n += reply[10] // a give-back of what it took
			}
			w.reservations = append(w.reservations, reservation{w.limit[name], args[1], fetch, n, reply})
		}
		return
	}
	k := w.rng.IntN(len(w.reservations))
	r := w.reservations[k]
	w.reservations = slices.Delete(w.reservations, k, k+1)
	delta := w.rng.Int64N(2*r.n+1) - r.n
	giveBack := "0"
	if r.giveBack {
		delta, giveBack = -1-w.rng.Int64N(r.n), "1"
	}
	debt := []string{"1000000", "1", "60000000"}[w.rng.IntN(3)]
	// reply: {allowed, remaining, reset_after, next, retry_after, delay,
	// taken, mark, epoch, clock, fetched} (lua/src/decide.lua), padded
	args := []string{"s", itoa(w.now), r.rid, itoa(r.reply[9]), giveBack, itoa(delta), itoa(r.n),
		itoa(r.reply[2]), itoa(r.reply[7]), itoa(r.reply[8]), debt, r.limit.name}
	w.compare(fmt.Sprintf("step %d: a settlement", i), "all", []string{r.limit.name}, append(args, r.limit.args...))
}

// compare runs args with the fast script of kind ("" for the named
// algorithm's own) on the fast twins and with the general one on the
// others, in one transaction with the reading of their states (so that on
// redis-server no twin expires between the two), and fails the test unless
// the replies and the states are equal. It returns the reply.
func (w *twins) compare(what, kind string, names []string, args []string) []int64 {
	if kind == "" {
		kind = names[0]
	}
	var keysF, keysG, all []string
	for _, name := range names {
		f, g := twinKeys(name)
		keysF, keysG = append(keysF, f), append(keysG, g)
	}
	for _, name := range fastAlgorithms {
		f, g := twinKeys(name)
		all = append(all, f, g)
	}
	var fast, gen, states *redis.Cmd
	var before, after *redis.TimeCmd
	_, err := w.rdb.TxPipelined(w.ctx, func(p redis.Pipeliner) error {
		before = p.Time(w.ctx)
		fast = w.fast[kind].EvalSha(w.ctx, p, keysF, anys(args)...)
		gen = w.gen[kind].EvalSha(w.ctx, p, keysG, anys(args)...)
		after = p.Time(w.ctx)
		states = stateScript.EvalSha(w.ctx, p, all, w.mini == nil)
		return nil
	})
	if err != nil {
		w.t.Fatalf("%s %v: %v (fast %v, general %v)", what, args, err, fast.Err(), gen.Err())
	}
	replyF, _ := fast.Int64Slice()
	replyG, _ := gen.Int64Slice()
	replyF, replyG = padded(args[0], len(names), replyF), padded(args[0], len(names), replyG)
	if !reflect.DeepEqual(replyF, replyG) {
		w.t.Errorf("%s %v:\nfast    %v\ngeneral %v", what, args, replyF, replyG)
	}
	st, _ := states.Slice()
	slack := int64(0)
	if w.mini == nil {
		// ms: each twin's time to live counts from its script's start, and
		// the second starts after the first, within the transaction's span
		// (a busy machine may stretch it); and 50 ms more, since redis-server
		// 7.0 does not promise one clock within a transaction (CI saw 4 ms
		// between twins that the span did not hold). A time to live computed
		// wrongly is off by far more: a period, a whole reset.
		slack = after.Val().Sub(before.Val()).Milliseconds() + 50
	}
	for i := 0; i+5 < len(st); i += 6 {
		tf, tg := st[i+2].(int64), st[i+5].(int64)
		if w.mini == nil && (tf == -2 && tg >= 0 && tg <= slack || tg == -2 && tf >= 0 && tf <= slack) {
			// One twin expired in the moment between them (a script's clock
			// is its start): so would the other have. Keep them twins.
			if err := w.rdb.Del(w.ctx, all[i/3], all[i/3+1]).Err(); err != nil {
				w.t.Fatal(err)
			}
			continue
		}
		within := slack
		if w.mini == nil {
			within += w.setSpan[fastAlgorithms[i/6]]
		}
		if tf < 0 || tg < 0 { // none, or no time to live: exactly
			within = 0
		}
		if st[i] != st[i+3] || st[i+1] != st[i+4] || tf-tg > within || tg-tf > within {
			w.t.Errorf("%s %v: %s\nfast    %v %q, ttl %d ms\ngeneral %v %q, ttl %d ms",
				what, args, fastAlgorithms[i/6], st[i], st[i+1], tf, st[i+3], st[i+4], tg)
		}
	}
	clear(w.setSpan) // stateScript gave every twin with a time to live the same
	return replyF
}

// padded returns the reply of a call of kind ("d", "s" or "b", whose
// decisions are of one limit) of n limits with the 0s it left out at the
// end of each decision's reply put back (lua/src/decide.lua), so that
// replies that say the same compare equal.
func padded(kind string, n int, reply []int64) []int64 {
	pad := func(r []int64, n int) []int64 {
		return append(slices.Clone(r), make([]int64, max(0, 9*n+2-len(r)))...)
	}
	switch kind {
	case "d":
		return pad(reply, n)
	case "b":
		var out []int64
		for i := 0; i < len(reply); {
			if reply[i] == 0 {
				out, i = append(out, 0), i+1
				continue
			}
			m := int(reply[i+1])
			out = append(append(out, 1, 11), pad(reply[i+2:i+2+m], 1)...)
			i += 2 + m
		}
		return out
	}
	return reply
}

// stateScript replies with the type, the value (a hash's fields sorted, as
// "field=value ...") and the time to live in ms of each key; with ARGV[1]
// "1" it then lets each key that expires live until an hour from now, one
// instant for all (redis-server: wall time must not expire one twin before
// the other, and a relative PEXPIRE of each would set them apart by the
// time between them, which a loaded machine stretches).
var stateScript = redis.NewScript(`
local out = {}
local now = redis.call('TIME')
local hour = now[1] * 1000 + math.floor(now[2] / 1000) + 3600000 -- one instant for all: the twins' must not drift
for _, key in ipairs(KEYS) do
  local typ, value, ttl = redis.call('TYPE', key).ok, '', redis.call('PTTL', key)
  if typ == 'string' then value = redis.call('GET', key) end
  if typ == 'hash' then
    local h, kv = redis.call('HGETALL', key), {}
    for i = 1, #h, 2 do kv[#kv + 1] = h[i] .. '=' .. h[i + 1] end
    table.sort(kv)
    value = table.concat(kv, ' ')
  end
  if ARGV[1] == '1' and ttl >= 0 then redis.call('PEXPIREAT', key, hour) end
  out[#out + 1], out[#out + 2], out[#out + 3] = typ, value, ttl
end
return out`)

// write gives both twins of the named algorithm the same state, in one
// of the forms its scripts read, or none.
func (w *twins) write(name string) {
	l := w.limit[name]
	ttl := time.Duration(1+w.rng.Int64N(120_000)) * time.Millisecond
	if w.mini == nil {
		ttl = time.Hour // wall time must not expire one twin before the other
	}
	ago := func(span int64) int64 { return max(0, w.now-span+w.rng.Int64N(2*span+1)) } // around now
	var value string
	var hash []any
	switch none := w.rng.IntN(6) == 0; {
	case none:
	case name == "gcra":
		t, q, h, a, e := ago(2_000_000), w.rng.Int64N(l.drip), ago(5_000_000), w.rng.Int64N(1_000_000), 1+w.rng.Int64N(1000)
		if w.rng.IntN(4) == 0 {
			a = 1<<51 - w.rng.Int64N(2) // max_units (prelude.lua), where a meter starts afresh, or just below
		}
		unit, drip := l.unit, l.drip
		if w.rng.IntN(4) == 0 {
			unit = l.unit * 2 // counted at another rate
		}
		floor := ago(1_000_000)
		switch w.rng.IntN(6) {
		case 0:
			value = itoa(t)
		case 1:
			value = fmt.Sprintf("%d:%d", t, q)
		case 2:
			value = fmt.Sprintf("%d:%d:0:%d:%d:%d:%d:%d", t, q, unit, drip, h, e, a)
		case 3:
			value = fmt.Sprintf("%d:%d:%d:%d:%d:%d:%d:%d", t, q, floor, unit, drip, h, e, a)
		case 4:
			value = fmt.Sprintf("%d:%d:0:%d:%d:%d:%d:%d %d:%d %d:%d", t, q, unit, drip, h, e, a, a, 1+w.rng.Int64N(l.unit), a/2, 1+w.rng.Int64N(l.unit))
		case 5:
			value = fmt.Sprintf("%d:%d:0:%d:%d:%d:0:0", t, q, unit, drip, h) // no epoch, as a step back leaves it
		}
	case name == "token_bucket":
		burst, _ := strconv.ParseInt(l.args[2], 10, 64)
		unit, a, f := l.args[0], w.rng.Int64N(1_000_000), []int64{0, ago(1_000_000), w.now + 1_000_000}[w.rng.IntN(3)]
		e := []int64{0, 0, 1 + w.rng.Int64N(1000)}[w.rng.IntN(3)]
		if w.rng.IntN(4) == 0 {
			unit = itoa(l.unit * 2) // the limit changed
		}
		if w.rng.IntN(4) == 0 {
			a = 1<<51 - w.rng.Int64N(2) // max_units, or just below
		}
		if e == 0 {
			a = 0
		}
		hash = []any{"c", w.rng.Int64N((burst+3)*l.unit) - 2*l.unit, "t", ago(1_000_000), "u", unit, "d", l.args[1],
			"k", l.args[2], "f", f, "h", ago(5_000_000), "e", e, "a", a,
			"p", []string{"", fmt.Sprintf("%d:%d", a, 1+w.rng.Int64N(l.unit))}[w.rng.IntN(2)]}
	case name == "fixed_window":
		period, _ := strconv.ParseInt(l.args[0], 10, 64)
		burst, _ := strconv.ParseInt(l.args[1], 10, 64)
		hash = []any{"w", ago(period), "n", w.rng.Int64N(burst + 3), "e", []int64{0, 9}[w.rng.IntN(2)]} // above burst: a debt
	}
	var state any // none
	if hash != nil {
		state = hash
	} else if value != "" {
		state = value
	}
	w.set(name, state, ttl)
}

func anys(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}
