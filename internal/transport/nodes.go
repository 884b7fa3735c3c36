package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The lanes of a Cluster or Ring, one per node serving the keys: made at
// the first call on a node, forgotten when the node leaves, and probed
// while their breaker is open.

// reloadEvery: a Cluster's slot map is reread at most this often on errors.
const reloadEvery = 100 * time.Millisecond

func (t *Transport) newLane(node *redis.Client) *lane {
	ln := &lane{t: t, node: node}
	ln.breaker = breaker{after: t.after, log: t.log, probe: ln.probe, probed: t.reloadSoon, unavailable: t.errs.unavailable}
	if node != nil {
		ln.breaker.where = " at " + node.Options().Addr
	}
	return ln
}

// warming is a Cluster client's first slot-map load (Transport.lane).
type warming struct {
	cold atomic.Bool   // no lookup by route has succeeded yet
	mu   sync.Mutex    // guards done
	done chan struct{} // closed when the running lookup of waitWarm ends; nil: none runs
}

// waitWarm waits, at most until due (none when zero) and no longer than
// ctx, for a lookup of key's node by a goroutine of the Transport's; it
// reports whether a lookup has succeeded.
func (t *Transport) waitWarm(ctx context.Context, key string, due time.Time) bool {
	w := &t.warm
	w.mu.Lock()
	done := w.done
	if done == nil {
		done = make(chan struct{})
		w.done = done
		go func() {
			if node, err := t.cl.route(context.Background(), key); err == nil && node != nil {
				w.cold.Store(false)
			}
			w.mu.Lock()
			w.done = nil
			w.mu.Unlock()
			close(done)
		}()
	}
	w.mu.Unlock()
	var expired <-chan time.Time
	if !due.IsZero() {
		timer := time.NewTimer(time.Until(due))
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case <-done:
	case <-expired:
	case <-ctx.Done():
	}
	return !w.cold.Load()
}

// forget drops the lane of a node that has nothing to do, unless its
// breaker is open: a Cluster's or Ring's nodes may change over a process's
// life, and a lane holds its node's client. A call that found the lane
// just before still runs on it; the next one makes a new lane.
func (t *Transport) forget(ln *lane) {
	if ln.node == nil || ln.breaker.open.Load() || ln.breaker.probing.Load() {
		return
	}
	t.forgetting.Lock() // Stats sees a lane's openings in the lane or in goneOpens, never both
	defer t.forgetting.Unlock()
	if t.lanes.CompareAndDelete(ln.node, ln) {
		t.goneOpens.Add(ln.breaker.opens.Load())
	}
}

// eachLane calls f for every lane.
func (t *Transport) eachLane(f func(*lane)) {
	f(t.main)
	t.lanes.Range(func(_, ln any) bool { f(ln.(*lane)); return true })
}

// reloadSoon asks a Cluster client to reread its slot map, at most once
// per reloadEvery: after a node failed, its slots may have a new master.
func (t *Transport) reloadSoon() {
	if t.cl.reload == nil {
		return
	}
	now := time.Now().UnixNano()
	last := t.reloadedAt.Load()
	if now-last < int64(reloadEvery) || !t.reloadedAt.CompareAndSwap(last, now) {
		return
	}
	t.cl.reload()
}

// probe asks the lane's server whether it runs scripts, for an open
// breaker: EVAL of "return 1", which a server refuses as a call would
// when it is down, busy (BUSY) or the user may not run scripts (NOPERM),
// and which go-redis does not retry, so that its error is the first one
// (connection refused), not a retry's running out of time.
func (ln *lane) probe(ctx context.Context) error {
	cmd := probeOnce{redis.NewCmd(ctx, "eval", "return 1", 0)}
	switch {
	case ln.node != nil:
		return ln.node.Process(ctx, cmd)
	case ln.t.cl.process != nil:
		return ln.t.cl.process(ctx, cmd)
	}
	return ln.t.cl.rdb.Eval(ctx, "return 1", nil).Err()
}

// probeOnce is a probe go-redis sends once.
type probeOnce struct{ *redis.Cmd }

func (probeOnce) NoRetry() bool { return true }

// addr is the address of the lane's node, "" for the main lane (any).
func (ln *lane) addr() string {
	if ln.node == nil {
		return ""
	}
	return ln.node.Options().Addr
}
