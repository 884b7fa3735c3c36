package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestServerClock runs each algorithm on real Redis with the default clock,
// the server's TIME, and waits in real time: a denied request succeeds
// after sleeping its RetryAfter, and the key is gone after its ResetAfter.
// Periods are short so the whole test sleeps well under a second per case.
func TestServerClock(t *testing.T) {
	t.Parallel()
	redistest.Servers(t, func(t *testing.T, newClient func() redis.UniversalClient) {
		for _, a := range suiteAlgorithms {
			l := a.limit
			l.Period = 200 * time.Millisecond
			t.Run(a.name, func(t *testing.T) {
				t.Parallel()
				testServerClock(t, newClient(), l)
			})
		}
	})
}

func testServerClock(t *testing.T, rdb redis.UniversalClient, l core.Limit) {
	ctx := context.Background()
	prefix := uniquePrefix()
	lim := core.New(rdb, core.WithPrefix(prefix), patient)
	key := stateKey(prefix, "k", l)

	drained := drain(t, lim, "k", l)
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > drained.ResetAfter+time.Millisecond {
		t.Fatalf("TTL %v, want in (0, ResetAfter %v]", ttl, drained.ResetAfter)
	}
	denied := allowN(t, lim, "k", l, 1)
	for i := 0; i < 50 && denied.Allowed; i++ { // a loaded machine let events refill meanwhile: take them too
		if denied.Remaining > 0 {
			allowN(t, lim, "k", l, denied.Remaining)
		}
		denied = allowN(t, lim, "k", l, 1)
	}
	if denied.Allowed || denied.RetryAfter <= 0 || denied.RetryAfter > denied.ResetAfter {
		t.Fatalf("after drain: %+v, want denied with 0 < RetryAfter <= ResetAfter", denied)
	}
	time.Sleep(denied.RetryAfter)
	if res := allowN(t, lim, "k", l, 1); !res.Allowed {
		t.Fatalf("denied after sleeping RetryAfter %v: %+v", denied.RetryAfter, res)
	}

	// The key expires by itself once the state is back to full.
	last := allowN(t, lim, "k", l, 0)
	deadline := time.Now().Add(last.ResetAfter + 2*time.Second)
	for rdb.Exists(ctx, key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists %v after ResetAfter %v", key, 2*time.Second, last.ResetAfter)
		}
		time.Sleep(10 * time.Millisecond)
	}
	check(t, "after expiry", allowN(t, lim, "k", l, 1), true, l.Capacity()-1)
}

// TestSentinelFailover: state written before the master fails survives on
// the replica Sentinel promotes, and the same clients go on deciding
// through the new master, with no free allowance after the failover.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.NewSentinel(t)
	s.AddReplica(t)
	rdb := s.Client(t)
	lim := core.New(rdb, core.WithPrefix(uniquePrefix()), patient)
	for _, a := range suiteAlgorithms {
		drain(t, lim, a.name, a.limit)
	}
	// Make sure the replica has it all before the master goes.
	if n, err := rdb.Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	s.Master.Stop()

	stopped := time.Now()
	deadline := stopped.Add(30 * time.Second)
	for {
		_, err := lim.Allow(ctx, "probe", core.PerHour(1000))
		if err == nil {
			t.Logf("decisions resumed %v after the master stopped", time.Since(stopped).Round(100*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision 30s after the master stopped: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, a := range suiteAlgorithms {
		res := allowN(t, lim, a.name, a.limit, 1)
		if res.Allowed {
			t.Errorf("%s: allowed after failover, though drained before it: %+v", a.name, res)
		}
	}
}
