package core

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/internal/transport"
	"github.com/redlimit/redlimit/internal/wire"
)

// peers counts the instances that share a Limiter's keys, for FailLocal:
// while Redis is down, each instance enforces its share of a limit, the
// limit divided by how many instances there were when Redis last answered,
// so that all of them together admit about the limit, not that many times
// it.
//
// The count is a heartbeat: once a FailLocal policy uses the Limiter, a
// decision Redis answers sends, at most once per peersBeatEvery, in a
// goroutine of its own, a script call that records this Limiter in a
// sorted set ("<prefix>{peers}") under the Redis clock, drops the
// instances not heard from for peersSpan, and replies how many are left.
// An idle instance drops out, and counts itself alone when it wakes up in
// an outage; one that never reached Redis also counts itself alone.
type peers struct {
	on    atomic.Bool  // a FailLocal fallback uses the Limiter
	id    string       // this Limiter's member of the set
	count atomic.Int64 // instances in the last reply; 0: none yet
	last  atomic.Int64 // unix ns of the last heartbeat sent
}

// Heartbeat settings.
const (
	peersBeatEvery = time.Second      // at most one heartbeat per Limiter this often
	peersSpan      = 10 * time.Second // a heartbeat counts this long
	peersTimeout   = time.Second      // bounds a heartbeat when the Limiter's timeout is 0
)

// share returns how many instances share the Limiter's limits: 1 when
// unknown.
func (p *peers) share() int {
	return int(max(1, p.count.Load()))
}

// heartbeat sends a heartbeat if one is due; run calls it after each
// decision Redis answered, while the Limiter counts its peers (p.on).
func (l *Limiter) heartbeat() {
	p := &l.peers
	now := time.Now().UnixNano()
	last := p.last.Load()
	if now-last < int64(peersBeatEvery) || !p.last.CompareAndSwap(last, now) {
		return
	}
	go func() {
		timeout := l.timeout
		if timeout <= 0 {
			timeout = peersTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c := transport.NewCall(wire.Peers, "", l.prefix+"{peers}")
		c.Args = append(c.Args, p.id, peersSpan.Milliseconds())
		if reply, err := l.run(ctx, c); err == nil && len(reply) == 1 {
			p.count.Store(min(max(reply[0], 1), math.MaxInt32))
		}
	}()
}
