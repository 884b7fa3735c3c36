package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// Fault tests: Redis stopped (SIGSTOP), killed and restarted, slow, and its
// client connections killed, under steady traffic. They show that no
// decision outlives its timeout, that the breaker fails decisions fast
// while Redis is gone and lets them through within about a second of its
// return, that nothing is counted twice, and that the Limiter's goroutines
// go away afterwards. They do not call t.Parallel: goroutine counts are
// only meaningful while nothing else runs.

// huge never denies in these tests: every decision that reaches Redis
// counts one, so what Redis counted can be compared with what callers saw.
// Each event moves the state an hour ahead, so under a still client clock
// the key's TTL (which real Redis runs down in real time) grows by an hour
// per event instead of a few microseconds.
var huge = core.Limit{Rate: 1_000_000, Period: 1_000_000 * time.Hour}

// outcome is what one decision of the steady traffic saw.
type outcome struct {
	at, took time.Duration // since the traffic started
	allowed  bool
	err      error
}

// load runs decisions from several goroutines, one after another on
// each, until stop is called, and returns them in order of their start.
type load struct {
	start  time.Time
	stalls *stallWatch // the process's own stalls meanwhile
	mu     sync.Mutex
	seen   []outcome
	stop   func() []outcome
}

func steadyTraffic(lim *core.Limiter, goroutines int, key string) *load {
	tr := &load{start: time.Now()}
	tr.stalls = watchStalls(tr.start)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				began := time.Now()
				res, err := lim.Allow(context.Background(), key, huge)
				o := outcome{at: began.Sub(tr.start), took: time.Since(began), allowed: err == nil && res.Allowed, err: err}
				tr.mu.Lock()
				tr.seen = append(tr.seen, o)
				tr.mu.Unlock()
				if err != nil {
					time.Sleep(time.Millisecond) // a fail-fast loop would spin
				}
			}
		}()
	}
	tr.stop = func() []outcome {
		cancel()
		wg.Wait()
		tr.stalls.stop()
		sort.Slice(tr.seen, func(i, j int) bool { return tr.seen[i].at < tr.seen[j].at })
		return tr.seen
	}
	return tr
}

// stallWatch notes when the process itself stalls: a goroutine that wakes
// every millisecond records each wake-up that comes late. On a loaded
// machine (the tests run under -race beside other packages' tests, on 2
// cores) any goroutine may wait a while for a CPU, a decision's caller as
// well as this one: a decision that Redis answered in time was seen to
// return after 0.8 s. What a decision took beyond its timeout is the
// Limiter's only as far as the process was not stalled meanwhile.
type stallWatch struct {
	start time.Time
	done  chan struct{}
	ended chan struct{}
	mu    sync.Mutex
	seen  []stall
}

// stall is a wake-up due at from (since the watch's start) that came at to.
type stall struct{ from, to time.Duration }

// stallTick is how often the watch wakes; a wake-up late by more than
// stallNoise is a stall.
const (
	stallTick  = time.Millisecond
	stallNoise = 10 * time.Millisecond
)

// watchStalls starts a watch whose times count from start.
func watchStalls(start time.Time) *stallWatch {
	w := &stallWatch{start: start, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		due := time.Now().Add(stallTick)
		timer := time.NewTimer(stallTick)
		defer timer.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-timer.C:
			}
			now := time.Now()
			if now.Sub(due) > stallNoise {
				w.mu.Lock()
				w.seen = append(w.seen, stall{due.Sub(w.start), now.Sub(w.start)})
				w.mu.Unlock()
			}
			due = now.Add(stallTick)
			timer.Reset(stallTick)
		}
	}()
	return w
}

// stop ends the watch; its goroutine is gone when it returns.
func (w *stallWatch) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.ended
}

// within returns how long the process was stalled between from and to.
func (w *stallWatch) within(from, to time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, s := range w.seen {
		if lo, hi := max(s.from, from), min(s.to, to); hi > lo {
			d += hi - lo
		}
	}
	return d
}

// longest returns the longest stall and how many there were.
func (w *stallWatch) longest() (longest time.Duration, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.seen {
		longest = max(longest, s.to-s.from)
	}
	return longest, len(w.seen)
}

// since returns the time since the traffic started.
func (tr *load) since() time.Duration { return time.Since(tr.start) }

// first returns the first outcome at or after from that satisfies ok.
func first(seen []outcome, from time.Duration, ok func(outcome) bool) (outcome, bool) {
	for _, o := range seen {
		if o.at >= from && ok(o) {
			return o, true
		}
	}
	return outcome{}, false
}

// checkOpened: the breaker opened within about a second of Redis failing
// at from; it returns the first fail-fast decision.
func checkOpened(t *testing.T, seen []outcome, from time.Duration) outcome {
	t.Helper()
	open, ok := first(seen, from, func(o outcome) bool { return errors.Is(o.err, core.ErrUnavailable) })
	if !ok || open.at-from > 1500*time.Millisecond {
		t.Fatalf("the breaker did not open within about a second of Redis failing (first fail-fast at %v, failed at %v)", open.at, from)
	}
	return open
}

// checkResumed: decisions succeeded again within about a second of Redis's
// return at from; it returns the first success.
func checkResumed(t *testing.T, seen []outcome, from time.Duration) outcome {
	t.Helper()
	back, ok := first(seen, from, func(o outcome) bool { return o.allowed })
	if !ok || back.at-from > 1500*time.Millisecond {
		t.Fatalf("decisions did not resume within about a second of Redis's return (first success at %v, back at %v)", back.at, from)
	}
	return back
}

// tally sums what callers saw: allowed, and failed (which may have counted).
func tally(seen []outcome) (allowed, failed int64) {
	for _, o := range seen {
		if o.allowed {
			allowed++
		} else if o.err != nil && !errors.Is(o.err, core.ErrUnavailable) { // fail-fast ones never left
			failed++
		}
	}
	return allowed, failed
}

// counted reads how many events Redis counted on key under huge.
func counted(t *testing.T, lim *core.Limiter, key string) int64 {
	t.Helper()
	var res core.Result
	var err error
	for try := 0; try < 50; try++ { // the breaker may still be open for a moment
		if res, err = lim.AllowN(context.Background(), key, huge, 0); err == nil {
			return int64(huge.Capacity() - res.Remaining)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("reading the count: %v", err)
	return 0
}

// checkOnce: Redis counted every decision a caller saw allowed, and
// besides those at most the ones whose answer was lost: none twice.
func checkOnce(t *testing.T, seen []outcome, counted int64) {
	t.Helper()
	allowed, failed := tally(seen)
	t.Logf("%d decisions: %d allowed, %d failed (may have counted); Redis counted %d", len(seen), allowed, failed, counted)
	if counted < allowed || counted > allowed+failed {
		t.Errorf("Redis counted %d, want between the %d allowed and %d (allowed + failed): a decision was lost or counted twice",
			counted, allowed, allowed+failed)
	}
}

// checkBounded: no decision outlived the timeout, but for scheduling
// slack and the time the process was stalled meanwhile (stalls): a
// decision that waited on Redis past its timeout would take as long as
// Redis kept it, with the process running.
func checkBounded(t *testing.T, seen []outcome, timeout time.Duration, stalls *stallWatch) {
	t.Helper()
	const slack = 400 * time.Millisecond
	var longest, worst outcome
	var worstStalled time.Duration
	for _, o := range seen {
		if o.took > longest.took {
			longest = o
		}
		if o.took <= timeout+slack {
			continue
		}
		stalled := stalls.within(o.at, o.at+o.took)
		if o.took-stalled > worst.took-worstStalled {
			worst, worstStalled = o, stalled
		}
	}
	if stall, n := stalls.longest(); longest.took > timeout+slack || stall > slack {
		t.Logf("the longest decision took %v (at %v, err %v); the process stalled %d times, the longest %v",
			longest.took, longest.at, longest.err, n, stall)
	}
	if worst.took-worstStalled > timeout+slack {
		t.Errorf("a decision took %v (at %v, err %v), while the process was stalled for %v of it; the timeout is %v",
			worst.took, worst.at, worst.err, worstStalled, timeout)
	}
}

// goroutines is a snapshot of the process's goroutines, for checking that
// a test leaves none behind.
type goroutines map[string]string // id -> stack

func takeGoroutines() goroutines {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	g := goroutines{}
	for _, stack := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(stack, " [")
		g[id] = stack
	}
	return g
}

// checkGoroutines: once idle, the Limiter's senders stop and the process
// is back to the goroutines it had in baseline: none is left that was not
// there before, but for those of the test's own Redis processes.
// (Goroutines are compared by their listing, not counted:
// runtime.NumGoroutine can count one of the runtime's own that the listing
// leaves out.)
func checkGoroutines(t *testing.T, lim *core.Limiter, baseline goroutines) {
	t.Helper()
	// go-redis's own read timeout is 3 s; an open breaker probes until
	// nobody asked for 2 s; a machine loaded by the whole suite under
	// -race stretches both.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var extra []string
		for id, stack := range takeGoroutines() {
			if _, ok := baseline[id]; !ok && !ownedElsewhere(stack) {
				extra = append(extra, stack)
			}
		}
		if lim.Senders() == 0 && len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d senders and %d new goroutines 20 s after the traffic stopped:\n%s",
				lim.Senders(), len(extra), strings.Join(extra, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ownedElsewhere tells the goroutines that are not the Limiter's to leave
// behind: a restarted server's process brings goroutines of its own (the
// Limiter runs no processes), and a go-redis client the test keeps open
// may start its own background loops, such as the maintenance-notification
// circuit breaker's cleanup of a ClusterClient's node client created anew
// after its connections were killed. Those stacks hold no frame of this
// module; one of the Limiter's, even blocked inside go-redis, would.
func ownedElsewhere(stack string) bool {
	if strings.Contains(stack, "internal/redistest.") || strings.Contains(stack, "os/exec.") {
		return true
	}
	return strings.Contains(stack, "github.com/redis/go-redis/v9") && !strings.Contains(stack, "github.com/redlimit/redlimit")
}

// faultLimiter is a Limiter on its own client with go-redis's default
// retries (which the Limiter must override) and a still clock, so that
// nothing refills and counts add up.
func faultLimiter(t *testing.T, addr string, opts ...core.Option) *core.Limiter {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	still := time.Now()
	return core.New(rdb, append([]core.Option{core.WithPrefix(uniquePrefix()),
		core.WithClock(func() time.Time { return still })}, opts...)...)
}

func TestFaultPaused(t *testing.T) {
	srv := redistest.Standalone(t)
	baseline := takeGoroutines()
	var log syncBuffer
	lim := faultLimiter(t, srv.Addr, core.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	tr := steadyTraffic(lim, 8, "paused")
	time.Sleep(300 * time.Millisecond)
	paused := tr.since()
	srv.Pause()
	time.Sleep(2 * time.Second)
	resumed := tr.since()
	srv.Resume()
	time.Sleep(2 * time.Second)
	seen := tr.stop()

	checkBounded(t, seen, core.DefaultTimeout, tr.stalls)
	if _, ok := first(seen, paused, func(o outcome) bool { return errors.Is(o.err, core.ErrTimeout) }); !ok {
		t.Fatal("no decision timed out while Redis was stopped")
	}
	open := checkOpened(t, seen, paused)
	var failFast []time.Duration
	for _, o := range seen {
		if errors.Is(o.err, core.ErrUnavailable) {
			failFast = append(failFast, o.took)
		}
	}
	sort.Slice(failFast, func(i, j int) bool { return failFast[i] < failFast[j] })
	if p99 := failFast[len(failFast)*99/100]; p99 > 20*time.Millisecond {
		t.Errorf("fail-fast decisions took up to %v (p99); they should not wait for Redis", p99)
	}
	back := checkResumed(t, seen, resumed)
	t.Logf("stopped at %v: breaker open at %v (%d fail-fast decisions); resumed at %v: first success at %v",
		paused, open.at, len(failFast), resumed, back.at)
	// One line when the breaker opened and one when it closed, not one per
	// failed decision.
	if opened, closed := strings.Count(log.String(), "Redis is failing"), strings.Count(log.String(), "Redis answers again"); opened != 1 || closed != 1 {
		t.Errorf("logged %d openings and %d closings, want 1 of each:\n%s", opened, closed, log.String())
	}
	checkOnce(t, seen, counted(t, lim, "paused"))
	checkGoroutines(t, lim, baseline)
}

func TestFaultKilledAndRestarted(t *testing.T) {
	srv := redistest.Standalone(t)
	baseline := takeGoroutines()
	lim := faultLimiter(t, srv.Addr)
	tr := steadyTraffic(lim, 8, "killed")
	time.Sleep(300 * time.Millisecond)
	killed := tr.since()
	srv.Stop()
	time.Sleep(1500 * time.Millisecond)
	restarted := tr.since()
	srv.Restart(t)
	time.Sleep(1500 * time.Millisecond)
	seen := tr.stop()

	checkBounded(t, seen, core.DefaultTimeout, tr.stalls)
	open := checkOpened(t, seen, killed)
	// While it was down, few decisions reached the client (and its dial
	// error log): only the probes.
	var tried int
	for _, o := range seen {
		if o.at > open.at && o.at < restarted && o.err != nil && !errors.Is(o.err, core.ErrUnavailable) {
			tried++
		}
	}
	if limit := int((restarted-open.at)/core.BreakerProbeInterval) + 2; tried > limit {
		t.Errorf("%d decisions went to a dead Redis while the breaker was open; want about one per %v (at most %d)",
			tried, core.BreakerProbeInterval, limit)
	}
	back := checkResumed(t, seen, restarted)
	t.Logf("killed at %v: breaker open at %v, %d probes; restarted at %v: first success at %v", killed, open.at, tried, restarted, back.at)
	// A restarted Redis has lost its state, so what it counted ran after
	// the restart began: decisions that ended after it, and maybe some that
	// failed earlier but were sent (not refused by the open breaker), since
	// go-redis retries a failed dial (DialerRetries, 5 times 100 ms apart)
	// and can deliver a decision whose caller has given up to the new server.
	var after []outcome
	for _, o := range seen {
		sent := o.err != nil && !errors.Is(o.err, core.ErrUnavailable)
		if o.at+o.took >= restarted || (o.at >= killed && sent) {
			after = append(after, o)
		}
	}
	checkOnce(t, after, counted(t, lim, "killed"))
	checkGoroutines(t, lim, baseline)
}

// TestFaultSlow: a Redis slow for less than the breaker's threshold costs
// the decisions meanwhile their timeout, and no more; the breaker stays
// closed.
func TestFaultSlow(t *testing.T) {
	srv := redistest.Standalone(t)
	baseline := takeGoroutines()
	lim := faultLimiter(t, srv.Addr)
	tr := steadyTraffic(lim, 8, "slow")
	time.Sleep(300 * time.Millisecond)
	slow := tr.since()
	srv.SlowFor(t, 250*time.Millisecond)
	time.Sleep(1 * time.Second)
	seen := tr.stop()

	checkBounded(t, seen, core.DefaultTimeout, tr.stalls)
	if _, ok := first(seen, slow, func(o outcome) bool { return errors.Is(o.err, core.ErrTimeout) }); !ok {
		t.Fatal("no decision timed out while Redis was slow")
	}
	if o, ok := first(seen, 0, func(o outcome) bool { return errors.Is(o.err, core.ErrUnavailable) }); ok {
		t.Errorf("the breaker opened (at %v) for a slowness of 250ms, shorter than its %v", o.at, core.DefaultBreakerAfter)
	}
	checkOnce(t, seen, counted(t, lim, "slow"))
	checkGoroutines(t, lim, baseline)
}

// TestFaultKilledConnections: connections killed under load lose replies
// of scripts that ran. go-redis would send such a command again and count
// it twice; the Limiter must not, batched or not, on a single server or a
// cluster.
func TestFaultKilledConnections(t *testing.T) {
	srv := redistest.Standalone(t)
	cl := redistest.NewCluster(t, 3)
	for _, c := range []struct {
		name  string
		rdb   redis.UniversalClient
		addrs []string
	}{
		{"standalone", redis.NewClient(&redis.Options{Addr: srv.Addr}), []string{srv.Addr}},
		{"standalone-direct", redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true}), []string{srv.Addr}},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}), cl.Addrs()},
	} {
		t.Cleanup(func() { c.rdb.Close() })
		for _, batch := range []int{1, core.DefaultBatchSize} {
			t.Run(fmt.Sprintf("%s/batch%d", c.name, batch), func(t *testing.T) {
				baseline := takeGoroutines()
				still := time.Now()
				lim := core.New(c.rdb, core.WithPrefix(uniquePrefix()), core.WithBatchSize(batch),
					core.WithPipelines(8), core.WithBreaker(0), core.WithClock(func() time.Time { return still }))
				killer := killConnections(c.addrs)
				tr := steadyTraffic(lim, 16, "k")
				deadline := time.Now().Add(5 * time.Second)
				for {
					time.Sleep(100 * time.Millisecond)
					tr.mu.Lock()
					_, failed := tally(tr.seen)
					n := len(tr.seen)
					tr.mu.Unlock()
					if (failed >= 20 && n >= 2000) || time.Now().After(deadline) {
						break
					}
				}
				kills := killer()
				seen := tr.stop()
				if _, failed := tally(seen); failed == 0 {
					t.Fatalf("%d kills, yet no decision failed: the test proved nothing", kills)
				}
				checkOnce(t, seen, counted(t, lim, "k"))
				checkGoroutines(t, lim, baseline)
			})
		}
	}
}

// killConnections kills every normal client connection of the servers,
// again and again, until the returned function is called; that returns how
// many connections it killed.
func killConnections(addrs []string) (stop func() int) {
	var kills atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			admin := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
			defer admin.Close()
			for ctx.Err() == nil {
				n, err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Int()
				if err != nil && !strings.Contains(err.Error(), "context canceled") {
					return
				}
				kills.Add(int64(n))
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	return func() int {
		cancel()
		wg.Wait()
		return int(kills.Load())
	}
}
