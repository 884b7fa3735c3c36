package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestPeersCount: Limiters that share FailLocal's limits count each
// other through a heartbeat in Redis, once a second at most, while they
// make decisions; a Limiter with another prefix shares nothing and counts
// itself alone; one that makes no decision counts nobody.
func TestPeersCount(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	prefix := uniquePrefix()
	var lims []*core.Limiter
	for range 3 {
		lim := core.New(srv.Client(t), core.WithPrefix(prefix), patient)
		lim.SharePeers()
		lims = append(lims, lim)
	}
	other := core.New(srv.Client(t), core.WithPrefix(uniquePrefix()), patient)
	other.SharePeers()
	idle := core.New(srv.Client(t), core.WithPrefix(prefix), patient)
	idle.SharePeers()
	ctx := context.Background()
	decideAll := func() {
		for _, lim := range append(lims[:3:3], other) {
			if _, err := lim.Allow(ctx, "k", core.PerHour(100)); err != nil {
				t.Fatal(err)
			}
		}
	}
	decideAll()
	// The first heartbeats saw only those before them; the next ones,
	// a second later, see all three.
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		decideAll()
		if lims[0].Peers() == 3 && lims[1].Peers() == 3 && lims[2].Peers() == 3 && other.Peers() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peers counted %d, %d, %d and %d (another prefix); want 3, 3, 3 and 1",
				lims[0].Peers(), lims[1].Peers(), lims[2].Peers(), other.Peers())
		}
	}
	if n := idle.Peers(); n != 0 {
		t.Fatalf("a Limiter that decided nothing counted %d peers, want 0 (unknown)", n)
	}
	// One heartbeat a second at most, per Limiter: a burst of decisions
	// sends none.
	admin := srv.Client(t)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	burst := time.Now()
	for range 50 {
		decideAll()
	}
	took := time.Since(burst)
	stats, err := redistest.CommandStats(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	// A loaded machine may stretch the burst past a second: one heartbeat
	// per Limiter per second begun.
	if n, most := stats["zadd"].Calls, float64(4*(1+int64(took/time.Second))); n > most {
		t.Fatalf("%v heartbeats (ZADD) for 200 decisions in %v, want at most one per Limiter a second (%v)", n, took, most)
	}
}

// TestPeersDropTheSilent: an instance not heard from for 10 s (of the
// Redis clock) is no longer counted.
func TestPeersDropTheSilent(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	prefix := uniquePrefix()
	newLim := func() *core.Limiter {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		lim := core.New(rdb, core.WithPrefix(prefix), patient)
		lim.SharePeers()
		return lim
	}
	a, b := newLim(), newLim()
	beat := func(lim *core.Limiter, want int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := lim.Allow(context.Background(), "k", core.PerHour(100)); err != nil {
				t.Fatal(err)
			}
			if lim.Peers() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("counted %d peers, want %d", lim.Peers(), want)
			}
		}
	}
	beat(a, 1)
	beat(b, 2)
	m.SetTime(now.Add(11 * time.Second)) // a falls silent for longer than 10 s
	time.Sleep(1100 * time.Millisecond)  // b may beat again
	beat(b, 1)
}
