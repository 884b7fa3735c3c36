package adaptertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// The cases of a request's life: what a policy does after its handler
// returns (WithResponseCost, Concurrency limits).

// work is POST /work with body b, from the suite's client.
func work(h http.Handler, header ...string) *httptest.ResponseRecorder {
	return req{method: http.MethodPost, path: "/work", headers: header}.send(h)
}

// testFailedLoginsCount: WithResponseCost(0 for a success) counts only
// failed attempts: successes are refunded, failures stand.
func testFailedLoginsCount(t *testing.T, a Adapter) {
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") != "right" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "ok")
	})
	onlyFailures := redlimit.WithResponseCost(func(_ *http.Request, status int, _ http.Header) int {
		if status < 400 {
			return 0
		}
		return 1
	})
	limit := core.Limit{Algorithm: core.SlidingLog, Rate: 3, Period: time.Hour}
	h := build(t, a, Spec{Limiter: Embedded(t), Work: &Mw{limit, []redlimit.Option{onlyFailures}}, WorkHandler: login})
	for i := 0; i < 5; i++ {
		expect(t, fmt.Sprintf("good login %d", i+1), work(h, "X-Password", "right"), http.StatusOK, "X-RateLimit-Remaining", "2")
	}
	for i := 0; i < 3; i++ {
		if w := work(h, "X-Password", "wrong"); w.Code != http.StatusUnauthorized {
			t.Fatalf("failed login %d: %d, want 401", i+1, w.Code)
		}
	}
	expect(t, "a fourth failure within the hour", work(h, "X-Password", "wrong"), http.StatusTooManyRequests)
	expect(t, "even a good login now", work(h, "X-Password", "right"), http.StatusTooManyRequests)
}

// testTokensCharged: an LLM-style endpoint reserves an estimate and is
// charged what its handler reports in a header: less refunds, more puts
// the key into debt.
func testTokensCharged(t *testing.T, a Adapter) {
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
		// After the body, as a streaming handler would: too late to be
		// sent, not too late to be read.
		w.Header().Set("X-Tokens-Used", r.Header.Get("X-Will-Use"))
	})
	tokens := redlimit.WithResponseCost(func(_ *http.Request, _ int, h http.Header) int {
		n, err := strconv.Atoi(h.Get("X-Tokens-Used"))
		if err != nil {
			return 10 // the estimate stands
		}
		return n
	})
	limit := core.Limit{Algorithm: core.TokenBucket, Rate: 100, Period: time.Hour}
	h := build(t, a, Spec{Limiter: Embedded(t), Work: &Mw{limit, []redlimit.Option{redlimit.WithCost(10), tokens}}, WorkHandler: llm})
	expect(t, "estimate 10, used 4", work(h, "X-Will-Use", "4"), http.StatusOK, "X-RateLimit-Remaining", "90")
	expect(t, "estimate 10, used 50", work(h, "X-Will-Use", "50"), http.StatusOK, "X-RateLimit-Remaining", "86")
	expect(t, "estimate 10, used 80", work(h, "X-Will-Use", "80"), http.StatusOK, "X-RateLimit-Remaining", "36")
	// 100 - 4 - 50 - 80 = -34 tokens now: a debt every request waits out.
	w := work(h, "X-Will-Use", "1")
	expect(t, "in debt", w, http.StatusTooManyRequests, "X-RateLimit-Remaining", "0")
	// 44 tokens to come back at 100 an hour: 26.4 minutes.
	if ra := w.Header().Get("Retry-After"); ra != "1584" {
		t.Fatalf("Retry-After %s, want 1584 (the debt and the 10 asked for, at 100 an hour)", ra)
	}
}

// testResponseCostBounds: every way a request ends frees its slot, a
// response cost out of bounds included. A cost above the most a request
// may be charged (WithMaxCost; by default the largest a settlement takes)
// is charged that most and logged; a negative one is logged as an invalid
// response cost and the reserved cost stands. Neither is a failed
// decision, nor leaves a Concurrency slot held until its lease ends.
func testResponseCostBounds(t *testing.T, a Adapter) {
	var buf syncBuffer
	lim, _ := embeddedRedis(t, core.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	fromHeader := redlimit.WithResponseCost(func(r *http.Request, _ int, _ http.Header) int {
		n, _ := strconv.Atoi(r.Header.Get("X-Cost"))
		return n
	})
	inFlight := core.Limit{Algorithm: core.Concurrency, Rate: 1, Period: time.Hour}
	h := build(t, a, Spec{Limiter: lim, WorkHandler: ok, Work: &Mw{inFlight, []redlimit.Option{redlimit.WithName("bytes"), fromHeader}}})
	for _, cost := range []string{"5000000000", "-3", "1"} {
		expect(t, "response cost "+cost, work(h, "X-Cost", cost), http.StatusOK)
		expect(t, "after a response cost of "+cost+", the slot is free", work(h, "X-Cost", "0"), http.StatusOK)
	}
	lines := buf.lines()
	if len(lines) != 2 {
		t.Fatalf("log %q; want one line for the cost above the maximum, one for the negative cost", lines)
	}
	for i, want := range [][]string{
		{"level=WARN", "response cost above the maximum", "policy=bytes", "cost=5000000000", "charged=4294967295"},
		{"level=ERROR", "invalid response cost", "policy=bytes", "cost=-3", "reserved=1"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("log line %q does not say %q", lines[i], w)
			}
		}
		if strings.Contains(lines[i], "decision failed") || strings.Contains(lines[i], "fail-open") {
			t.Errorf("log line %q calls a response cost a failed decision", lines[i])
		}
	}

	// WithMaxCost caps a request's charge: 80 tokens used is charged 50.
	tokens := core.Limit{Algorithm: core.TokenBucket, Rate: 100, Period: time.Hour}
	h = build(t, a, Spec{Limiter: lim, WorkHandler: ok, Work: &Mw{tokens, []redlimit.Option{redlimit.WithName("tokens"), fromHeader, redlimit.WithMaxCost(50)}}})
	expect(t, "uses 80", work(h, "X-Cost", "80"), http.StatusOK, "X-RateLimit-Remaining", "99")
	expect(t, "charged 50 of them", work(h, "X-Cost", "1"), http.StatusOK, "X-RateLimit-Remaining", "49")
	if lines := buf.lines(); len(lines) != 3 || !strings.Contains(lines[2], "policy=tokens") || !strings.Contains(lines[2], "cost=80") || !strings.Contains(lines[2], "charged=50") {
		t.Fatalf("log %q; want a third line saying cost=80 was charged=50", lines)
	}
}

// gate is a handler that holds requests until told, and says when each
// has started.
type gate struct {
	started chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan struct{}, 16), release: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.started <- struct{}{}
	select {
	case <-g.release:
	case <-time.After(10 * time.Second):
	}
	io.WriteString(w, "ok")
}

// testInFlight: a Concurrency limit holds a slot per request until its
// handler returns; the next request past the limit is answered 429, with
// a Retry-After no longer than the lease; a slot is free again the moment
// a handler returns.
func testInFlight(t *testing.T, a Adapter) {
	g := newGate()
	h := build(t, a, Spec{Limiter: Embedded(t), WorkHandler: g, Work: &Mw{core.Limit{Algorithm: core.Concurrency, Rate: 2, Period: 30 * time.Second},
		[]redlimit.Option{redlimit.WithHeaders(redlimit.HeadersBoth)}}})
	done := make(chan *httptest.ResponseRecorder, 2)
	for i := 0; i < 2; i++ {
		go func() { done <- work(h) }()
		<-g.started
	}
	w := work(h)
	expect(t, "a third in flight", w, http.StatusTooManyRequests, "X-RateLimit-Limit", "2", "X-RateLimit-Remaining", "0")
	if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); ra < 1 || ra > 30 {
		t.Fatalf("Retry-After %q, want at most the 30 s lease", w.Header().Get("Retry-After"))
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"2 concurrent lease=30s";q=2;qu="concurrent-requests"` {
		t.Fatalf("RateLimit-Policy %q, want the quota unit concurrent-requests", got)
	}
	g.release <- struct{}{}
	expect(t, "the first done", <-done, http.StatusOK)
	go func() { done <- work(h) }()
	<-g.started // a slot was free: admitted
	close(g.release)
	expect(t, "the second done", <-done, http.StatusOK)
	expect(t, "the third done", <-done, http.StatusOK)
}

// testInFlightRules: a rules table's route may hold slots, under its
// catch-all's rate: both decided as one, the slot held until the handler
// returns, a request denied by either charged to neither.
func testInFlightRules(t *testing.T, a Adapter) {
	g := newGate()
	rules := redlimit.Rules{"*": "3/m", "POST /work": "1 concurrent lease=30s"}
	h := build(t, a, Spec{Limiter: Embedded(t), Rules: rules, WorkHandler: g})
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- work(h) }()
	<-g.started
	expect(t, "a second in flight", work(h), http.StatusTooManyRequests, "X-RateLimit-Limit", "1")
	expect(t, "another route, under the catch-all", req{method: http.MethodGet, path: "/ping"}.send(h),
		http.StatusOK, "X-RateLimit-Remaining", "1") // the denied one was charged nothing
	g.release <- struct{}{}
	expect(t, "the first done", <-done, http.StatusOK)
	go func() { done <- work(h) }()
	<-g.started // its slot was freed: admitted, the catch-all's last
	close(g.release)
	expect(t, "the next done", <-done, http.StatusOK)
	expect(t, "the catch-all spent", work(h), http.StatusTooManyRequests, "X-RateLimit-Limit", "3")
}

// testSlotFreedOnPanic: a handler that panics frees its slot, and the
// panic goes on up.
func testSlotFreedOnPanic(t *testing.T, a Adapter) {
	boom := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })
	h := build(t, a, Spec{Limiter: Embedded(t), WorkHandler: boom, Work: &Mw{Limit: core.Limit{Algorithm: core.Concurrency, Rate: 1, Period: time.Hour}}})
	for i := 0; i < 3; i++ {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "boom") {
					t.Fatalf("request %d: recovered %v, want the handler's panic", i+1, r)
				}
			}()
			work(h)
		}()
	}
}

// testSlotFreedClientGone: a client that leaves while its request is
// served frees the slot when the handler returns: the settlement is not
// bound to the request's context.
func testSlotFreedClientGone(t *testing.T, a Adapter) {
	left := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	h := build(t, a, Spec{Limiter: Embedded(t), WorkHandler: left, Work: &Mw{Limit: core.Limit{Algorithm: core.Concurrency, Rate: 1, Period: time.Hour}}})
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		req{method: http.MethodPost, path: "/work", ctx: ctx}.send(h)
		cancel()
	}
	ok := build(t, a, Spec{Limiter: Embedded(t), WorkHandler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		Work: &Mw{Limit: core.Limit{Algorithm: core.Concurrency, Rate: 1, Period: time.Hour}}})
	expect(t, "then a request that stays", work(ok), http.StatusOK, "X-RateLimit-Remaining", "0")
}

// testStreamingAndHijacked: on a real server, a streaming response holds
// its slot until the handler returns, and so does a hijacked connection.
func testStreamingAndHijacked(t *testing.T, a Adapter) {
	hold, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(build(t, a, Spec{Limiter: Embedded(t), WorkHandler: holdingHandler(hold, release),
		Work: &Mw{Limit: core.Limit{Algorithm: core.Concurrency, Rate: 1, Period: time.Hour}}}))
	t.Cleanup(srv.Close)
	for _, kind := range []string{"streaming", "hijacked"} {
		done := make(chan error, 1)
		go func() {
			if kind == "hijacked" {
				done <- upgrade(srv.URL)
				return
			}
			resp, err := post(context.Background(), srv.URL)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			done <- err
		}()
		<-hold
		resp := postWork(t, context.Background(), srv.URL)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: a second request while the first is served: %d, want 429", kind, resp.StatusCode)
		}
		release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := postWork(t, context.Background(), srv.URL, "X-Quick", "1")
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the hijacking handler was released, the slot is still held: %d", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond) // the hijacking handler returns after its client reads
	}
}

// holdingHandler answers "ok" with X-Quick; else it streams a first line
// or, asked to Upgrade, hijacks the connection and greets, then says so
// on hold and waits for release before it returns (a stream after writing
// its last line).
func holdingHandler(hold chan<- struct{}, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Quick") != "" {
			io.WriteString(w, "ok")
			return
		}
		if r.Header.Get("Upgrade") != "" {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\nhello\n")
			rw.Flush()
			hold <- struct{}{}
			<-release
			return
		}
		io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		hold <- struct{}{}
		<-release
		io.WriteString(w, "last\n")
	})
}

// upgrade sends an Upgrade request over a raw connection and reads the
// hijacking handler's greeting.
func upgrade(url string) error {
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /work HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\nContent-Length: 0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return fmt.Errorf("upgrade: %d", resp.StatusCode)
	}
	return nil
}

// testZeroLimiter: a nil or zero *core.Limiter, which cannot decide, is
// refused when the middleware is built (New panics, Rules errs), with a
// message that says to create it with core.New, rather than failing every
// request open.
func testZeroLimiter(t *testing.T, a Adapter) {
	for _, lim := range []*core.Limiter{nil, {}} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "core.New") {
					t.Errorf("New on the Limiter %p: recovered %v; want a panic saying core.New", lim, r)
				}
			}()
			a.App(Spec{Limiter: lim, Global: &Mw{Limit: core.PerMinute(1)}})
		}()
		if _, err := a.App(Spec{Limiter: lim, Rules: redlimit.Rules{"*": "1/m"}}); err == nil || !strings.Contains(err.Error(), "core.New") {
			t.Errorf("Rules on the Limiter %p: %v; want refused, saying core.New", lim, err)
		}
	}
}
