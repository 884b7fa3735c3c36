package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// queueBehind makes one decision on "first", which hold holds, then runs
// decide(i) for i < n on n goroutines; once all n wait in the queue, it
// releases the first and returns each one's answer.
func queueBehind(t *testing.T, lim *core.Limiter, hold *holdHook, l core.Limit, n int, decide func(i int) (core.Result, error)) ([]core.Result, []error) {
	return queueBehindFirst(t, lim, hold, l, n, decide, func(err error) bool { return err == nil })
}

// queueBehindFirst is queueBehind with ok telling which errors of the
// first decision are expected.
func queueBehindFirst(t *testing.T, lim *core.Limiter, hold *holdHook, l core.Limit, n int, decide func(i int) (core.Result, error), ok func(error) bool) ([]core.Result, []error) {
	t.Helper()
	first := make(chan error, 1)
	go func() {
		_, err := lim.Allow(context.Background(), "first", l)
		first <- err
	}()
	<-hold.reached
	results, errs := make([]core.Result, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = decide(i)
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); lim.Queued() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d decisions queued within 10 s", lim.Queued(), n)
		}
	}
	close(hold.release)
	wg.Wait()
	if err := <-first; !ok(err) {
		t.Fatalf("the first decision: %v", err)
	}
	return results, errs
}

// TestBatchScript: decisions that wait together go to a single server as
// one call of the batch script, of any mix of algorithms and terms, and
// each keeps its own answer. One that Redis refuses (its key holds another
// type: WRONGTYPE) gets Redis's error; the others are decided and charged
// once.
func TestBatchScript(t *testing.T) {
	t.Parallel()
	sentinel := redistest.NewSentinel(t)
	srv := redistest.Standalone(t)
	resp2 := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2})
	t.Cleanup(func() { resp2.Close() })
	clients := map[string]*redis.Client{
		"miniredis":  redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}),
		"standalone": srv.Client(t),
		"resp2":      resp2, // the replies are integer arrays, the same in RESP2
		"sentinel":   sentinel.Client(t),
	}
	for name, rdb := range clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			prefix := uniquePrefix()
			lim := core.New(rdb, core.WithPrefix(prefix), core.WithPipelines(1), patient)
			gcra, window := core.PerHour(10), core.Limit{Rate: 5, Period: time.Minute, Algorithm: core.FixedWindow}

			// The key "bad" holds a list where the GCRA key's string goes.
			if _, err := lim.Allow(ctx, "bad", gcra); err != nil {
				t.Fatal(err)
			}
			var bad string
			keys, err := rdb.Keys(ctx, prefix+"*{bad}*").Result()
			if err == nil && len(keys) != 1 {
				err = fmt.Errorf("keys %q, want one", keys)
			}
			if err == nil {
				bad = keys[0]
				err = rdb.Del(ctx, bad).Err()
			}
			if err == nil {
				err = rdb.RPush(ctx, bad, "x").Err()
			}
			if err != nil {
				t.Fatal(err)
			}

			// 9 decisions: one limit, two limits of two algorithms, and the bad key.
			const n = 9
			hold, trips := newHoldHook(false, isDecision), &roundTrips{}
			rdb.AddHook(hold)
			rdb.AddHook(trips)
			results, errs := queueBehind(t, lim, hold, gcra, n, func(i int) (core.Result, error) {
				switch {
				case i == n-1:
					return lim.Allow(ctx, "bad", gcra)
				case i%2 == 0:
					return lim.Allow(ctx, fmt.Sprint("k", i), gcra)
				}
				return lim.AllowAll(ctx, fmt.Sprint("k", i), []core.Limit{gcra, window}, 1)
			})
			if trips.batchCalls.Load() != 1 || trips.largest.Load() != n {
				t.Fatalf("%d batch script calls, the largest round trip %d decisions; want one batch call of %d",
					trips.batchCalls.Load(), trips.largest.Load(), n)
			}
			// The bad key's decision raised WRONGTYPE in the batch before it
			// wrote anything; sent again alone, Redis's error is its answer.
			want := "WRONGTYPE Operation against a key holding the wrong kind of value"
			var reply redis.Error
			if err := errs[n-1]; err == nil || !errors.As(err, &reply) || !strings.Contains(err.Error(), want) {
				t.Fatalf("the bad key: %v; want Redis's %q, as a redis.Error", err, want)
			}
			for i := range n - 1 {
				wantRemaining, limits := 9, []core.Limit{gcra}
				if i%2 == 1 { // with the window, its 4 bind
					wantRemaining, limits = 4, []core.Limit{gcra, window}
				}
				if errs[i] != nil || !results[i].Allowed || results[i].Remaining != wantRemaining {
					t.Fatalf("decision %d beside the bad key: %+v, %v; want allowed, %d remaining", i, results[i], errs[i], wantRemaining)
				}
				// Charged once: the next decision sees one more gone.
				res, err := lim.AllowAll(ctx, fmt.Sprint("k", i), limits, 0)
				if err != nil || res.Remaining != wantRemaining {
					t.Fatalf("decision %d afterwards: %+v, %v; want %d remaining", i, res, err, wantRemaining)
				}
			}
		})
	}
}

// TestBatchScriptSettlements: settlements that wait with decisions go in
// the same call of the batch script: refunds, charges and freed slots each
// applied once, a settlement Redis refuses (WRONGTYPE) getting Redis's
// error while the rest go through.
func TestBatchScriptSettlements(t *testing.T) {
	t.Parallel()
	clients := map[string]*redis.Client{
		"miniredis":  redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}),
		"standalone": redistest.Standalone(t).Client(t),
	}
	for name, rdb := range clients {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			prefix := uniquePrefix()
			lim := core.New(rdb, core.WithPrefix(prefix), core.WithPipelines(1), patient)
			gcra := core.PerHour(10)
			slots := []core.Limit{{Algorithm: core.Concurrency, Rate: 2, Period: time.Hour}, gcra}

			// Reservations: refunded, charged, released (slots), and one whose
			// key is then replaced by a hash.
			const n = 8
			res := make([]*core.Reservation, n)
			for i := range res {
				limits := []core.Limit{gcra}
				if i%4 == 2 {
					limits = slots
				}
				r, err := lim.Reserve(ctx, fmt.Sprint("k", i), limits, 2)
				if err != nil || !r.Result().Allowed {
					t.Fatalf("reservation %d: %+v, %v", i, r, err)
				}
				res[i] = r
			}
			for _, k := range []string{"k3", "k7"} {
				keys, err := rdb.Keys(ctx, prefix+"*{"+k+"}*").Result()
				if err != nil || len(keys) != 1 {
					t.Fatalf("keys %q, %v; want one", keys, err)
				}
				if err := rdb.Del(ctx, keys[0]).Err(); err != nil {
					t.Fatal(err)
				}
				if err := rdb.RPush(ctx, keys[0], "x").Err(); err != nil {
					t.Fatal(err)
				}
			}

			hold, trips := newHoldHook(false, isDecision), &roundTrips{}
			rdb.AddHook(hold)
			rdb.AddHook(trips)
			_, errs := queueBehind(t, lim, hold, gcra, 2*n, func(i int) (core.Result, error) {
				if i >= n { // a decision beside each settlement
					return lim.Allow(ctx, fmt.Sprint("other", i), gcra)
				}
				switch i % 4 {
				case 0:
					return core.Result{}, res[i].Settle(ctx, 0) // a refund of 2
				case 1:
					return core.Result{}, res[i].Settle(ctx, 5) // a charge of 3 more
				}
				if i%4 == 2 {
					return core.Result{}, res[i].Release(ctx) // frees its slots
				}
				return core.Result{}, res[i].Settle(ctx, 0) // its key holds a list: WRONGTYPE
			})
			// One batch of every call; the two whose keys hold a list raised
			// WRONGTYPE before they wrote anything, and go again alone, in
			// one pipeline, for Redis's error.
			if trips.batchCalls.Load() != 1 || trips.largest.Load() != 2*n || trips.widest.Load() != 2 {
				t.Fatalf("%d batch script calls, the largest round trip %d calls in %d commands; want one batch call of %d, then 2 alone",
					trips.batchCalls.Load(), trips.largest.Load(), trips.widest.Load(), 2*n)
			}
			for i, err := range errs {
				if i < n && i%4 == 3 {
					var reply redis.Error
					if !errors.As(err, &reply) || !strings.Contains(err.Error(), "WRONGTYPE") {
						t.Fatalf("the settlement of a key that holds a list: %v; want Redis's WRONGTYPE", err)
					}
				} else if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			for i := range n {
				want, limits := map[int]int{0: 10, 1: 5, 2: 8}[i%4], []core.Limit{gcra}
				if i%4 == 3 {
					continue
				}
				if got, err := lim.AllowAll(ctx, fmt.Sprint("k", i), limits, 0); err != nil || got.Remaining != want {
					t.Fatalf("reservation %d settled: %+v, %v; want %d remaining", i, got, err, want)
				}
				if i%4 == 2 {
					r, err := lim.Reserve(ctx, fmt.Sprint("k", i), slots[:1], 2)
					if err != nil || !r.Result().Allowed {
						t.Fatalf("reservation %d's slots after its Release: %+v, %v; want both free", i, r.Result(), err)
					}
				}
			}
		})
	}
}

// TestBatchScriptOff: WithBatchScript(false), and every Cluster or Ring
// client, pipeline one script call per decision.
func TestBatchScriptOff(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	hold, trips := newHoldHook(false, isDecision), &roundTrips{}
	rdb.AddHook(hold)
	rdb.AddHook(trips)
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithPipelines(1), core.WithBatchScript(false), patient)
	l := core.PerHour(10)
	_, errs := queueBehind(t, lim, hold, l, 5, func(i int) (core.Result, error) {
		return lim.Allow(context.Background(), fmt.Sprint("k", i), l)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if trips.batchCalls.Load() != 0 || trips.largest.Load() != 5 {
		t.Fatalf("%d batch script calls, at most %d decisions in a round trip; want a pipeline of 5 calls",
			trips.batchCalls.Load(), trips.largest.Load())
	}
}

// TestBatchScriptCrossSlot: a plain client on one node of a cluster (as
// behind a proxy that is really a cluster) gets CROSSSLOT for a batch of
// keys in several slots. That call ran nothing: the decisions go again as
// a pipeline, batch scripts stay off, and the Limiter warns once.
func TestBatchScriptCrossSlot(t *testing.T) {
	t.Parallel()
	cluster := redistest.NewCluster(t, 3)
	rdb := redis.NewClient(&redis.Options{Addr: cluster.Addrs()[0]})
	t.Cleanup(func() { rdb.Close() })
	hold, trips := newHoldHook(false, isDecision), &roundTrips{}
	rdb.AddHook(hold)
	rdb.AddHook(trips)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithPipelines(1), core.WithLogger(log), patient)
	l := core.PerHour(10)
	for round := range 2 {
		// This node owns about a third of the keys; the rest are MOVED, which
		// a plain client does not follow.
		decidedOrMoved := func(err error) bool { return err == nil || redis.HasErrorPrefix(err, "MOVED") }
		_, errs := queueBehindFirst(t, lim, hold, l, 20, func(i int) (core.Result, error) {
			return lim.Allow(context.Background(), fmt.Sprint("k", i), l)
		}, decidedOrMoved)
		for _, err := range errs {
			if !decidedOrMoved(err) {
				t.Fatalf("round %d: %v; want a decision or MOVED", round, err)
			}
		}
		hold = newHoldHook(false, isDecision)
		rdb.AddHook(hold)
	}
	if n := trips.batchCalls.Load(); n != 1 {
		t.Errorf("%d batch script calls; want the one refused, then none", n)
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"redlimit: Redis refused a batch"); n != 1 {
		t.Errorf("%d warnings about CROSSSLOT, want 1:\n%s", n, logs.String())
	}
}

// TestBatchScriptByTag: on a Cluster or a Ring, the decisions of a batch
// that share a hash tag (a hot key) go as one call of the batch script,
// exactly; the rest go one call each, in the same pipeline.
func TestBatchScriptByTag(t *testing.T) {
	t.Parallel()
	for name, rdb := range shardedClients(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithPipelines(1), patient)
			gcra, window := core.PerHour(10), core.Limit{Rate: 20, Period: time.Minute, Algorithm: core.FixedWindow}
			hold, trips := newHoldHook(false, isDecision), &roundTrips{}
			rdb.AddHook(hold)
			rdb.AddHook(trips)
			// 12 decisions on a hot key, alone or with a second limit, and 6
			// on keys of their own, all on the node of "first" (each node
			// has a queue of its own).
			const hot, cold = 12, 6
			keys := keysOnNode(t, rdb, "first", 1+cold)
			hotKey := keys[0]
			results, errs := queueBehind(t, lim, hold, gcra, hot+cold, func(i int) (core.Result, error) {
				switch {
				case i >= hot:
					return lim.Allow(ctx, keys[1+i-hot], gcra)
				case i%2 == 0:
					return lim.Allow(ctx, hotKey, gcra)
				}
				return lim.AllowAll(ctx, hotKey, []core.Limit{gcra, window}, 1)
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			allowed := 0
			for i, res := range results {
				if i >= hot && !res.Allowed {
					t.Errorf("cold key %d denied: %+v", i, res)
				}
				if i < hot && res.Allowed {
					allowed++
				}
			}
			if allowed != 10 {
				t.Fatalf("%d of %d decisions on the hot key allowed under 10/h", allowed, hot)
			}
			if trips.batchCalls.Load() != 1 || trips.decisions.Load() != 1+hot+cold {
				t.Fatalf("%d batch script calls, %d decisions run; want one call for the hot key's %d, %d in all with the first",
					trips.batchCalls.Load(), trips.decisions.Load(), hot, 1+hot+cold)
			}
			// The window counted only the admitted AllowAll decisions.
			res, err := lim.AllowN(ctx, hotKey, window, 0)
			if err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for i := 1; i < hot; i += 2 {
				if results[i].Allowed {
					admitted++
				}
			}
			if res.Remaining != 20-admitted {
				t.Fatalf("the window has %d left, want %d: it must count the %d admitted AllowAll decisions only", res.Remaining, 20-admitted, admitted)
			}
		})
	}
}

// hookable is a client the tests can add hooks to.
type hookable interface {
	redis.UniversalClient
	AddHook(redis.Hook)
}

// shardedClients returns a client of a 3-master Cluster and one of a Ring
// of two servers, by name.
func shardedClients(t *testing.T) map[string]hookable {
	a, b := redistest.Standalone(t), redistest.Standalone(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { ring.Close() })
	return map[string]hookable{"cluster": redistest.NewCluster(t, 3).Client(t), "ring": ring}
}

// nodeOf returns the address of the node of a Cluster or Ring that holds
// the state of key (its hash tag is the key).
func nodeOf(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	var node *redis.Client
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		node, err = c.MasterForKey(context.Background(), "{"+key+"}")
	case *redis.Ring:
		node, err = c.GetShardClientForKey("{" + key + "}")
	default:
		t.Fatalf("nodeOf: %T is no Cluster or Ring client", rdb)
	}
	if err != nil {
		t.Fatalf("the node of %q: %v", key, err)
	}
	return node.Options().Addr
}

// keysOnNode returns n keys other than key whose state is on key's node.
func keysOnNode(t *testing.T, rdb redis.UniversalClient, key string, n int) []string {
	t.Helper()
	want := nodeOf(t, rdb, key)
	var keys []string
	for i := 0; len(keys) < n && i < 100*n; i++ {
		if k := fmt.Sprint("k", i); nodeOf(t, rdb, k) == want {
			keys = append(keys, k)
		}
	}
	if len(keys) < n {
		t.Fatalf("found %d keys on the node of %q, want %d", len(keys), key, n)
	}
	return keys
}

// TestLanesApart: on a Cluster and a Ring, a round trip held on one node
// holds up no decision on another node's keys: each node has its queue and
// senders (and breaker).
func TestLanesApart(t *testing.T) {
	t.Parallel()
	for name, rdb := range shardedClients(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// One sender per node: with one for all, every decision would
			// wait behind the held one.
			lim := core.New(rdb, core.WithPrefix(uniquePrefix()), core.WithPipelines(1), patient)
			l := core.PerHour(10)
			var elsewhere []string
			held := nodeOf(t, rdb, "first")
			for i := 0; len(elsewhere) < 20 && i < 1000; i++ {
				if k := fmt.Sprint("k", i); nodeOf(t, rdb, k) != held {
					elsewhere = append(elsewhere, k)
				}
			}
			hold := newHoldHook(false, isDecision)
			rdb.AddHook(hold)
			first := make(chan error, 1)
			go func() {
				_, err := lim.Allow(ctx, "first", l)
				first <- err
			}()
			<-hold.reached
			for _, k := range elsewhere {
				ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				res, err := lim.Allow(ctx, k, l)
				cancel()
				if err != nil || !res.Allowed {
					t.Fatalf("%s, on another node than the held round trip: %+v, %v", k, res, err)
				}
			}
			close(hold.release)
			if err := <-first; err != nil {
				t.Fatalf("the held decision: %v", err)
			}
		})
	}
}

// TestLanesForgotten: the lane of a node with nothing to do goes once its
// senders stop (a Cluster's nodes may change over a process's life), and
// comes back with the next decision; its breaker's openings stay counted.
func TestLanesForgotten(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t, 3)
	lim := core.New(c.Client(t), core.WithPrefix(uniquePrefix()), patient, core.WithLinger(10*time.Millisecond))
	ctx := context.Background()
	decide := func() {
		t.Helper()
		for i := range 30 {
			if _, err := lim.Allow(ctx, fmt.Sprint("k", i), core.PerHour(10)); err != nil {
				t.Fatal(err)
			}
		}
	}
	decide()
	if n := lim.Lanes(); n != 3 {
		t.Fatalf("%d lanes after decisions on keys of every node, want 3", n)
	}
	for deadline := time.Now().Add(5 * time.Second); lim.Lanes() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d lanes kept 5 s after the last decision", lim.Lanes())
		}
	}
	decide()
	if n := lim.Lanes(); n != 3 {
		t.Fatalf("%d lanes after new decisions, want 3", n)
	}

	// A node stopped for a moment opens its lane's breaker; once the
	// breaker has closed and the lane gone, the opening is still counted.
	fast := core.New(c.Client(t), core.WithPrefix(uniquePrefix()), core.WithTimeout(20*time.Millisecond),
		core.WithBreaker(50*time.Millisecond), core.WithLogger(slog.New(slog.DiscardHandler)), core.WithLinger(10*time.Millisecond))
	node := c.Owner(t, redistest.Slot("{k0}"))
	until := func(what string, ok func(error) bool) {
		t.Helper()
		var err error
		for began := time.Now(); time.Since(began) < 5*time.Second; time.Sleep(2 * time.Millisecond) {
			if _, err = fast.Allow(ctx, "k0", core.PerHour(10)); ok(err) {
				return
			}
		}
		t.Fatalf("%s: not within 5 s: %v", what, err)
	}
	until("a first decision", func(err error) bool { return err == nil })
	node.Pause()
	until("the breaker opening", func(err error) bool { return errors.Is(err, core.ErrUnavailable) })
	node.Resume()
	until("the breaker closing", func(err error) bool { return err == nil })
	for deadline := time.Now().Add(5 * time.Second); fast.Lanes() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d lanes kept 5 s after the last decision", fast.Lanes())
		}
	}
	if s := fast.Stats(); s.BreakerOpens != 1 || s.BreakerOpen {
		t.Fatalf("Stats %+v once the lane is gone, want the one opening counted and the breaker closed", s)
	}
}
