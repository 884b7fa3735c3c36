package core

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestReleaseBeforeDecision: the release of a reservation whose decision
// failed after it was sent may reach Redis before the decision itself
// (another connection, a server that was stopped and reads both at once).
// It finds no slot of the reservation and leaves a record, so that the
// decision, arriving after it, takes nothing: denied, every slot free. The
// record ends with a lease, and a decision of another reservation is not
// affected by it. A release that finds its slots frees them and leaves no
// record.
func TestReleaseBeforeDecision(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	m.SetTime(time.Unix(1_764_000_000, 0))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	l := New(rdb)
	now := time.Unix(1_764_000_000, 0) // the server's clock, which the scripts read
	conc := Limit{Algorithm: Concurrency, Rate: 2, Period: time.Minute}
	limits := []Limit{conc}

	// decide makes a reserving decision of one slot with the given id.
	decide := func(what, rid string) (Result, *decision) {
		t.Helper()
		var d decision
		if err := l.prepare(&d, &Request{Key: "job", Limits: limits, N: 1}); err != nil {
			t.Fatal(err)
		}
		d.rid = rid
		results := make([]Result, 1)
		if _, err := l.ask(ctx, &d, l.now(), limits, results); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return results[0], &d
	}
	// releaseUnknown releases the reservation of rid as the Limiter does
	// for a decision that failed and may have run.
	releaseUnknown := func(what, rid string) {
		t.Helper()
		var d decision
		if err := l.prepare(&d, &Request{Key: "job", Limits: limits, N: 1}); err != nil {
			t.Fatal(err)
		}
		d.rid = rid
		r := newReservation(l, &d, 0, make([]Result, 1))
		r.unknown = true
		if _, err := l.run(ctx, r.releaseCall(l.now())); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	key := stateKey(l.prefix, "", "job", infoOf(t, conc))
	free := func() int {
		t.Helper()
		n, err := rdb.ZCount(ctx, key, "("+strconv.FormatInt(now.UnixMicro(), 10), "+inf").Result()
		if err != nil {
			t.Fatal(err)
		}
		return conc.Rate - int(n)
	}

	late := l.nextID()
	releaseUnknown("the release, first", late)
	if res, _ := decide("the decision, after its release", late); res.Allowed {
		t.Fatalf("a decision that reached Redis after its release: %+v, want denied: it takes nothing", res)
	}
	if n := free(); n != 2 {
		t.Fatalf("%d of 2 slots free after a late decision; want 2", n)
	}
	if res, _ := decide("another reservation", l.nextID()); !res.Allowed {
		t.Fatalf("another reservation: %+v, want allowed", res)
	}

	// A release that finds its slots frees them and leaves no record.
	id := l.nextID()
	if res, _ := decide("a decision", id); !res.Allowed {
		t.Fatalf("a decision: %+v, want allowed", res)
	}
	releaseUnknown("its release", id)
	if _, err := rdb.ZScore(ctx, key, "x:"+id).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a release that freed its slots left a record: %v", err)
	}
	if _, err := rdb.ZScore(ctx, key, "x:"+late).Result(); err != nil {
		t.Fatalf("the late decision's record: %v, want it kept for a lease", err)
	}

	// The record lasts a lease: a release a lease later trims it.
	now = now.Add(conc.Period + time.Second)
	m.SetTime(now)
	releaseUnknown("a release a lease later", l.nextID())
	if _, err := rdb.ZScore(ctx, key, "x:"+late).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the late decision's record a lease later: %v, want it trimmed", err)
	}
}

func infoOf(t *testing.T, l Limit) *limitInfo {
	t.Helper()
	info, err := workOut(l)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
