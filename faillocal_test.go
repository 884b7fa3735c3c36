package redlimit_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestFailLocalShared: 4 instances (Limiters of their own, each with a
// FailLocal policy of 40 a minute, burst 40) share one Redis. Once their
// heartbeats have counted each other, Redis goes away, and every instance
// keeps serving requests of one client: together they admit at most the
// documented bound, the burst plus the rate over the outage plus one per
// instance (docs/faults.md), not 4 times the burst. Without sharing
// (an instance that never reached Redis) each admits the whole burst.
// A request that costs more than an instance's share of the burst can
// never pass there: it is told to retry after the limit's period, not
// after InfDuration's 9223372036 seconds.
func TestFailLocalShared(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	limit := core.Limit{Rate: 40, Period: time.Minute}
	const instances = 4
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var policies, costly []redlimit.Policy
	for range instances {
		// A refused connection fails at once: each request is decided
		// locally without waiting.
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		lim := core.New(rdb, core.WithTimeout(time.Second), core.WithLogger(quiet))
		policies = append(policies, mustPolicy(t, lim, limit, redlimit.WithFailure(redlimit.FailLocal), redlimit.WithName("shared")))
		costly = append(costly, mustPolicy(t, lim, limit, redlimit.WithFailure(redlimit.FailLocal), redlimit.WithName("costly"), redlimit.WithCost(20)))
	}
	// Two rounds of requests a second and more apart: the first heartbeats
	// see only the instances before them, the second ones all four.
	admin := srv.Client(t)
	for round := 0; round < 2; round++ {
		for i, p := range policies {
			if d, _ := decide(p, "192.0.2.9:1"); d.Outcome != redlimit.OutcomeAllowed {
				t.Fatalf("round %d, instance %d, Redis up: %+v", round, i, d)
			}
		}
		time.Sleep(1100 * time.Millisecond)
	}
	if n, err := admin.ZCard(context.Background(), "redlimit:{peers}").Result(); err != nil || n != instances {
		t.Fatalf("the heartbeat set holds %d instances (%v), want %d", n, err, instances)
	}
	srv.Stop()
	began := time.Now()
	admitted := 0
	for i := 0; i < 400 && time.Since(began) < 2*time.Second; i++ {
		d, _ := decide(policies[i%instances], "192.0.2.9:1")
		if d.Outcome != redlimit.OutcomeLocal {
			t.Fatalf("request %d with Redis stopped: %+v, want a local decision", i, d)
		}
		if d.Allowed() {
			admitted++
		}
		time.Sleep(time.Millisecond)
	}
	outage := time.Since(began)
	bound := limit.Capacity() + int(float64(limit.Rate)*outage.Seconds()/limit.Period.Seconds()) + instances
	if admitted > bound {
		t.Fatalf("%d instances admitted %d over an outage of %v; the bound is %d (burst %d + rate over the outage + %d)",
			instances, admitted, outage.Round(time.Millisecond), bound, limit.Capacity(), instances)
	}
	if admitted < limit.Capacity()-instances {
		t.Fatalf("%d instances admitted %d over an outage of %v; each should have admitted its quarter of the burst %d",
			instances, admitted, outage.Round(time.Millisecond), limit.Capacity())
	}
	// 20 is above an instance's share of the burst, 40/4.
	d, w := decide(costly[0], "192.0.2.9:1")
	if d.Outcome != redlimit.OutcomeLocal || d.Allowed() || d.Result.RetryAfter != core.InfDuration || w.Header().Get("Retry-After") != "60" {
		t.Errorf("a cost above the share: %+v, Retry-After %q; want denied locally, RetryAfter InfDuration, Retry-After 60 (the period)", d, w.Header().Get("Retry-After"))
	}
	t.Logf("%d instances admitted %d of one client's requests over an outage of %v (bound %d; unshared, %d)",
		instances, admitted, outage.Round(time.Millisecond), bound, instances*limit.Capacity())
}

// TestFailLocalBudget: with Redis gone, a FailLocal policy with a budget
// charges each request its estimate in process, as Redis would have, not
// the request's cost of 1: at 1000 tokens a minute and 300 a request,
// three requests pass and the fourth is denied. With TakeRest the fourth
// takes the last 100 tokens, and the fifth is denied.
func TestFailLocalBudget(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: every decision fails at once
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tokens := core.Limit{Rate: 1000, Period: time.Minute, Unit: "tokens"}
	for _, takeRest := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		lim := core.New(rdb, core.WithTimeout(time.Second), core.WithLogger(quiet))
		p := mustPolicy(t, lim, core.Limit{Rate: 100, Period: time.Minute},
			redlimit.WithFailure(redlimit.FailLocal),
			redlimit.WithBudget(redlimit.Budget{
				Limits:   []core.Limit{tokens},
				Estimate: func(*http.Request) int { return 300 },
				TakeRest: takeRest,
			}))
		want := []int{http.StatusOK, http.StatusOK, http.StatusOK, http.StatusTooManyRequests}
		if takeRest {
			want = []int{http.StatusOK, http.StatusOK, http.StatusOK, http.StatusOK, http.StatusTooManyRequests}
		}
		for i, status := range want {
			d, w := decide(p, "192.0.2.7:1")
			if d.Outcome != redlimit.OutcomeLocal || w.Code != status {
				t.Fatalf("TakeRest %v, request %d: outcome %v, status %d; want a local decision, %d", takeRest, i+1, d.Outcome, w.Code, status)
			}
		}
	}
}

// TestFailLocalQuota: a quota sold by the month holds through an outage
// under FailLocal. Three instances share one Redis and a policy of 60 a
// month (calendar); a tenant has used half of it when Redis goes away,
// and keeps sending requests to every instance. In process, each
// instance admits only the outage's share of the quota (rate × outage ÷
// period, a minute's more: nothing in an outage of seconds), not a fresh
// month of its own: before, the three admitted 60 more, 90 in the month.
func TestFailLocalQuota(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	monthly, err := core.ParseLimit("60/month calendar")
	if err != nil {
		t.Fatal(err)
	}
	const instances = 3
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var policies []redlimit.Policy
	for range instances {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		lim := core.New(rdb, core.WithTimeout(time.Second), core.WithLogger(quiet))
		policies = append(policies, mustPolicy(t, lim, monthly, redlimit.WithFailure(redlimit.FailLocal), redlimit.WithName("plan")))
	}
	// Half the month used, in two rounds a second and more apart, so that
	// the heartbeats count all three instances.
	for round := 0; round < 2; round++ {
		for i := range monthly.Rate / 4 {
			p := policies[i%instances]
			if d, _ := decide(p, "192.0.2.10:1"); d.Outcome != redlimit.OutcomeAllowed {
				t.Fatalf("round %d, request %d, Redis up: %+v", round, i, d)
			}
		}
		if round == 0 {
			time.Sleep(1100 * time.Millisecond)
		}
	}
	srv.Stop()
	began := time.Now()
	admitted, asked, longest := 0, 0, ""
	for ; asked < 300 && time.Since(began) < 2*time.Second; asked++ {
		d, w := decide(policies[asked%instances], "192.0.2.10:1")
		if d.Outcome != redlimit.OutcomeLocal {
			t.Fatalf("request %d with Redis stopped: %+v, want a local decision", asked, d)
		}
		if d.Allowed() {
			admitted++
		} else if ra := w.Header().Get("Retry-After"); ra == "" || len(ra) > 2 {
			longest = ra
		}
		time.Sleep(time.Millisecond)
	}
	outage := time.Since(began)
	t.Logf("%d instances, %v with 30 used: %d of %d requests admitted over an outage of %v", instances, monthly, admitted, asked, outage.Round(time.Millisecond))
	if longest != "" {
		t.Errorf("a local denial of the monthly quota: Retry-After %q; want at most a minute: Redis may answer sooner", longest)
	}
	// The outage's share and a minute's: under 1 in all for seconds of a month.
	most := int(float64(monthly.Rate) * (outage + time.Minute).Seconds() / monthly.Period.Seconds())
	if admitted > most {
		t.Fatalf("%d instances admitted %d requests of a tenant whose %v was half used, over an outage of %v; the outage's share is %d",
			instances, admitted, monthly, outage.Round(time.Millisecond), most)
	}
}

// TestLimitFailure: each limit of a policy fails its own way
// (WithLimitFailure). A rate of 10 a second and a quota of 60 a month;
// Redis refuses every connection. The rate kept in process and the
// quota failing closed: 503, and nothing admitted. The quota failing
// open: the rate holds in process (10 at once, the 11th denied 429 by
// the rate), the quota is not enforced until Redis answers. Both in
// process (FailLocal alone): the quota admits only the outage's share,
// nothing. A dry run passes whatever the limits say, and a value that is
// not a Failure is read as WithFailure's.
func TestLimitFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: every decision fails at once
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	monthly, err := core.ParseLimit("60/month calendar")
	if err != nil {
		t.Fatal(err)
	}
	quota := func(f redlimit.Failure) redlimit.Option {
		return redlimit.WithLimitFailure(func(l core.Limit) redlimit.Failure {
			if l.Period > time.Hour {
				return f
			}
			return redlimit.FailLocal
		})
	}
	for _, c := range []struct {
		name string
		opts []redlimit.Option
		want []int // the statuses of 11 requests at once
		out  redlimit.Outcome
	}{
		{"rate local, quota closed", []redlimit.Option{quota(redlimit.FailClosed)}, repeat(11, http.StatusServiceUnavailable), redlimit.OutcomeError},
		{"rate local, quota open", []redlimit.Option{quota(redlimit.FailOpen)}, append(repeat(10, http.StatusOK), http.StatusTooManyRequests), redlimit.OutcomeLocal},
		{"FailOpen, the rate local", []redlimit.Option{redlimit.WithFailure(redlimit.FailOpen), redlimit.WithLimitFailure(func(l core.Limit) redlimit.Failure {
			if l.Period == time.Second {
				return redlimit.FailLocal
			}
			return redlimit.FailOpen
		})}, append(repeat(10, http.StatusOK), http.StatusTooManyRequests), redlimit.OutcomeLocal},
		{"both local", []redlimit.Option{redlimit.WithFailure(redlimit.FailLocal)}, repeat(11, http.StatusTooManyRequests), redlimit.OutcomeLocal},
		{"dry run", []redlimit.Option{quota(redlimit.FailClosed), redlimit.WithDryRun()}, repeat(11, http.StatusOK), redlimit.OutcomeError},
		{"not a Failure", []redlimit.Option{redlimit.WithFailure(redlimit.FailClosed), redlimit.WithLimitFailure(func(core.Limit) redlimit.Failure { return 7 })},
			repeat(11, http.StatusServiceUnavailable), redlimit.OutcomeError},
	} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		lim := core.New(rdb, core.WithTimeout(time.Second), core.WithLogger(quiet), core.WithBreaker(0))
		opts := append([]redlimit.Option{redlimit.WithAlso(monthly)}, c.opts...)
		p := mustPolicy(t, lim, core.PerSecond(10), opts...)
		for i, status := range c.want {
			d, w := decide(p, "192.0.2.11:1")
			if w.Code != status || d.Outcome != c.out || d.Err == nil {
				t.Fatalf("%s, request %d: status %d, %+v; want %d, outcome %s, the error", c.name, i+1, w.Code, d, status, c.out)
			}
			switch {
			case status == http.StatusTooManyRequests && c.name != "both local":
				if got := w.Header().Get("X-RateLimit-Limit"); got != "10" || d.Result.Limit != core.PerSecond(10) {
					t.Errorf("%s: a denial by the rate in process: X-RateLimit-Limit %q, binding %v; want the rate's", c.name, got, d.Result.Limit)
				}
			case status == http.StatusTooManyRequests:
				if ra := w.Header().Get("Retry-After"); d.Result.Limit != monthly || ra == "" || len(ra) > 2 {
					t.Errorf("%s: the quota's outage share denies, within a minute: binding %v, Retry-After %q", c.name, d.Result.Limit, ra)
				}
			case status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") != "1":
				t.Errorf("%s: 503 with Retry-After %q, want 1", c.name, w.Header().Get("Retry-After"))
			}
		}
	}
}

// repeat returns n copies of status.
func repeat(n, status int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = status
	}
	return s
}
