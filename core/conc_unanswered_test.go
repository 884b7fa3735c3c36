package core_test

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// A reserving decision that fails after it may have reached Redis (its
// caller's context ended, its timeout passed, its reply was lost) must not
// hold slots: the caller got an error and will free nothing, and the
// lease is for holders that died, not for callers that are alive. The
// Limiter frees such slots in the background and counts the decisions in
// Stats.UnansweredReservations (issue 32, defect 1).

// awaitAllFree waits, at most 5 s, until every slot of l on key is free
// (peek reads without the deny cache), and fails the test if one is not.
func awaitAllFree(t *testing.T, peek *core.Limiter, key string, l core.Limit) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		free := freeSlots(t, peek, key, l)
		if free == l.Rate {
			return time.Since(start)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d of %d slots of %q still held 5 s after every request ended; want all free", l.Rate-free, l.Rate, key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUnansweredReservationCancelled: Reserve calls whose contexts end 0
// to 300 µs after they start, as requests whose clients hang up at once,
// leave no slot held once they have ended: 50 concurrent slots with a
// minute's lease are all free within seconds. Real redis-server, the
// README's client (ContextTimeoutEnabled) and go-redis's defaults.
func TestUnansweredReservationCancelled(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	l := concLimit(t, "50 concurrent lease=1m")
	for _, direct := range []bool{true, false} {
		prefix := uniquePrefix()
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: direct})
		t.Cleanup(func() { rdb.Close() })
		lim := core.New(rdb, core.WithPrefix(prefix), core.WithLogger(slog.New(slog.DiscardHandler)))
		peek := core.New(srv.Client(t), patient, core.WithPrefix(prefix), core.WithDenyCache(0))
		var wg sync.WaitGroup
		var failed atomic.Int64
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for range 100 {
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(time.Duration(rng.IntN(300))*time.Microsecond, cancel)
					r, err := lim.Reserve(ctx, "export", []core.Limit{l}, 1)
					cancel()
					switch {
					case err != nil:
						failed.Add(1)
					case r.Result().Allowed:
						if err := r.Release(context.Background()); err != nil {
							t.Errorf("release: %v", err)
						}
					}
				}
			}()
		}
		wg.Wait()
		took := awaitAllFree(t, peek, "export", l)
		st := lim.Stats()
		t.Logf("direct=%v: %d of 800 Reserve calls failed, %d unanswered, %d releases retried, %d abandoned; all free %v after the last ended",
			direct, failed.Load(), st.UnansweredReservations, st.RetriedReleases, st.AbandonedReleases, took.Round(time.Millisecond))
		if st.AbandonedReleases != 0 {
			t.Errorf("%+v: want no release abandoned", st)
		}
	}
}

// lostReplies is a go-redis hook that lets script calls reach Redis and
// then loses their replies (an error, as a connection reset after the
// script ran would give), while on.
type lostReplies struct{ on atomic.Bool }

func (h *lostReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.on.Load() && isScriptCmd(cmd) {
			cmd.SetErr(errReplyLost)
			return errReplyLost
		}
		return err
	}
}

func (h *lostReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.on.Load() {
			for _, cmd := range cmds {
				if isScriptCmd(cmd) {
					cmd.SetErr(errReplyLost)
					err = errReplyLost
				}
			}
		}
		return err
	}
}

var errReplyLost = errors.New("injected: the reply was lost")

// TestUnansweredReservationLostReply: a Reserve whose script ran and whose
// reply was lost returns the error; the slot its script took is freed in
// the background, and Stats says so; the rate limit reserved with it
// stays charged (at most once: the decision may have counted).
func TestUnansweredReservationLostReply(t *testing.T) {
	t.Parallel()
	for _, b := range backends[:2] { // miniredis, standalone
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			w := b.start(t)(t)
			hook := &lostReplies{}
			rdb := w.newClient()
			rdb.AddHook(hook)
			lim := core.New(rdb, append(w.opts[:len(w.opts):len(w.opts)], core.WithLogger(slog.New(slog.DiscardHandler)))...)
			peek := core.New(w.newClient(), append(w.opts[:len(w.opts):len(w.opts)], core.WithDenyCache(0))...)
			conc, rate := concLimit(t, "2 concurrent lease=1h"), core.PerHour(10)
			release(t, concReserve(t, lim, "warm", []core.Limit{conc, rate}, 1)) // the script is loaded: no NOSCRIPT
			hook.on.Store(true)
			if _, err := lim.Reserve(context.Background(), "job", []core.Limit{conc, rate}, 1); !errors.Is(err, errReplyLost) {
				t.Fatalf("Reserve with its reply lost: %v, want the lost reply's error", err)
			}
			hook.on.Store(false)
			awaitAllFree(t, peek, "job", conc)
			if left := allowN(t, peek, "job", rate, 0).Remaining; left != 9 {
				t.Fatalf("the rate limit has %d of 10 left; want 9: the decision ran, and counted once", left)
			}
			deadline := time.Now().Add(5 * time.Second)
			st := lim.Stats()
			for st.RetriedReleases == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
				st = lim.Stats()
			}
			if st.UnansweredReservations != 1 || st.RetriedReleases != 1 || st.AbandonedReleases != 0 {
				t.Fatalf("%+v: want 1 unanswered reservation, its release retried, none abandoned", st)
			}
		})
	}
}

// TestUnansweredReservationStall: 8 workers reserve and release slots of a
// "20 concurrent lease=1m" limit while redis-server stops (SIGSTOP) for
// 400 ms; decisions time out at 100 ms, some after they were written to
// the stopped server. Once the workers are done, every slot is free
// within seconds, and the Limiter's goroutines go away. Not parallel: it
// counts goroutines.
func TestUnansweredReservationStall(t *testing.T) {
	srv := redistest.Standalone(t)
	baseline := takeGoroutines()
	prefix := uniquePrefix()
	l := concLimit(t, "20 concurrent lease=1m")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithPrefix(prefix), core.WithLogger(slog.New(slog.DiscardHandler)), core.WithLinger(10*time.Millisecond))
	peek := core.New(srv.Client(t), patient, core.WithPrefix(prefix), core.WithDenyCache(0), core.WithLinger(10*time.Millisecond))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var failed atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := lim.Reserve(context.Background(), "k", []core.Limit{l}, 1)
				if err != nil {
					failed.Add(1)
					time.Sleep(time.Millisecond)
					continue
				}
				if r.Result().Allowed {
					_ = r.Release(context.Background()) // a failed release is retried in the background too
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	srv.Pause()
	time.Sleep(400 * time.Millisecond)
	srv.Resume()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	took := awaitAllFree(t, peek, "k", l)
	st := lim.Stats()
	t.Logf("%d decisions failed; %+v; all free %v after the workers stopped", failed.Load(), st, took.Round(time.Millisecond))
	checkGoroutines(t, lim, baseline)
}
