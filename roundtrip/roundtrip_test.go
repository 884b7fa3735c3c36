package roundtrip_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/roundtrip"
)

// patient is for tests of behaviour, not timing: under -race, a decision
// can take longer than the default timeout.
var patient = core.WithTimeout(10 * time.Second)

// limiter is a Limiter on a miniredis of its own whose clock is the
// process's.
func limiter(t *testing.T) *core.Limiter {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return core.New(rdb, patient)
}

// deadRedis is a Limiter whose Redis refuses connections.
func deadRedis(t *testing.T) *core.Limiter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return core.New(rdb, patient)
}

// counter is a test server that counts the requests it receives, per
// value of the X-Client header.
type counter struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string]int
}

func newCounter(t *testing.T) *counter {
	c := &counter{got: map[string]int{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.got[r.Header.Get("X-Client")]++
		c.mu.Unlock()
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.got {
		n += v
	}
	return n
}

func get(t *testing.T, ctx context.Context, client *http.Client, url string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// TestSharedRate: two app instances (each its own Limiter, Redis client
// and http.Client), four goroutines each, call one server as fast as
// they may. The server receives the limit's rate, no more (GCRA: at most
// burst + rate x elapsed, on the Redis server's clock), and both
// instances get through.
func TestSharedRate(t *testing.T) {
	t.Parallel()
	const instances, goroutines, maxCalls = 2, 4, 10_000
	srv := redistest.Standalone(t)
	admin := srv.Client(t)
	api := newCounter(t)
	l := core.Limit{Rate: 20, Period: 200 * time.Millisecond} // 100/s, bursts of 20
	interval := l.Period / time.Duration(l.Rate)
	bg := context.Background()

	began, err := admin.Time(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 1500*time.Millisecond)
	defer cancel()
	var (
		wg   sync.WaitGroup
		errs = make(chan error, instances*goroutines)
	)
	for i := range instances {
		tr := roundtrip.New(core.New(srv.Client(t), patient), l)
		client := &http.Client{Transport: tr}
		t.Cleanup(client.CloseIdleConnections)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range maxCalls {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
					if err != nil {
						errs <- err
						return
					}
					req.Header.Set("X-Client", strconv.Itoa(i))
					resp, err := client.Do(req)
					switch {
					case err == nil:
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, core.ErrTimeout):
						return // the window is over
					default:
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	ended, err := admin.Time(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	elapsed := ended.Sub(began)
	total := api.total()
	most := l.Capacity() + int(elapsed/interval) + 1
	least := int(elapsed/interval) / 2
	api.mu.Lock()
	per := []int{api.got["0"], api.got["1"]}
	api.mu.Unlock()
	t.Logf("%d instances x %d goroutines, %v on the Redis clock: the server received %d requests (per instance %v), at most %d allowed",
		instances, goroutines, elapsed.Round(time.Millisecond), total, per, most)
	if total > most {
		t.Fatalf("the server received %d requests in %v: above the limit's %d", total, elapsed, most)
	}
	if total < least {
		t.Fatalf("the server received %d requests in %v: below %d, half the rate", total, elapsed, least)
	}
	for i, n := range per {
		if n == 0 {
			t.Errorf("instance %d never got a request through", i)
		}
	}
}

// TestContextCancel: a request cancelled while it waits for its turn
// fails with context.Canceled and never reaches the server.
func TestContextCancel(t *testing.T) {
	t.Parallel()
	api := newCounter(t)
	client := &http.Client{Transport: roundtrip.New(limiter(t), core.PerHour(1))}
	if err := get(t, context.Background(), client, api.URL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(30*time.Millisecond, cancel)
	defer stop.Stop()
	began := time.Now()
	err := get(t, ctx, client, api.URL)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a request cancelled while waiting an hour: err %v, want context.Canceled", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the cancelled request returned after %v", took)
	}
	if n := api.total(); n != 1 {
		t.Fatalf("the server received %d requests, want 1", n)
	}
}

// body records whether it was closed.
type body struct {
	io.Reader
	closed atomic.Bool
}

func (b *body) Close() error { b.closed.Store(true); return nil }

// recorder is a base transport that records what it is given.
type recorder struct {
	mu    sync.Mutex
	reqs  []*http.Request
	idled int
	resp  *http.Response
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	if req.Body != nil {
		req.Body.Close()
	}
	return r.resp, nil
}

func (r *recorder) CloseIdleConnections() { r.idled++ }

func (r *recorder) sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

// TestBodyClosedOnError: whatever keeps a request from being sent, RoundTrip
// returns no response and an error saying why, closes the request's body,
// and does not call the base transport.
func TestBodyClosedOnError(t *testing.T) {
	t.Parallel()
	l := core.Limit{Rate: 10, Period: time.Second, Burst: 5}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	keyErr := errors.New("no tenant")
	for _, tc := range []struct {
		name string
		lim  *core.Limiter
		opts []roundtrip.Option
		ctx  context.Context
		want error
	}{
		{"cancelled", limiter(t), nil, cancelled, context.Canceled},
		{"key error", limiter(t), []roundtrip.Option{roundtrip.WithKeyFunc(func(*http.Request) (string, error) { return "", keyErr })}, nil, keyErr},
		{"empty key", limiter(t), []roundtrip.Option{roundtrip.WithKey("")}, nil, core.ErrInvalidKey},
		{"cost above burst", limiter(t), []roundtrip.Option{roundtrip.WithCost(func(*http.Request) int { return 6 })}, nil, core.ErrInvalidCost},
		{"Redis down", deadRedis(t), nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := &recorder{}
			tr := roundtrip.New(tc.lim, l, append([]roundtrip.Option{roundtrip.WithBase(base)}, tc.opts...)...)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			b := &body{Reader: strings.NewReader("payload")}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.example.com/v1/charges", b)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tr.RoundTrip(req)
			if resp != nil || err == nil {
				t.Fatalf("RoundTrip returned %v, %v; want no response and an error", resp, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want one wrapping %v", err, tc.want)
			}
			if !b.closed.Load() {
				t.Fatal("the request's body was not closed")
			}
			if base.sent() != 0 {
				t.Fatal("the base transport was called")
			}
		})
	}

	// The zero Transport fails too, and closes the body.
	b := &body{Reader: strings.NewReader("payload")}
	req := httptest.NewRequest(http.MethodPost, "https://api.example.com/", b)
	if resp, err := new(roundtrip.Transport).RoundTrip(req); resp != nil || err == nil || !b.closed.Load() {
		t.Fatalf("zero Transport: %v, %v, body closed %v", resp, err, b.closed.Load())
	}
}

// TestBase: an admitted request is handed to the base transport as it
// came, and what the base returns is returned; CloseIdleConnections
// reaches the base.
func TestBase(t *testing.T) {
	t.Parallel()
	want := &http.Response{StatusCode: http.StatusTeapot, Body: http.NoBody}
	base := &recorder{resp: want}
	tr := roundtrip.New(limiter(t), core.PerSecond(10), roundtrip.WithBase(base))
	req := httptest.NewRequest(http.MethodPost, "https://api.example.com/v1/charges?x=1", strings.NewReader("payload"))
	req.Header.Set("Authorization", "Bearer token")
	before := req.Clone(req.Context())

	resp, err := tr.RoundTrip(req)
	if err != nil || resp != want {
		t.Fatalf("RoundTrip: %v, %v; want the base's response", resp, err)
	}
	if base.sent() != 1 || base.reqs[0] != req {
		t.Fatalf("the base transport got %v, want the request itself", base.reqs)
	}
	if req.Method != before.Method || req.URL.String() != before.URL.String() || req.Host != before.Host ||
		len(req.Header) != len(before.Header) || req.Header.Get("Authorization") != "Bearer token" {
		t.Fatalf("the request was modified: %+v, was %+v", req, before)
	}

	(&http.Client{Transport: tr}).CloseIdleConnections()
	if base.idled != 1 {
		t.Fatal("CloseIdleConnections did not reach the base transport")
	}
}

// TestKeys: by default each host has its own rate; WithKey shares one;
// WithCost 0 sends without waiting.
func TestKeys(t *testing.T) {
	t.Parallel()
	a, b := newCounter(t), newCounter(t)
	l := core.PerHour(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	deadline := func(err error) bool { return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil }

	perHost := &http.Client{Transport: roundtrip.New(limiter(t), l)}
	if err := get(t, ctx, perHost, a.URL); err != nil {
		t.Fatal(err)
	}
	if err := get(t, ctx, perHost, b.URL); err != nil {
		t.Fatalf("another host waits for the first's rate: %v", err)
	}
	if err := get(t, ctx, perHost, a.URL); !deadline(err) {
		t.Fatalf("a second request to one host within the hour: err %v, want DeadlineExceeded at once", err)
	}

	shared := &http.Client{Transport: roundtrip.New(limiter(t), l, roundtrip.WithKey("partner"))}
	if err := get(t, ctx, shared, a.URL); err != nil {
		t.Fatal(err)
	}
	if err := get(t, ctx, shared, b.URL); !deadline(err) {
		t.Fatalf("WithKey: the second host got its own rate: err %v", err)
	}

	freeGets := &http.Client{Transport: roundtrip.New(limiter(t), l, roundtrip.WithCost(func(r *http.Request) int {
		if r.Method == http.MethodGet {
			return 0
		}
		return 1
	}))}
	for range 3 {
		if err := get(t, ctx, freeGets, a.URL); err != nil {
			t.Fatalf("a request of cost 0 waited: %v", err)
		}
	}
	if got, want := a.total()+b.total(), 2+1+3; got != want {
		t.Fatalf("the servers received %d requests, want %d", got, want)
	}
}

func TestHost(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"https://API.Stripe.com/v1/charges": "api.stripe.com",
		"https://api.stripe.com:443/":       "api.stripe.com",
		"http://api.example.com:80/x":       "api.example.com",
		"https://api.example.com:80/x":      "api.example.com:80",
		"http://127.0.0.1:8080/":            "127.0.0.1:8080",
		"https://[::1]:443/":                "[::1]",
	} {
		req := httptest.NewRequest(http.MethodGet, url, nil)
		if got, err := roundtrip.Host(req); got != want || err != nil {
			t.Errorf("Host(%s) = %q, %v; want %q", url, got, err, want)
		}
	}
	if _, err := roundtrip.Host(&http.Request{URL: nil}); err == nil {
		t.Error("Host of a request without a URL: no error")
	}
}

// TestOnError: WithOnError decides what a request does when Redis fails:
// nil sends it anyway, an error fails it. The request's own context ending
// never reaches it.
func TestOnError(t *testing.T) {
	t.Parallel()
	api := newCounter(t)
	var seen atomic.Int64
	failOpen := &http.Client{Transport: roundtrip.New(deadRedis(t), core.PerSecond(10),
		roundtrip.WithOnError(func(r *http.Request, err error) error {
			seen.Add(1)
			return nil
		}))}
	if err := get(t, context.Background(), failOpen, api.URL); err != nil {
		t.Fatalf("fail open: %v", err)
	}
	if seen.Load() != 1 || api.total() != 1 {
		t.Fatalf("fail open: onError called %d times, server received %d; want 1 and 1", seen.Load(), api.total())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := get(t, ctx, failOpen, api.URL); !errors.Is(err, context.Canceled) || seen.Load() != 1 {
		t.Fatalf("a cancelled request: err %v, onError called %d times; want context.Canceled, not called", err, seen.Load())
	}

	refused := errors.New("not now")
	failClosed := &http.Client{Transport: roundtrip.New(deadRedis(t), core.PerSecond(10),
		roundtrip.WithOnError(func(*http.Request, error) error { return refused }))}
	if err := get(t, context.Background(), failClosed, api.URL); !errors.Is(err, refused) {
		t.Fatalf("onError's error: got %v", err)
	}
	if api.total() != 1 {
		t.Fatal("a refused request reached the server")
	}
}

// TestNewPanics: New refuses what could never work, at start-up.
func TestNewPanics(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"nil Limiter":   func() { roundtrip.New(nil, core.PerSecond(1)) },
		"zero Limiter":  func() { roundtrip.New(&core.Limiter{}, core.PerSecond(1)) },
		"invalid limit": func() { roundtrip.New(limiter(t), core.Limit{}) },
	} {
		func() {
			defer func() {
				r := recover()
				if r == nil {
					t.Errorf("%s: New did not panic", name)
				}
				if strings.Contains(name, "Limiter") && !strings.Contains(fmt.Sprint(r), "core.New") {
					t.Errorf("%s: New panicked with %v; want it to say core.New", name, r)
				}
			}()
			f()
		}()
	}
}
