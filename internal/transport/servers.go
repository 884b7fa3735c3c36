package transport

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// The servers behind the lanes, for work off the decisions' path (core's
// check that each server kept its state): which servers the calls go to,
// which one a key's calls go to, and one command sent to that server.

// errNoServer is the error of Do when the client cannot say which server
// serves a key, or cannot send a command of its own.
var errNoServer = errors.New("the client does not say which Redis server serves the key, or sends scripts only")

// Servers returns the addresses of the servers calls go to: the client's
// one server ("" if its options do not name it), or on a Cluster or Ring
// the nodes that have a lane now (those that carried calls lately).
func (t *Transport) Servers() []string {
	if t.cl.route == nil {
		return []string{t.mainAddr()}
	}
	var addrs []string
	t.lanes.Range(func(_, ln any) bool {
		addrs = append(addrs, ln.(*lane).addr())
		return true
	})
	return addrs
}

// ServerOf returns the address of the server that key's calls go to now,
// as Servers names it; false if the client cannot say (a Cluster without
// a slot map yet).
func (t *Transport) ServerOf(ctx context.Context, key string) (string, bool) {
	if t.cl.route == nil {
		return t.mainAddr(), true
	}
	node, err := t.cl.route(ctx, key)
	if err != nil || node == nil {
		return "", false
	}
	return node.Options().Addr, true
}

// Do sends cmd, a command that is not about keys (INFO, CONFIG GET), to
// the server that key's calls go to, bounded by ctx, and returns that
// server's address. It is for checks in the background, never for
// decisions: it bypasses the lanes and their breakers. A client that
// cannot send commands of its own (a bare redis.Scripter), or cannot say
// which server serves key, makes it fail.
func (t *Transport) Do(ctx context.Context, key string, cmd redis.Cmder) (string, error) {
	if t.cl.route == nil {
		if t.cl.process == nil {
			return t.mainAddr(), errNoServer
		}
		return t.mainAddr(), t.cl.process(ctx, cmd)
	}
	node, err := t.cl.route(ctx, key)
	switch {
	case err != nil:
		return "", err
	case node == nil:
		return "", errNoServer
	}
	return node.Options().Addr, node.Process(ctx, cmd)
}

// mainAddr is the address of a single server's client: its options'
// Addr, "sentinel master" for a Sentinel client (whose options name none),
// "" for a client without options.
func (t *Transport) mainAddr() string {
	c, ok := t.cl.rdb.(interface{ Options() *redis.Options })
	switch {
	case !ok:
		return ""
	case c.Options().Addr == "FailoverClient": // go-redis's name for none
		return "sentinel master"
	}
	return c.Options().Addr
}
