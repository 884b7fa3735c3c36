package engine

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Local stands in for Redis while it is unreachable (the HTTP
// layer's FailLocal): every limit as GCRA with its Rate, Period and Burst,
// whatever its algorithm, in process memory, all or nothing as Redis
// would. Each instance enforces its share of each limit: the limit divided
// by share(), the instances that last shared the Limiter's keys (peers.go),
// both its rate and its burst (the burst at least 1). Concurrency limits are
// not enforced: nothing settles what the fallback admits. Its states are named
// as Redis's are (state.go), and it holds at most max of them in an LRU
// (hashicorp/golang-lru's simplelru, under one lock so that the limits of
// one decision are decided together). Time is the process's clock.
type Local struct {
	mu    sync.Mutex
	tat   *simplelru.LRU[string, gcraTAT] // theoretical arrival time per state
	now   func() time.Time
	share func() int // how many instances share the limits, at least 1
}

// Fallback returns a new Local for l's keys, holding at most keys states,
// which counts from then on the instances that share l's keys (peers.go)
// and enforces its share; for the zero Limiter, all of each limit.
func (l *Limiter) Fallback(keys int) *Local {
	share := func() int { return 1 }
	if l != nil && l.carrier != nil {
		l.peers.on.Store(true)
		share = l.peers.share
	}
	return NewLocal(keys, share, time.Now)
}

// NewLocal returns a Local of at most max states that enforces a
// share()-th of each limit on the clock now.
func NewLocal(max int, share func() int, now func() time.Time) *Local {
	tat, err := simplelru.NewLRU[string, gcraTAT](max, nil)
	if err != nil { // only for max < 1
		panic(err)
	}
	return &Local{tat: tat, now: now, share: share}
}

// Allow decides costs[i] events of key under limits[i], each in its
// scope, all or nothing, fills each (as long as limits) and returns the
// binding result and its index. A limit whose bit of upTo is set (1<<i)
// takes up to costs[i], as Redis does (ReserveEach): as many as its share
// has left, or 1 (denied) when none is. The limits must have passed
// CheckLimits.
func (l *Local) Allow(key string, scopes []string, limits []Limit, costs []int, upTo uint32, each []Result) (Result, int) {
	var stateBuf [MaxLimits]string
	var tatBuf [MaxLimits]gcraTAT
	var infoBuf [MaxLimits]*limitInfo
	states, tats := stateBuf[:len(limits)], tatBuf[:len(limits)]
	now := l.now().UnixMicro()
	share := l.share()
	l.mu.Lock()
	defer l.mu.Unlock()
	allowed := true
	for i, limit := range limits {
		info, err := infos.get(limit)
		if err != nil { // not reached: checked when the policy was built
			each[i] = Result{Limit: limit, RetryAfter: InfDuration}
			allowed = false
			continue
		}
		if info.d.holds { // slots in flight are not counted in process: not enforced
			each[i] = Result{Limit: limit, Allowed: true, Remaining: info.capacity}
			continue
		}
		infoBuf[i] = info
		states[i] = stateKey("", scopeOf(scopes, i), key, info)
		// Get, not Peek: a key that keeps being denied is in use and must
		// not be the first forgotten, or it would start afresh.
		tat, _ := l.tat.Get(states[i])
		n := costs[i]
		if upTo&(1<<i) != 0 && n > 0 {
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
			l.tat.Add(states[i], tats[i])
		case each[i].Allowed: // report the state it keeps, as for n = 0
			tat, _ := l.tat.Peek(states[i])
			each[i], _ = localGCRA(limit, infoBuf[i], share, tat, now, 0)
		}
	}
	return binding(each)
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
	res := Result{Limit: limit, Allowed: ok, Remaining: left, RetryAfter: us(retry), ResetAfter: us(reset), NextAfter: us(next)}
	if cost != n {
		res.Allowed, res.RetryAfter = false, InfDuration
	}
	return res, tat
}

// Size returns how many states are kept.
func (l *Local) Size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tat.Len()
}
