package transport

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// What the transport uses of a go-redis client, each in a small interface
// of the methods it calls, so that any client that has them (go-redis's
// Client, ClusterClient, Ring, Sentinel's failover client, or a wrapper of
// one's own that forwards them) is carried the same way. A client with
// none of them but redis.Scripter's is called one script at a time,
// through EvalSha and Eval, with its own retries: at most once is not
// promised then (docs/engine.md).
type (
	// processor sends one command built here, which at most once needs:
	// it must not be resent after a network error (Cmd.NoRetry).
	processor interface {
		Process(ctx context.Context, cmd redis.Cmder) error
	}
	// pipeliner sends several commands in one round trip.
	pipeliner interface {
		Pipeline() redis.Pipeliner
	}
	// clusterRouter finds the node that serves a key (a Cluster), and
	// rereads the slot map after a node failed.
	clusterRouter interface {
		MasterForKey(ctx context.Context, key string) (*redis.Client, error)
		ReloadState(ctx context.Context)
	}
	// ringRouter finds the shard that serves a key (a Ring).
	ringRouter interface {
		GetShardClientForKey(key string) (*redis.Client, error)
	}
	// hooker takes hooks: the transport's dial watch (errors.go).
	hooker interface {
		AddHook(redis.Hook)
	}
)

// client is the client a Transport carries calls on, with what it can do.
type client struct {
	rdb     redis.Scripter
	process func(context.Context, redis.Cmder) error // nil for a bare redis.Scripter
	pipe    func() redis.Pipeliner                   // nil when it cannot pipeline
	bounded bool                                     // go-redis bounds its commands by their context's deadline
	// route returns the node that serves key on a Cluster or Ring (nil:
	// one server); reload asks a Cluster client to reread its slot map.
	route  func(ctx context.Context, key string) (*redis.Client, error)
	reload func()
	mode   atomic.Int32 // how plan lays out a round trip: planEach, planOne or planByTag
}

// The layouts of a round trip; see plan (trip.go).
const (
	planEach  int32 = iota // every call a script call of its own
	planOne                // all calls as one call of a batch
	planByTag              // the calls of one hash tag as one call of a batch
)

// init sets c up for rdb: what it can do, and how a round trip is laid out.
func (c *client) init(rdb redis.Scripter, batch int, batchScript bool) {
	c.rdb = rdb
	if p, ok := rdb.(processor); ok {
		c.process = p.Process
		c.bounded = contextBounded(rdb)
	}
	if p, ok := rdb.(pipeliner); ok && batch > 1 && c.process != nil {
		c.pipe = p.Pipeline
	}
	switch r := rdb.(type) {
	case clusterRouter:
		c.route = r.MasterForKey
		c.reload = func() { r.ReloadState(context.Background()) }
	case ringRouter:
		c.route = func(_ context.Context, key string) (*redis.Client, error) { return r.GetShardClientForKey(key) }
	}
	switch {
	case !batchScript || c.pipe == nil:
	case c.route != nil:
		c.mode.Store(planByTag)
	default:
		c.mode.Store(planOne)
	}
}

// contextBounded reports whether go-redis bounds rdb's commands by their
// context's deadline (ContextTimeoutEnabled); otherwise only its own
// socket timeouts bound them.
func contextBounded(rdb redis.Scripter) bool {
	switch c := rdb.(type) {
	case interface{ Options() *redis.Options }: // Client, and Sentinel's failover client
		return c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.ClusterOptions }:
		return c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.RingOptions }:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// OneScript reports whether one script call may hold keys of different
// hash tags: the client talks to one server (not a Cluster or Ring) and
// batches calls of any keys into one script call (planOne), which a proxy
// that routes a script by its first key, or a server that refused a batch
// as CROSSSLOT, does not allow. It is safe for concurrent use.
func (t *Transport) OneScript() bool {
	return t.cl.route == nil && t.cl.mode.Load() == planOne
}
