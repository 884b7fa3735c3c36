package core

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/transport"
	"github.com/redlimit/redlimit/internal/wire"
)

// lossWatch notices that a Redis server lost the state the Limiter's
// limits keep. To a script, a server restarted without persistence,
// flushed (FLUSHALL), or replaced by an empty replica holds keys that are
// simply missing, as if they had expired: nothing on the decisions' path
// can tell. So each server carries a marker (scripts/generation.lua): a
// hash "<prefix>{generation}" (on a Cluster or Ring, one
// "<prefix>{generation:N}" on each node) without a TTL, holding a random
// generation, set by the first Limiter that finds none, and a count of
// the checks made of it. While decisions flow, at most once per
// WithLossCheck (1 s) and in a goroutine of its own, the Limiter checks
// every marker with one script call, and reads it as lost when
//
//   - it is missing or holds another generation than last time: the
//     server's keys are gone (the cause is named from the server's run_id,
//     INFO server, read at each check: changed, a restart or another
//     server; the same, a FLUSHALL or eviction);
//   - its count went back: the data went back in time (a restart from an
//     older snapshot, a failover to a replica that lagged), and with it
//     the counts of the decisions made since.
//
// Each loss is logged once at error level, naming the server, and counted
// (Stats.StateLosses); a run_id that changed while the marker stayed (a
// restart that reloaded everything), at info level. At a server's first check, if the Limiter has
// decided limits of an hour or more, it reads the server's persistence
// (CONFIG GET save, appendonly) and warns once when it keeps nothing. A
// server that refuses INFO or CONFIG (managed Redis, miniredis) is no
// error: the causes are then unnamed, and the persistence unknown.
type lossWatch struct {
	every   time.Duration // WithLossCheck; 0: off
	next    atomic.Int64  // unix ns before which no check begins
	running atomic.Bool   // a check runs
	losses  atomic.Uint64 // Stats.StateLosses

	// The running check's alone:
	markers []*marker
	read    map[string]bool // servers whose persistence was read, or refused to say
}

// marker is what a Limiter last read of one server's marker.
type marker struct {
	key      string
	gen, seq int64  // the generation and count last read; gen 0: not read yet
	runID    string // the run_id of its server when last read; "": unknown
}

// Settings of the check.
const (
	defaultLossCheck = time.Second // WithLossCheck's default
	maxMarkers       = 256         // markers a Limiter keeps, one per node seen
	markerTries      = 64          // names tried per server, to find one on a node
)

// startLossCheck starts a check of every server's marker in a goroutine,
// unless one runs or the last began less than lossWatch.every ago. run
// calls it after a call Redis answered once the time has come.
func (l *Limiter) startLossCheck() {
	w := &l.loss
	now, next := time.Now().UnixNano(), w.next.Load()
	if now < next || !w.next.CompareAndSwap(next, now+int64(w.every)) || !w.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer w.running.Store(false)
		l.checkLoss()
	}()
}

// checkLoss checks every server's marker once, placing one on each server
// that has none. Only one runs at a time (lossWatch.running).
func (l *Limiter) checkLoss() {
	timeout := l.timeout
	if timeout <= 0 {
		timeout = peersTimeout
	}
	l.placeMarkers(timeout)
	told := map[string]bool{} // servers whose loss this check logged
	for _, m := range l.loss.markers {
		l.checkMarker(m, timeout, told)
	}
}

// placeMarkers gives every server calls go to a marker, if it has none:
// the first name in the order of markerKey that the server holds, so that
// every Limiter of a prefix picks the same.
func (l *Limiter) placeMarkers(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w := &l.loss
	servers := l.tr.Servers()
	held, names := map[string]bool{}, map[string]bool{}
	for _, m := range w.markers {
		names[m.key] = true
		if addr, ok := l.tr.ServerOf(ctx, m.key); ok {
			held[addr] = true
		}
	}
	for _, addr := range servers {
		for i := 0; !held[addr] && len(w.markers) < maxMarkers && i < markerTries*len(servers); i++ {
			key := markerKey(l.prefix, i)
			if at, ok := l.tr.ServerOf(ctx, key); ok && at == addr && !names[key] {
				w.markers = append(w.markers, &marker{key: key})
				held[addr], names[key] = true, true
			}
		}
	}
}

// markerKey returns the i-th name a marker may have.
func markerKey(prefix string, i int) string {
	if i == 0 {
		return prefix + "{generation}"
	}
	return prefix + "{generation:" + strconv.Itoa(i) + "}"
}

// checkMarker reads m's marker and its server's run_id, and says if the
// server lost its state, unless told holds that server: a loss is logged
// once per check and server.
func (l *Limiter) checkMarker(m *marker, timeout time.Duration, told map[string]bool) {
	c := transport.NewCall(wire.Generation, "", m.key)
	c.Args = append(c.Args, 1+rand.Int64N(1<<52-1))
	reply, err := l.tr.Run(context.Background(), c, timeout)
	if err != nil || len(reply) != 3 {
		l.log.Debug("redlimit: checking that Redis kept the limits' state", "marker", m.key, "error", err)
		return
	}
	addr, runID := l.serverInfo(m.key, timeout)
	if runID == "" { // not said this time: the last one known
		runID = m.runID
	}
	last, kind := *m, lossKind(*m, reply)
	m.gen, m.seq, m.runID = reply[1], reply[2], runID
	restarted := last.runID != "" && runID != last.runID
	switch {
	case kind == "" && restarted:
		l.log.Info("redlimit: a Redis server restarted, or another took its place, and kept the limits' state",
			"server", addr, "run_id", runID, "run_id_before", last.runID)
		fallthrough
	case kind == "":
		l.checkPersistence(m.key, timeout)
		return
	case told[addr]:
		return
	}
	told[addr] = true
	l.loss.losses.Add(1)
	attrs := []any{"server", addr, "cause", lossCause(kind, last.runID, runID), "run_id", runID, "marker", m.key}
	if restarted {
		attrs = append(attrs, "run_id_before", last.runID)
	}
	l.log.Error("redlimit: a Redis server lost the limits' state: what it had counted is admitted again, and cannot be restored (docs/faults.md)", attrs...)
}

// lossKind reads a check's reply ({made, generation, count}) against what
// the last check of the marker read: "gone" if the marker was missing or
// holds another generation, "back" if its count went back, "" if neither
// or if it was never read before.
func lossKind(last marker, reply []int64) string {
	switch made, gen, seq := reply[0] == 1, reply[1], reply[2]; {
	case last.gen == 0:
		return ""
	case made || gen != last.gen:
		return "gone"
	case seq <= last.seq:
		return "back"
	}
	return ""
}

// lossCause says what a loss of kind "gone" (the marker is missing or new)
// or "back" (its count went back) means, from the server's run_id before
// and after ("" when unknown).
func lossCause(kind, before, after string) string {
	switch {
	case kind == "back":
		return "its data went back in time (a restart from an older RDB snapshot or AOF, or a failover to a replica that lagged): the counts of the decisions since are lost"
	case before == "" || after == "":
		return "its keys are gone: a restart without persistence, a failover to an empty replica, FLUSHALL or FLUSHDB, or eviction"
	case before != after:
		return "it restarted, or another server took its place, without its data: a restart without persistence, or a failover to an empty replica"
	}
	return "its keys were deleted while it ran: FLUSHALL or FLUSHDB, eviction (maxmemory), or a DEL of them"
}

// serverInfo returns the address and the run_id of the server that holds
// key; the run_id is "" when the server does not say (miniredis) or
// refuses INFO.
func (l *Limiter) serverInfo(key string, timeout time.Duration) (addr, runID string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := redis.NewStringCmd(ctx, "info", "server")
	addr, err := l.tr.Do(ctx, key, cmd)
	if err != nil {
		return addr, ""
	}
	for line := range strings.Lines(cmd.Val()) {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return addr, id
		}
	}
	return addr, ""
}

// checkPersistence warns once per server when the Limiter decides limits
// of an hour or more and the server that holds key persists nothing
// (save "" and appendonly no), read with CONFIG GET. A server that
// refuses CONFIG (managed Redis, miniredis) is not asked again.
func (l *Limiter) checkPersistence(key string, timeout time.Duration) {
	w := &l.loss
	if !l.infos.long.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	addr, ok := l.tr.ServerOf(ctx, key)
	if !ok || w.read[addr] {
		return
	}
	save := redis.NewMapStringStringCmd(ctx, "config", "get", "save")
	aof := redis.NewMapStringStringCmd(ctx, "config", "get", "appendonly")
	_, err := l.tr.Do(ctx, key, save)
	if err == nil {
		_, err = l.tr.Do(ctx, key, aof)
	}
	if err != nil && ctx.Err() != nil { // no answer: ask again next time
		return
	}
	if w.read == nil {
		w.read = map[string]bool{}
	}
	w.read[addr] = true
	s, saves := save.Val()["save"]
	a, appends := aof.Val()["appendonly"]
	switch {
	case err != nil || !saves || !appends:
		l.log.Debug("redlimit: the Redis server does not say how it persists its data", "server", addr, "error", err)
	case s == "" && a == "no":
		l.log.Warn("redlimit: limits of an hour or more run on a Redis server that persists nothing (save \"\", appendonly no): a restart forgets every count; turn on AOF (appendonly yes, appendfsync everysec) or RDB snapshots (docs/faults.md)",
			"server", addr)
	}
}
