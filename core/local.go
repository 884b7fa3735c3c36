package core

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Local decides in process memory, standing in for Redis while it is
// unreachable (the HTTP layer's FailLocal): every limit as GCRA with its
// Rate, Period and Burst, whatever its algorithm, all or nothing as Redis
// would. Each instance enforces its share of each limit: the limit
// divided by how many instances last shared the Limiter's keys (a
// heartbeat each sends while its decisions reach Redis, peers.go), both
// its rate and its burst (the burst at least 1). Concurrency limits are
// not enforced: nothing settles what Local admits. Its states are named
// as Redis's are, and it holds at most a given number of them in an LRU
// (hashicorp/golang-lru's simplelru, under one lock so that the limits of
// one decision are decided together). Time is the process's clock. It is
// safe for concurrent use.
//
// An outage's share: Local admits what a limit allows over the time it
// stands in for Redis, not a fresh allowance per outage. A state it does
// not hold starts as if its allowance had run out a minute before
// (localLookback): a limit that refills within a minute (10/s, 100/m)
// starts full, a longer one (1000/h, 60 a month) with a minute's share of
// its rate. Its clock runs while it decides: a pause of more than a
// minute between two of its decisions (Redis answered meanwhile, or
// nobody asked) counts as a minute, so time between outages adds nothing.
// A denial's RetryAfter is at most a minute: Local cannot know what Redis
// will say once it answers.
type Local struct {
	mu    sync.Mutex
	tat   *simplelru.LRU[string, gcraTAT] // theoretical arrival time per state
	now   func() time.Time
	share func() int  // how many instances share the limits, at least 1
	infos *limitCache // its Limiter's
	clock int64       // µs of its outage clock at its last decision
	last  int64       // the process's clock (unix µs) at its last decision; 0: none yet
}

// localLookback is how long before its first decision of a state Local
// counts a limit's allowance from, the longest pause its clock counts,
// and the longest RetryAfter of its denials.
const localLookback = time.Minute

// Local returns a new Local for l's keys, holding at most keys states
// (at least 1), which counts from then on the instances that share l's
// keys and enforces its share. l must be valid (Validate).
func (l *Limiter) Local(keys int) *Local {
	l.peers.on.Store(true)
	return newLocal(max(1, keys), l.peers.share, time.Now, &l.infos)
}

// newLocal returns a Local of at most max states that enforces a
// share()-th of each limit on the clock now.
func newLocal(max int, share func() int, now func() time.Time, infos *limitCache) *Local {
	tat, err := simplelru.NewLRU[string, gcraTAT](max, nil)
	if err != nil { // only for max < 1
		panic(err)
	}
	return &Local{tat: tat, now: now, share: share, infos: infos}
}

// Decide decides q in process: q.Costs[i] (or q.N) events of q.Key under
// each of q.Limits, each in its scope, all or nothing, filling q.Each if
// it is set, as Limiter.Decide would. A limit with TakeRest takes up to its
// cost, as Redis does: as many as its share has left, or 1 (denied) when
// none is. Reserve is ignored: nothing settles what Local admits. q's
// limits must be valid (a Limit that is not is reported never allowed).
func (lo *Local) Decide(q *Request) Decision {
	var stateBuf [MaxLimits]string
	var tatBuf [MaxLimits]gcraTAT
	var infoBuf [MaxLimits]*limitInfo
	var eachBuf [MaxLimits]Result
	limits := q.Limits
	each := eachBuf[:len(limits)]
	if q.Each != nil {
		each = q.Each[:len(limits)]
	}
	states, tats := stateBuf[:len(limits)], tatBuf[:len(limits)]
	wall := lo.now().UnixMicro()
	share := lo.share()
	lo.mu.Lock()
	defer lo.mu.Unlock()
	now := lo.tick(wall)
	allowed := true
	for i, limit := range limits {
		info, err := lo.infos.get(limit)
		if err != nil { // not reached where the limits were checked first
			each[i] = Result{Limit: limit, RetryAfter: InfDuration}
			allowed = false
			continue
		}
		if info.d.holds { // slots in flight are not counted in process: not enforced
			each[i] = Result{Limit: limit, Allowed: true, Remaining: info.capacity}
			continue
		}
		scope := ""
		if q.Scopes != nil {
			scope = q.Scopes[i]
		}
		infoBuf[i] = info
		states[i] = stateKey("", scope, q.keyOf(i), info)
		tat := lo.state(states[i], limit, info, share, now)
		n := q.N
		if q.Costs != nil {
			n = q.Costs[i]
		}
		if q.TakeRest != nil && q.TakeRest[i] && n > 0 {
			left, _ := localGCRA(limit, info, share, tat, now, 0)
			n = max(1, min(n, left.Remaining))
		}
		each[i], tats[i] = localGCRA(limit, info, share, tat, now, n)
		allowed = allowed && each[i].Allowed
	}
	for i, limit := range limits {
		switch {
		case infoBuf[i] == nil:
		case allowed:
			lo.tat.Add(states[i], tats[i])
		case each[i].Allowed: // report the state it keeps, as for n = 0
			tat, _ := lo.tat.Peek(states[i])
			each[i], _ = localGCRA(limit, infoBuf[i], share, tat, now, 0)
		}
	}
	res, b := Binding(each)
	return Decision{Result: res, Binding: b}
}

// localGCRA returns the GCRA decision of n events under one share of
// limit (the limit divided by share) at now (µs) from the state tat, and
// the state to keep if it allows. A cost above the share's burst reports
// the state and is never allowed.
func localGCRA(limit Limit, info *limitInfo, share int, tat gcraTAT, now int64, n int) (Result, gcraTAT) {
	capacity := max(1, info.capacity/share)
	cost := n
	if n > capacity {
		cost = 0
	}
	argv, _ := bucketArgs(limit)
	ok, left, retry, reset, next, tat := gcra(tat, now, cost, argv[0]*int64(share), argv[1], capacity)
	res := Result{Limit: limit, Allowed: ok, Remaining: left, RetryAfter: min(us(retry), localLookback), ResetAfter: us(reset), NextAfter: us(next)}
	if cost != n {
		res.Allowed, res.RetryAfter = false, InfDuration
	}
	return res, tat
}

// state returns the state named name of limit, one share-th of it, at
// now (µs on the outage clock); one Local did not hold starts as
// startTAT says, and is held from now on, denied or not, so that its
// allowance accrues from now. lo.mu must be held.
func (lo *Local) state(name string, limit Limit, info *limitInfo, share int, now int64) gcraTAT {
	// Get, not Peek: a key that keeps being denied is in use and must
	// not be the first forgotten, or it would start afresh.
	tat, ok := lo.tat.Get(name)
	if !ok {
		tat = startTAT(limit, info, share, now)
		lo.tat.Add(name, tat)
	}
	return tat
}

// tick advances the outage clock to the process's clock wall (unix µs)
// and returns it: by the time since the last decision, at most
// localLookback (a pause: Redis answered, or nobody asked), never back.
// lo.mu must be held.
func (lo *Local) tick(wall int64) int64 {
	if lo.last == 0 {
		lo.clock = wall
	} else {
		lo.clock += min(max(0, wall-lo.last), localLookback.Microseconds())
	}
	lo.last = max(lo.last, wall)
	return lo.clock
}

// startTAT returns the state of a key Local does not hold yet, under one
// share of limit at now (µs on its clock): its allowance run out
// localLookback before, so that it holds what the limit refills in that
// time, at most its burst.
func startTAT(limit Limit, info *limitInfo, share int, now int64) gcraTAT {
	capacity := max(1, info.capacity/share)
	argv, _ := bucketArgs(limit)
	unit, drip := argv[0]*int64(share), argv[1]
	backlog := int64(capacity)*unit - localLookback.Microseconds()*drip
	if backlog <= 0 {
		return gcraTAT{}
	}
	return gcraTAT{now + backlog/drip, backlog % drip}
}

// size returns how many states are kept.
func (lo *Local) size() int {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	return lo.tat.Len()
}
