package adaptertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// The cases of budgets (redlimit.WithBudget): requests and tokens in one
// decision, each request reserving an estimate of tokens and charged what
// it used.

// tokensHandler is POST /work of an AI-style API: it answers "ok" and says
// in X-Tokens-Used the tokens the request's X-Use header asks it to have
// used (after the body, as a streaming handler would).
var tokensHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "ok")
	w.Header().Set("X-Tokens-Used", r.Header.Get("X-Use"))
})

// headerInt reads an integer header of r, or def.
func headerInt(h http.Header, name string, def int) int {
	n, err := strconv.Atoi(h.Get(name))
	if err != nil {
		return def
	}
	return n
}

// tokenBudget is a budget of limits whose estimate is a request's
// X-Estimate and whose cost is its handler's X-Tokens-Used.
func tokenBudget(t *testing.T, limits string) redlimit.Budget {
	l, err := core.ParseLimits(limits)
	if err != nil {
		t.Fatal(err)
	}
	return redlimit.Budget{
		Limits:   l,
		Estimate: func(r *http.Request) int { return headerInt(r.Header, "X-Estimate", 0) },
		Cost: func(r *http.Request, _ int, h http.Header) int {
			return headerInt(h, "X-Tokens-Used", headerInt(r.Header, "X-Estimate", 0)) // unknown: the estimate
		},
	}
}

// testBudgetDenials: a request the token limit denies is charged no
// request, and one the request limit denies no tokens; the headers of
// both 429s, verbatim, in both profiles.
func testBudgetDenials(t *testing.T, a Adapter) {
	opts := []redlimit.Option{redlimit.WithName("api"), redlimit.WithHeaders(redlimit.HeadersBoth),
		redlimit.WithBudget(tokenBudget(t, "1000/m unit=tokens"))}
	h := build(t, a, Spec{Limiter: Embedded(t), WorkHandler: tokensHandler, Work: &Mw{core.PerMinute(3), opts}})
	expect(t, "estimate 600, used 900", work(h, "X-Estimate", "600", "X-Use", "900"), http.StatusOK,
		"X-RateLimit-Limit", "3", "X-RateLimit-Remaining", "2",
		"RateLimit-Policy", `"api";q=3;w=60, "api-1m-tokens";q=1000;qu="tokens";w=60`,
		"RateLimit", `"api";r=2;t=20, "api-1m-tokens";r=400;t=1`)
	// 100 tokens left: an estimate of 200 is denied by the tokens.
	w := work(h, "X-Estimate", "200", "X-Use", "1")
	expect(t, "estimate 200, 100 tokens left", w, http.StatusTooManyRequests,
		"X-RateLimit-Limit", "1000", "X-RateLimit-Remaining", "100", "X-RateLimit-Reset", "54", "Retry-After", "6",
		"RateLimit-Policy", `"api";q=3;w=60, "api-1m-tokens";q=1000;qu="tokens";w=60`,
		"RateLimit", `"api";r=2, "api-1m-tokens";r=100;t=1`) // the requests' t=20 is later than Retry-After
	logHeaders(t, "a 429 from the token limit", w)
	// Charged no request: two are left, and a request of 100 tokens passes.
	expect(t, "estimate 100", work(h, "X-Estimate", "100", "X-Use", "100"), http.StatusOK,
		"X-RateLimit-Remaining", "0", "X-RateLimit-Limit", "1000",
		"RateLimit", `"api";r=1;t=20, "api-1m-tokens";r=0;t=1`)
	expect(t, "estimate 0", work(h, "X-Estimate", "0", "X-Use", "0"), http.StatusOK,
		"RateLimit", `"api";r=0;t=20, "api-1m-tokens";r=0;t=1`)
	// The requests are spent: denied by them, charged no tokens.
	w = work(h, "X-Estimate", "0", "X-Use", "0")
	expect(t, "a fourth request", w, http.StatusTooManyRequests,
		"X-RateLimit-Limit", "3", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "60", "Retry-After", "20",
		"RateLimit-Policy", `"api";q=3;w=60, "api-1m-tokens";q=1000;qu="tokens";w=60`,
		"RateLimit", `"api";r=0;t=20, "api-1m-tokens";r=0;t=1`)
	logHeaders(t, "a 429 from the request limit", w)
}

// logHeaders logs the rate-limit fields of w, for the record.
func logHeaders(t *testing.T, what string, w *httptest.ResponseRecorder) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d\n", what, w.Code)
	for _, name := range []string{"Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit"} {
		for _, v := range w.Header().Values(name) {
			fmt.Fprintf(&b, "%s: %s\n", name, v)
		}
	}
	t.Log(b.String())
}

// testBudgetSettles: the settlement moves only the limits whose cost
// changed: tokens used beyond the estimate leave the requests untouched,
// tokens below it are refunded, and a cost function's -1 (nothing known)
// lets the estimate stand.
func testBudgetSettles(t *testing.T, a Adapter) {
	opts := []redlimit.Option{redlimit.WithName("s"), redlimit.WithHeaders(redlimit.HeadersDraft),
		redlimit.WithBudget(tokenBudget(t, "1000/h fixed_window unit=tokens"))}
	h := build(t, a, Spec{Limiter: Embedded(t), WorkHandler: tokensHandler,
		Work: &Mw{core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Hour}, opts}})
	expect(t, "estimate 100, used 300", work(h, "X-Estimate", "100", "X-Use", "300"), http.StatusOK,
		"RateLimit", `"s";r=9;t=3600, "s-1h-tokens";r=900;t=3600`)
	expect(t, "estimate 100, used 10", work(h, "X-Estimate", "100", "X-Use", "10"), http.StatusOK,
		"RateLimit", `"s";r=8;t=3600, "s-1h-tokens";r=600;t=3600`) // 1000 - 300 - 100
	expect(t, "estimate 50, used unknown", work(h, "X-Estimate", "50"), http.StatusOK,
		"RateLimit", `"s";r=7;t=3600, "s-1h-tokens";r=640;t=3600`) // the 90 refunded, 50 reserved
	expect(t, "estimate 0", work(h, "X-Estimate", "0", "X-Use", "0"), http.StatusOK,
		"RateLimit", `"s";r=6;t=3600, "s-1h-tokens";r=640;t=3600`) // the 50 stood; each request one
}

// testBudgetCap: Budget.MaxCost caps what a request reserves and is
// charged, and says so in the log; never an error, never 400.
func testBudgetCap(t *testing.T, a Adapter) {
	var buf syncBuffer
	lim, _ := embeddedRedis(t, core.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	b := tokenBudget(t, "1000/h fixed_window unit=tokens")
	b.MaxCost = 200
	opts := []redlimit.Option{redlimit.WithName("cap"), redlimit.WithHeaders(redlimit.HeadersDraft), redlimit.WithBudget(b)}
	h := build(t, a, Spec{Limiter: lim, WorkHandler: tokensHandler, Work: &Mw{core.PerHour(100), opts}})
	expect(t, "estimate 500, used 700", work(h, "X-Estimate", "500", "X-Use", "700"), http.StatusOK,
		"RateLimit", `"cap";r=99;t=36, "cap-1h-tokens";r=800;t=3600`) // reserved 200
	expect(t, "charged 200", work(h, "X-Estimate", "0", "X-Use", "0"), http.StatusOK,
		"RateLimit", `"cap";r=98;t=36, "cap-1h-tokens";r=800;t=3600`)
	lines := buf.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "estimate=500") || !strings.Contains(lines[0], "reserved=200") {
		t.Fatalf("log %q; want one line for the estimate of 500 reserved at 200 (the cost's, a second later)", lines)
	}
	time.Sleep(1100 * time.Millisecond) // one line a second
	expect(t, "used 5000", work(h, "X-Estimate", "10", "X-Use", "5000"), http.StatusOK)
	expect(t, "charged 200", work(h, "X-Estimate", "0", "X-Use", "0"), http.StatusOK,
		"RateLimit", `"cap";r=96;t=36, "cap-1h-tokens";r=600;t=3600`)
	if lines = buf.lines(); len(lines) != 2 || !strings.Contains(lines[1], "cost=5000") || !strings.Contains(lines[1], "charged=200") || !strings.Contains(lines[1], "level=WARN") {
		t.Fatalf("log %q; want a second line saying cost=5000 was charged=200", lines)
	}
}

// testBudgetLastTokens: with TakeRest, a request whose estimate exceeds
// what is left is admitted against what is left, and charged its true
// cost after (a debt); with nothing left it is denied, charged nothing.
// Without it, the same request is denied.
func testBudgetLastTokens(t *testing.T, a Adapter) {
	for _, rest := range []bool{false, true} {
		b := tokenBudget(t, "100/h unit=tokens")
		b.TakeRest = rest
		name := fmt.Sprintf("rest-%v", rest)
		opts := []redlimit.Option{redlimit.WithName(name), redlimit.WithHeaders(redlimit.HeadersDraft), redlimit.WithBudget(b)}
		h := build(t, a, Spec{Limiter: Embedded(t), WorkHandler: tokensHandler,
			Work: &Mw{core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Hour}, opts}})
		expect(t, name+": 80 of 100", work(h, "X-Estimate", "80", "X-Use", "80"), http.StatusOK)
		w := work(h, "X-Estimate", "50", "X-Use", "50")
		if !rest {
			expect(t, name+": 50 with 20 left", w, http.StatusTooManyRequests)
			continue
		}
		expect(t, name+": 50 with 20 left, the last 20 reserved", w, http.StatusOK,
			"RateLimit", fmt.Sprintf(`"%s";r=8;t=3600, "%s-1h-tokens";r=0;t=36`, name, name))
		// Used 50: 30 of debt, then nothing is left: denied, charged nothing.
		w = work(h, "X-Estimate", "50", "X-Use", "50")
		expect(t, name+": in debt", w, http.StatusTooManyRequests, "Retry-After", "1116",
			"RateLimit", fmt.Sprintf(`"%s";r=8, "%s-1h-tokens";r=0;t=1116`, name, name))
	}
}

// sse is POST /work as a server-sent event stream: n events (X-Events),
// each reporting 10 tokens to the request's Usage as it is produced, and
// flushed; it stops when its client leaves. It counts what it produced in
// produced, and says on done when it returns.
type sse struct {
	produced atomic.Int64
	done     chan struct{}
}

func (s *sse) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() { s.done <- struct{}{} }()
	if r.Header.Get("X-Quick") != "" {
		io.WriteString(w, "ok")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	usage := redlimit.UsageFrom(r.Context())
	for i := range headerInt(r.Header, "X-Events", 0) {
		if r.Context().Err() != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "data: token %d\n\n", i); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		usage.Add("tokens", 10)
		s.produced.Add(1)
		time.Sleep(5 * time.Millisecond)
	}
}

// testBudgetStream: a streaming response (SSE on a real server) is settled
// when its handler returns, at what it reported to its Usage, and a
// client that leaves mid-stream is charged what was produced.
func testBudgetStream(t *testing.T, a Adapter) {
	s := &sse{done: make(chan struct{}, 4)}
	base := sseServer(t, a, s)
	tokensLeft := func() string {
		resp := postWork(t, context.Background(), base, "X-Quick", "1")
		resp.Body.Close()
		<-s.done
		return resp.Header.Get("RateLimit")
	}

	// To the end: 20 events, 200 tokens, where 100 were reserved.
	resp := postWork(t, context.Background(), base, "X-Events", "20")
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-s.done
	if got, want := tokensLeft(), `"sse";r=98;t=36, "sse-1h-tokens";r=99800;t=3600`; got != want {
		t.Fatalf("after a stream of 200 tokens: RateLimit %q, want %q", got, want)
	}

	// The client leaves after 3 events of 1000: charged what was produced.
	s.produced.Store(0)
	ctx, cancel := context.WithCancel(context.Background())
	hangUpAfter(t, postWork(t, ctx, base, "X-Events", "1000"), cancel, 3)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's handler did not return 10 s after its client left")
	}
	produced := s.produced.Load()
	if produced < 3 || produced >= 1000 {
		t.Fatalf("%d events produced; want at least the 3 read, and not all 1000", produced)
	}
	// Settled after its handler returned: soon.
	awaitRateLimit(t, fmt.Sprintf("after a client left a stream of %d events", produced),
		fmt.Sprintf(`"sse-1h-tokens";r=%d;t=3600`, 100000-200-10*produced), tokensLeft)
}

// sseServer starts a real server of a's app whose POST /work is s, under a
// budget of 100 000 tokens an hour, each request reserving 100 (0 with
// X-Quick), and returns its URL.
func sseServer(t *testing.T, a Adapter, s *sse) string {
	b := redlimit.Budget{Limits: []core.Limit{{Algorithm: core.FixedWindow, Rate: 100000, Period: time.Hour, Unit: "tokens"}},
		Estimate: func(r *http.Request) int {
			if r.Header.Get("X-Quick") != "" {
				return 0
			}
			return 100
		}}
	opts := []redlimit.Option{redlimit.WithName("sse"), redlimit.WithHeaders(redlimit.HeadersDraft), redlimit.WithBudget(b)}
	srv := httptest.NewServer(build(t, a, Spec{Limiter: Embedded(t), WorkHandler: s, Work: &Mw{core.PerHour(100), opts}}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// postWork sends POST /work, with the header pairs, to the server at base,
// ending the test if it cannot.
func postWork(t *testing.T, ctx context.Context, base string, header ...string) *http.Response {
	resp, err := post(ctx, base, header...)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// post sends POST /work, with the header pairs, to the server at base.
func post(ctx context.Context, base string, header ...string) (*http.Response, error) {
	r, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/work", nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return http.DefaultClient.Do(r)
}

// hangUpAfter reads the first events of resp's event stream, then leaves:
// it cancels the request's context and closes the body.
func hangUpAfter(t *testing.T, resp *http.Response, cancel context.CancelFunc, events int) {
	rd := bufio.NewReader(resp.Body)
	for i := 0; i < events; i++ {
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		rd.ReadString('\n')
	}
	cancel()
	resp.Body.Close()
}

// awaitRateLimit calls rateLimit, which sends a request and returns its
// RateLimit field, every 10 ms until the field ends with want; after 5 s
// it ends the test, saying what.
func awaitRateLimit(t *testing.T, what, want string, rateLimit func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := rateLimit()
		if strings.HasSuffix(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: RateLimit %q, want it to end %q", what, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testBudgetPanic: a handler that panics, with http.ErrAbortHandler or
// anything else, is settled at what it reported to its Usage, as when it
// returns, and the panic goes on up through the framework.
func testBudgetPanic(t *testing.T, a Adapter) {
	for _, value := range []any{http.ErrAbortHandler, "boom"} {
		name := "abort"
		if value == "boom" {
			name = "boom"
		}
		panicking := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Use") == "" {
				io.WriteString(w, "ok")
				return
			}
			redlimit.UsageFrom(r.Context()).Add("tokens", headerInt(r.Header, "X-Use", 0))
			panic(value)
		})
		b := redlimit.Budget{Limits: []core.Limit{{Algorithm: core.FixedWindow, Rate: 1000, Period: time.Hour, Unit: "tokens"}},
			Estimate: func(r *http.Request) int { return headerInt(r.Header, "X-Estimate", 0) }}
		opts := []redlimit.Option{redlimit.WithName(name), redlimit.WithHeaders(redlimit.HeadersDraft), redlimit.WithBudget(b)}
		h := build(t, a, Spec{Limiter: Embedded(t), WorkHandler: panicking,
			Work: &Mw{core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: time.Hour}, opts}})
		func() {
			defer func() {
				if r := recover(); r != value {
					t.Fatalf("%s: recovered %v, want the handler's panic", name, r)
				}
			}()
			work(h, "X-Estimate", "100", "X-Use", "300")
		}()
		expect(t, name+": after a panic that reported 300 of an estimate of 100", work(h, "X-Estimate", "0"), http.StatusOK,
			"RateLimit", fmt.Sprintf(`"%s";r=98;t=3600, "%s-1h-tokens";r=700;t=3600`, name, name))
		func() {
			defer func() { recover() }()
			work(h, "X-Estimate", "100", "X-Use", "0")
		}()
		expect(t, name+": after a panic that reported 0", work(h, "X-Estimate", "0"), http.StatusOK,
			"RateLimit", fmt.Sprintf(`"%s";r=96;t=3600, "%s-1h-tokens";r=700;t=3600`, name, name))
	}
}

// meter is a proxied response's body that reports 10 tokens to usage for
// every byte read from the backend, and adds them up in reported.
type meter struct {
	io.ReadCloser
	usage    *redlimit.Usage
	reported *atomic.Int64
}

func (m *meter) Read(p []byte) (int, error) {
	n, err := m.ReadCloser.Read(p)
	m.usage.Add("tokens", 10*n)
	m.reported.Add(int64(10 * n))
	return n, err
}

// testBudgetProxy: a stream served through httputil.ReverseProxy, whose
// tokens are reported as the proxy reads them, is charged what was
// reported when it is read to its end, and when its client hangs up
// mid-stream, which ReverseProxy answers with panic(http.ErrAbortHandler).
func testBudgetProxy(t *testing.T, a Adapter) {
	var reported atomic.Int64
	done := make(chan struct{}, 4)
	base := proxyServer(t, a, &reported, done)
	// ended waits until the proxy's handler has ended.
	ended := func(what string) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the proxy's handler did not end within 10 s", what)
		}
	}
	// settled waits until the tokens left are proxyTokens-charged, which
	// the settlement after the handler makes soon; each quick request it
	// sends reports nothing and reserves nothing.
	settled := func(what string, charged int64) {
		t.Helper()
		awaitRateLimit(t, fmt.Sprintf("%s (charged the %d reported)", what, charged),
			fmt.Sprintf(`"proxy-1h-tokens";r=%d;t=3600`, proxyTokens-charged), func() string {
				resp := postWork(t, context.Background(), base, "X-Quick", "1")
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: a quick request answered %d", what, resp.StatusCode)
				}
				ended(what)
				return resp.Header.Get("RateLimit")
			})
	}

	// Read to its end: charged what the proxy read, not the estimate.
	resp := postWork(t, context.Background(), base, "X-Events", "20")
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ended("a stream read to its end")
	whole := reported.Load()
	if whole < int64(20*10*len("data: token 0\n\n")) {
		t.Fatalf("%d tokens reported for a stream of 20 events", whole)
	}
	settled("a stream read to its end", whole)

	// The client hangs up after 3 events of 1000.
	reported.Store(0)
	ctx, cancel := context.WithCancel(context.Background())
	hangUpAfter(t, postWork(t, ctx, base, "X-Events", "1000"), cancel, 3)
	ended("a client that hung up")
	left := reported.Load()
	if left < int64(3*10*len("data: token 0\n\n")) || left >= int64(1000*10*len("data: token 0\n\n")) {
		t.Fatalf("%d tokens reported; want at least the 3 events read, not all 1000", left)
	}
	settled("a client that hung up after 3 events", whole+left)
}

// proxyTokens is the hourly token budget of testBudgetProxy's server.
const proxyTokens = 10_000_000

// proxyServer starts a real server of a's app whose POST /work goes
// through a ReverseProxy to an event stream (sseBackend), which reports
// 10 tokens a byte read to the request's Usage and adds them up in
// reported; each request's handler says on done when it ends. The budget
// is proxyTokens an hour, each request reserving 50 (0 with X-Quick). It
// returns the server's URL.
func proxyServer(t *testing.T, a Adapter, reported *atomic.Int64, done chan<- struct{}) string {
	proxy := httputil.NewSingleHostReverseProxy(sseBackend(t))
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	proxy.ModifyResponse = func(res *http.Response) error {
		if res.Request.Header.Get("X-Quick") != "" { // reports nothing: settled at its estimate, 0
			return nil
		}
		res.Body = &meter{ReadCloser: res.Body, usage: redlimit.UsageFrom(res.Request.Context()), reported: reported}
		return nil
	}
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }() // before the middleware settles, on a panic too
		proxy.ServeHTTP(w, r)
	})
	b := redlimit.Budget{Limits: []core.Limit{{Algorithm: core.FixedWindow, Rate: proxyTokens, Period: time.Hour, Unit: "tokens"}},
		Estimate: func(r *http.Request) int {
			if r.Header.Get("X-Quick") != "" {
				return 0
			}
			return 50
		}}
	opts := []redlimit.Option{redlimit.WithName("proxy"), redlimit.WithHeaders(redlimit.HeadersDraft), redlimit.WithBudget(b)}
	srv := httptest.NewServer(build(t, a, Spec{Limiter: Embedded(t), WorkHandler: front,
		Work: &Mw{core.Limit{Algorithm: core.FixedWindow, Rate: 1_000_000, Period: time.Hour}, opts}}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// sseBackend starts the proxied server: it answers "ok" with X-Quick,
// else streams X-Events events, flushed, 2 ms apart, until its client
// leaves. It returns its URL.
func sseBackend(t *testing.T) *url.URL {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Quick") != "" {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range headerInt(r.Header, "X-Events", 0) {
			if _, err := fmt.Fprintf(w, "data: token %d\n\n", i); err != nil {
				return
			}
			if rc.Flush() != nil || r.Context().Err() != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}))
	t.Cleanup(backend.Close)
	target, err := url.Parse(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	return target
}
