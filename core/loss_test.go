package core_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// The words of the log lines the loss check writes.
const (
	lostLine    = "lost the limits' state"
	persistLine = "persists nothing"
)

// lossLimiter is one app instance: a Limiter on a client of its own
// whose log the test reads, the background check off (the test checks
// with CheckLoss).
type lossLimiter struct {
	*core.Limiter
	log *redistest.LockedBuffer
}

func newLossLimiter(t *testing.T, rdb redis.Scripter, opts ...core.Option) lossLimiter {
	log := &redistest.LockedBuffer{}
	opts = append([]core.Option{core.WithLossCheck(0), core.WithTimeout(time.Second),
		core.WithLogger(slog.New(slog.NewTextHandler(log, nil)))}, opts...)
	return lossLimiter{core.New(rdb, opts...), log}
}

// lines returns the lines of the log that hold words.
func (l lossLimiter) lines(words string) []string {
	var found []string
	for _, line := range strings.Split(l.log.String(), "\n") {
		if strings.Contains(line, words) {
			found = append(found, line)
		}
	}
	return found
}

// said checks that the instance logged exactly one loss, naming the server
// and the words of its cause, counted once in its Stats.
func (l lossLimiter) said(t *testing.T, who, server, cause string) {
	t.Helper()
	lost := l.lines(lostLine)
	if len(lost) != 1 || l.Stats().StateLosses != 1 {
		t.Fatalf("%s: %d losses counted and %d logged, want 1 and 1; log:\n%s", who, l.Stats().StateLosses, len(lost), l.log)
	}
	if !strings.Contains(lost[0], "level=ERROR") || !strings.Contains(lost[0], "server="+server) || !strings.Contains(lost[0], cause) {
		t.Fatalf("%s: the loss logged as %q; want an error naming server=%s and %q", who, lost[0], server, cause)
	}
}

// useUp spends a tenant's month of 60 from instances taking turns, and
// checks that the 61st is denied.
func useUp(t *testing.T, monthly core.Limit, lims ...lossLimiter) {
	t.Helper()
	ctx := context.Background()
	for i := range monthly.Rate + 1 {
		res, err := lims[i%len(lims)].Allow(ctx, "tenant:7", monthly)
		if err != nil || res.Allowed != (i < monthly.Rate) {
			t.Fatalf("request %d of the month: %+v, %v", i+1, res, err)
		}
	}
}

// month is the quota the tests sell: 60 a calendar month.
func month(t *testing.T) core.Limit {
	monthly, err := core.ParseLimit("60/month calendar")
	if err != nil {
		t.Fatal(err)
	}
	return monthly
}

// TestStateLossRestart: a redis-server killed (SIGKILL) and restarted
// without persistence forgets a tenant's used-up month; each instance
// says so once, naming the server and a restart, and counts it once.
func TestStateLossRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	a, b := newLossLimiter(t, srv.Client(t)), newLossLimiter(t, srv.Client(t))
	monthly := month(t)
	useUp(t, monthly, a, b)
	for _, l := range []lossLimiter{a, b} {
		if keys := l.CheckLoss(); len(keys) != 1 || keys[0] != "redlimit:{generation}" {
			t.Fatalf("markers %q, want the one of a single server", keys)
		}
	}

	srv.Restart(t)
	ctx := context.Background()
	// b, whose deny cache holds no denial of the tenant (a's does, for up
	// to a second: stricter than Redis now, never looser)
	if res, err := b.Allow(ctx, "tenant:7", monthly); err != nil || !res.Allowed || res.Remaining != monthly.Rate-1 {
		t.Fatalf("after the restart: %+v, %v; want the month forgotten (nothing can keep it)", res, err)
	}
	for range 3 { // seen at the first check after it, said once
		a.CheckLoss()
		b.CheckLoss()
	}
	a.said(t, "the instance that found the marker gone", srv.Addr, "it restarted")
	b.said(t, "the instance that found another generation", srv.Addr, "it restarted")
}

// TestStateLossFlushAll: FLUSHALL on a running server is seen by each
// instance, once, as keys deleted while it ran.
func TestStateLossFlushAll(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	a, b := newLossLimiter(t, srv.Client(t)), newLossLimiter(t, srv.Client(t))
	useUp(t, month(t), a, b)
	a.CheckLoss()
	b.CheckLoss()
	if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		a.CheckLoss()
		b.CheckLoss()
	}
	a.said(t, "a", srv.Addr, "deleted while it ran")
	b.said(t, "b", srv.Addr, "deleted while it ran")
}

// TestStateLossSnapshot: a server restarted from an RDB snapshot older
// than the last check lost the counts made since it: its marker's count
// went back, and that is a loss too. A snapshot newer than every check
// is not (nothing the checks can see was lost).
func TestStateLossSnapshot(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	admin := srv.Client(t)
	ctx := context.Background()
	a := newLossLimiter(t, srv.Client(t))
	monthly := month(t)
	useUp(t, monthly, a)
	a.CheckLoss()
	if err := admin.Save(ctx).Err(); err != nil { // the snapshot the restart loads
		t.Fatal(err)
	}
	srv.Restart(t)
	a.CheckLoss()
	if n, kept := a.Stats().StateLosses, a.lines("restarted, or another took its place, and kept"); n != 0 || len(kept) != 1 {
		t.Fatalf("a restart from a snapshot taken after the last check: %d losses and %d restarts with the state kept logged, want 0 and 1; log:\n%s",
			n, len(kept), a.log)
	}
	if res, err := a.Allow(ctx, "tenant:7", monthly); err != nil || res.Allowed {
		t.Fatalf("the month after a restart from its snapshot: %+v, %v; want it kept (denied)", res, err)
	}

	if err := admin.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	a.CheckLoss() // counted after the snapshot: lost with the restart
	srv.Restart(t)
	a.CheckLoss()
	a.CheckLoss()
	a.said(t, "a", srv.Addr, "went back in time")
}

// TestStateLossBackground: with decisions flowing, the background check
// sees a FLUSHALL within a few of its periods, and says it once however
// many decisions follow. miniredis has neither INFO's run_id nor CONFIG:
// the cause is unnamed and the persistence unknown, which is no error
// and no warning.
func TestStateLossBackground(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	l := newLossLimiter(t, redis.NewClient(&redis.Options{Addr: m.Addr()}), core.WithLossCheck(10*time.Millisecond))
	ctx := context.Background()
	hourly := core.PerHour(1_000_000)
	decideUntil := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; !done(); i++ {
			if _, err := l.Allow(ctx, "k", hourly); err != nil {
				t.Fatal(err)
			}
			if i >= 100_000 || time.Now().After(deadline) {
				t.Fatalf("%s: not after %d decisions; log:\n%s", what, i, l.log)
			}
			time.Sleep(time.Millisecond)
		}
	}
	decideUntil("a marker placed", func() bool { return m.Exists("redlimit:{generation}") })
	m.FlushAll()
	decideUntil("the FLUSHALL seen", func() bool { return l.Stats().StateLosses > 0 })
	time.Sleep(20 * time.Millisecond)
	for range 20 { // several more checks: nothing more to say
		if _, err := l.Allow(ctx, "k", hourly); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.CheckLoss() // waits for a running check
	l.said(t, "miniredis", m.Addr(), "its keys are gone")
	if warned := l.lines("level=WARN"); len(warned) != 0 {
		t.Fatalf("warnings on a server without CONFIG: %q", warned)
	}
}

// TestPersistenceWarning: an instance that decides limits of an hour or
// more on a server that persists nothing (redistest's: save "",
// appendonly no) warns once, naming it; not for shorter limits (nor a
// Concurrency lease), nor on a server with AOF.
func TestPersistenceWarning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lease, err := core.ParseLimit("5 concurrent lease=2h")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		limits []core.Limit
		aof    bool
		warns  int
	}{
		{"an hour, nothing persisted", []core.Limit{core.PerSecond(10), core.PerHour(100)}, false, 1},
		{"a month, nothing persisted", []core.Limit{month(t)}, false, 1},
		{"short limits only", []core.Limit{core.PerSecond(10), core.PerMinute(100)}, false, 0},
		{"a Concurrency lease of 2 h", []core.Limit{lease}, false, 0},
		{"an hour, AOF on", []core.Limit{core.PerHour(100)}, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Standalone(t)
			if c.aof {
				if err := srv.Client(t).ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
					t.Fatal(err)
				}
			}
			l := newLossLimiter(t, srv.Client(t))
			for range 3 {
				if r, err := l.Reserve(ctx, "k", c.limits, 1); err != nil {
					t.Fatal(err)
				} else if err := r.Release(ctx); err != nil {
					t.Fatal(err)
				}
				l.CheckLoss()
			}
			warned := l.lines(persistLine)
			if len(warned) != c.warns {
				t.Fatalf("%d warnings, want %d; log:\n%s", len(warned), c.warns, l.log)
			}
			if c.warns > 0 && (!strings.Contains(warned[0], "level=WARN") || !strings.Contains(warned[0], "server="+srv.Addr)) {
				t.Fatalf("warned %q; want a warning naming server=%s", warned[0], srv.Addr)
			}
		})
	}
}

// TestStateLossCluster: on a Cluster each master serving the keys gets a
// marker of its own; a FLUSHALL of one master is seen once, naming it,
// and the others' state counts as kept.
func TestStateLossCluster(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t, 3)
	l := newLossLimiter(t, c.Client(t))
	ctx := context.Background()
	var keys []string
	for try := 0; len(keys) < 3 && try < 5; try++ { // a master's lane goes after a second without calls
		for i := range 60 { // keys on every master, so that each has a lane
			if _, err := l.Allow(ctx, "user:"+strings.Repeat("x", i), core.PerHour(10)); err != nil {
				t.Fatal(err)
			}
		}
		keys = l.CheckLoss()
	}
	admin := c.Client(t)
	on := map[string]string{} // marker -> its master
	for _, key := range keys {
		node, err := admin.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		on[key] = node.Options().Addr
	}
	if len(keys) != 3 || len(on) != 3 || on[keys[0]] == on[keys[1]] || on[keys[1]] == on[keys[2]] || on[keys[0]] == on[keys[2]] {
		t.Fatalf("markers %q on %v; want one on each of 3 masters", keys, on)
	}
	flushed := on[keys[1]]
	node := redis.NewClient(&redis.Options{Addr: flushed})
	t.Cleanup(func() { node.Close() })
	if err := node.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	l.CheckLoss()
	l.CheckLoss()
	l.said(t, "cluster", flushed, "deleted while it ran")
}

// TestStateLossQuota is the case with the default check period:
// three instances use up a tenant's month; then the server is killed and
// restarted without persistence, or flushed. The tenant's next 70
// requests find the month forgotten (60 admitted: nothing can restore the
// count), and each instance, deciding as usual, says so once and counts it.
// Before that, each warned once that the server persists nothing.
func TestStateLossQuota(t *testing.T) {
	t.Parallel()
	for _, event := range []string{"restart", "flushall"} {
		t.Run(event, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Standalone(t)
			monthly := month(t)
			var lims []lossLimiter
			for range 3 { // no deny cache: its denials of the tenant would outlive the loss by up to a second
				lims = append(lims, newLossLimiter(t, srv.Client(t), core.WithLossCheck(time.Second), core.WithDenyCache(0)))
			}
			ctx := context.Background()
			useUp(t, monthly, lims...)
			// Decisions flow until every instance has checked the server
			// (and warned, the month being a limit of an hour or more).
			decideUntil(t, lims, "tenant:other", monthly, func() bool {
				for _, l := range lims {
					if len(l.lines(persistLine)) == 0 {
						return false
					}
				}
				return true
			})
			if event == "restart" {
				srv.Restart(t)
			} else if err := srv.Client(t).FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for i := range monthly.Rate + 10 {
				res, err := lims[i%3].Allow(ctx, "tenant:7", monthly)
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					admitted++
				}
				time.Sleep(10 * time.Millisecond)
			}
			decideUntil(t, lims, "tenant:other", monthly, func() bool {
				return lims[0].Stats().StateLosses > 0 && lims[1].Stats().StateLosses > 0 && lims[2].Stats().StateLosses > 0
			})
			cause := map[string]string{"restart": "it restarted", "flushall": "deleted while it ran"}[event]
			for i, l := range lims {
				l.said(t, "instance "+strconv.Itoa(i), srv.Addr, cause)
				if n := len(l.lines(persistLine)); n != 1 {
					t.Fatalf("instance %d warned %d times of a server that persists nothing, want once", i, n)
				}
			}
			if admitted != monthly.Rate {
				t.Fatalf("%d of the used-up month admitted after the %s, want %d (the whole month: the count is gone)", admitted, event, monthly.Rate)
			}
			t.Logf("after the %s: %d of %d requests admitted on a used-up month of %d; each of 3 instances logged it once and counts 1",
				event, admitted, monthly.Rate+10, monthly.Rate)
		})
	}
}

// decideUntil makes decisions from lims in turn, 10 ms apart, until done
// (at most 10 s or 1 000 decisions).
func decideUntil(t *testing.T, lims []lossLimiter, key string, limit core.Limit, done func() bool) {
	t.Helper()
	for i := 0; !done(); i++ {
		if i == 1000 {
			t.Fatalf("not done after %d decisions", i)
		}
		if _, err := lims[i%len(lims)].Allow(context.Background(), key, limit); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
