package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/keyfunc"
)

// want checks a call's code and header metadata; a value wanted "" must
// be absent.
func want(t *testing.T, what string, got result, code codes.Code, header ...string) {
	t.Helper()
	if got.code != code {
		t.Fatalf("%s: %v %q, want %v", what, got.code, got.st.Message(), code)
	}
	for i := 0; i+1 < len(header); i += 2 {
		v := got.header.Get(header[i])
		switch w := header[i+1]; {
		case w == "" && len(v) > 0:
			t.Fatalf("%s: metadata %s = %q, want none", what, header[i], v)
		case w != "" && (len(v) != 1 || v[0] != w):
			t.Fatalf("%s: metadata %s = %q, want %q (all: %v)", what, header[i], v, w, got.header)
		}
	}
}

// retryInfo returns a status's RetryInfo delay, or -1 without one.
func retryInfo(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

// TestUnary: calls get the rate-limit fields in their header metadata; the
// call over the limit is not handed to the handler and ends with
// ResourceExhausted, a RetryInfo of the exact wait, and retry-after.
func TestUnary(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var handled atomic.Int32
	e := &echo{handle: func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		handled.Add(1)
		return in, nil
	}}
	cc := serve(t, e, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(2))))
	got := say(t, cc, "/test.Echo/Say")
	want(t, "first", got, codes.OK, "x-ratelimit-limit", "2", "x-ratelimit-remaining", "1", "x-ratelimit-reset", "30", "retry-after", "")
	if got.reply != "hi" {
		t.Fatalf("reply %q", got.reply)
	}
	want(t, "second", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-remaining", "0", "x-ratelimit-reset", "60")
	got = say(t, cc, "/test.Echo/Say")
	want(t, "third", got, codes.ResourceExhausted,
		"x-ratelimit-limit", "2", "x-ratelimit-remaining", "0", "x-ratelimit-reset", "60", "retry-after", "30")
	if got.st.Message() != "rate limit exceeded" {
		t.Errorf("message %q", got.st.Message())
	}
	if d := retryInfo(got.st); d != 30*time.Second {
		t.Errorf("RetryInfo %v, want 30s", d)
	}
	if n := handled.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}
}

// TestRetryInfoExact: RetryInfo says the wait to the millisecond, where
// retry-after rounds it up to a second.
func TestRetryInfoExact(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	cc := serve(t, &echo{}, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerSecond(4))))
	for i := 0; i < 4; i++ {
		want(t, "allowed", say(t, cc, "/test.Echo/Say"), codes.OK)
	}
	got := say(t, cc, "/test.Echo/Say")
	want(t, "denied", got, codes.ResourceExhausted, "retry-after", "1")
	if d := retryInfo(got.st); d != 250*time.Millisecond {
		t.Errorf("RetryInfo %v, want 250ms", d)
	}
}

// TestStream: a stream is decided once, when it opens; an allowed one gets
// the fields in its header metadata and runs to its end; a denied one ends
// at once with ResourceExhausted and RetryInfo, its handler never run.
func TestStream(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var opened atomic.Int32
	e := &echo{count: func(context.Context) { opened.Add(1) }}
	cc := serve(t, e, grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim, core.PerMinute(1), grpclimit.With(redlimit.WithName("streams")))))
	got, n := count(t, cc, 5)
	want(t, "first stream", got, codes.OK, "x-ratelimit-limit", "1", "x-ratelimit-remaining", "0")
	if n != 5 {
		t.Fatalf("first stream: %d messages, want 5", n)
	}
	got, n = count(t, cc, 5)
	want(t, "second stream", got, codes.ResourceExhausted, "retry-after", "60", "x-ratelimit-remaining", "0")
	if n != 0 || opened.Load() != 1 || retryInfo(got.st) != time.Minute {
		t.Fatalf("second stream: %d messages, %d handlers run, RetryInfo %v; want 0, 1, 1m", n, opened.Load(), retryInfo(got.st))
	}
}

// observed collects the decisions of a policy.
type observed struct {
	mu sync.Mutex
	d  []redlimit.Decision
	r  []*http.Request
}

func (o *observed) option() grpclimit.Option {
	return grpclimit.With(redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.d, o.r = append(o.d, d), append(o.r, r)
	}))
}

func (o *observed) keys() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var keys []string
	for _, d := range o.d {
		keys = append(keys, d.Key)
	}
	return keys
}

// TestDefaultKeyIsThePeer: calls are keyed by the peer's address, as
// keyfunc.IP keys HTTP requests; forwarding metadata a client sends is
// believed only from proxies named with keyfunc.TrustProxies (WithIPKey).
// Observers get no *http.Request: a call is not one.
func TestDefaultKeyIsThePeer(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var plain, trusting observed
	cc := serve(t, &echo{}, grpc.ChainUnaryInterceptor(
		grpclimit.UnaryServerInterceptor(lim, core.PerMinute(100), plain.option()),
		grpclimit.UnaryServerInterceptor(lim, core.PerMinute(100), trusting.option(),
			grpclimit.With(redlimit.WithName("trusting")), grpclimit.WithIPKey(keyfunc.TrustProxies("127.0.0.1"))),
	))
	want(t, "plain", say(t, cc, "/test.Echo/Say"), codes.OK)
	want(t, "forwarded", say(t, cc, "/test.Echo/Say", "x-forwarded-for", "198.51.100.7"), codes.OK)
	if got := plain.keys(); !slices.Equal(got, []string{"ip:127.0.0.1", "ip:127.0.0.1"}) {
		t.Errorf("default keys %q, want the peer's address twice", got)
	}
	if got := trusting.keys(); !slices.Equal(got, []string{"ip:127.0.0.1", "ip:198.51.100.7"}) {
		t.Errorf("keys behind a trusted proxy %q", got)
	}
	plain.mu.Lock()
	defer plain.mu.Unlock()
	if r := plain.r[1]; r != nil {
		t.Errorf("the observer got %v; a call is no HTTP request", r)
	}
}

// TestUnixSocketPeer: a peer on a Unix socket has no address; it is keyed
// keyfunc.UnixSocketKey, as on HTTP.
func TestUnixSocketPeer(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var o observed
	path := filepath.Join(t.TempDir(), "grpc.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(10), o.option())))
	(&echo{}).register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	want(t, "over a Unix socket", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-remaining", "9")
	if got := o.keys(); !slices.Equal(got, []string{keyfunc.UnixSocketKey}) {
		t.Errorf("keys %q, want %q", got, keyfunc.UnixSocketKey)
	}
}

// userKey is where the test's authentication interceptor puts the user.
type userKey struct{}

// authenticate puts the "user" metadata's value in the context.
func authenticate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if v := metadata.ValueFromIncomingContext(ctx, "user"); len(v) == 1 {
		ctx = context.WithValue(ctx, userKey{}, v[0])
	}
	return handler(ctx, req)
}

// TestKeys: WithKey keys by a function of the call's context and method
// (a user an authentication interceptor put in the context, a metadata
// value when told to read one); a call without a key ends
// InvalidArgument, never unlimited. (The HTTP layer's keyfunc.Func, which
// reads HTTP requests, is refused at construction: TestConfigErrors.)
func TestKeys(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t, core.WithLogger(slog.New(slog.DiscardHandler)))
	perUserAndMethod := grpclimit.WithKey(func(ctx context.Context, fullMethod string) (string, error) {
		user, ok := ctx.Value(userKey{}).(string)
		if !ok {
			return "", fmt.Errorf("%w: no user", keyfunc.ErrNoKey)
		}
		return "user:" + user + "|" + fullMethod, nil
	})
	cc := serve(t, &echo{}, grpc.ChainUnaryInterceptor(authenticate, grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1), perUserAndMethod)))
	want(t, "alice says", say(t, cc, "/test.Echo/Say", "user", "alice"), codes.OK)
	want(t, "alice says again", say(t, cc, "/test.Echo/Say", "user", "alice"), codes.ResourceExhausted)
	want(t, "alice shouts", say(t, cc, "/test.Echo/Shout", "user", "alice"), codes.OK)
	want(t, "bob says", say(t, cc, "/test.Echo/Say", "user", "bob"), codes.OK)
	got := say(t, cc, "/test.Echo/Say")
	want(t, "nobody", got, codes.InvalidArgument, "x-ratelimit-limit", "")
	if got.st.Message() != "request has no rate limit key" || retryInfo(got.st) != -1 {
		t.Errorf("no key: %q, RetryInfo %v", got.st.Message(), retryInfo(got.st))
	}

	contextUser := []grpclimit.Option{grpclimit.With(redlimit.WithName("users")), grpclimit.WithKey(func(ctx context.Context, _ string) (string, error) {
		if user, ok := ctx.Value(userKey{}).(string); ok {
			return "user:" + user, nil
		}
		return "", keyfunc.ErrNoKey
	})}
	apiKey := []grpclimit.Option{grpclimit.With(redlimit.WithName("api-keys")), grpclimit.WithKey(func(ctx context.Context, _ string) (string, error) {
		if v := metadata.ValueFromIncomingContext(ctx, "x-api-key"); len(v) == 1 && v[0] != "" {
			return "header:x-api-key:" + v[0], nil
		}
		return "", keyfunc.ErrNoKey
	})}
	cc = serve(t, &echo{}, grpc.ChainUnaryInterceptor(authenticate,
		grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1), contextUser...),
		grpclimit.UnaryServerInterceptor(lim, core.PerMinute(5), apiKey...)))
	want(t, "carol with a key", say(t, cc, "/test.Echo/Say", "user", "carol", "x-api-key", "k1"), codes.OK)
	want(t, "carol again", say(t, cc, "/test.Echo/Say", "user", "carol", "x-api-key", "k2"), codes.ResourceExhausted)
	want(t, "dave without an API key", say(t, cc, "/test.Echo/Say", "user", "dave"), codes.InvalidArgument)
}

// TestFailurePolicies: with Redis down, a call passes without rate-limit
// metadata by default, and ends Unavailable with RetryInfo of a second
// under FailClosed.
func TestFailurePolicies(t *testing.T) {
	t.Parallel()
	lim, m := embedded(t, core.WithTimeout(time.Second), core.WithDenyCache(0), core.WithLogger(slog.New(slog.DiscardHandler)))
	cc := serve(t, &echo{}, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1))))
	closed := serve(t, &echo{}, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1),
		grpclimit.With(redlimit.WithFailure(redlimit.FailClosed)))))
	want(t, "allowed", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-remaining", "0")
	want(t, "denied", say(t, cc, "/test.Echo/Say"), codes.ResourceExhausted)
	m.Close()
	want(t, "Redis down, fail open", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-limit", "")
	got := say(t, closed, "/test.Echo/Say")
	want(t, "Redis down, fail closed", got, codes.Unavailable, "retry-after", "1", "x-ratelimit-limit", "")
	if got.st.Message() != "rate limiter unavailable" || retryInfo(got.st) != time.Second {
		t.Errorf("fail closed: %q, RetryInfo %v", got.st.Message(), retryInfo(got.st))
	}
}

// TestDryRun: a dry run decides and observes, and lets every call pass.
func TestDryRun(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t, core.WithLogger(slog.New(slog.DiscardHandler)))
	var o observed
	cc := serve(t, &echo{}, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1),
		grpclimit.With(redlimit.WithDryRun()), o.option())))
	for i := 0; i < 3; i++ {
		want(t, "dry run", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-limit", "")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var outcomes []redlimit.Outcome
	for _, d := range o.d {
		outcomes = append(outcomes, d.Outcome)
	}
	if !slices.Equal(outcomes, []redlimit.Outcome{redlimit.OutcomeAllowed, redlimit.OutcomeDryRun, redlimit.OutcomeDryRun}) {
		t.Errorf("outcomes %v", outcomes)
	}
}

// TestAlsoAndCost: several limits for one key, decided together; a cost
// per call.
func TestAlsoAndCost(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	daily := core.Limit{Algorithm: core.FixedWindow, Rate: 6, Period: 24 * time.Hour}
	cc := serve(t, &echo{}, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerSecond(10),
		grpclimit.With(redlimit.WithAlso(daily), redlimit.WithCost(2), redlimit.WithHeaders(redlimit.HeadersDraft)))))
	got := say(t, cc, "/test.Echo/Say")
	want(t, "first", got, codes.OK, "x-ratelimit-limit", "",
		"ratelimit", `"10/s, 6/d fixed_window";r=8;t=1, "10/s, 6/d fixed_window-24h";r=4;t=86400`)
	if got.header.Get("ratelimit-policy") == nil {
		t.Errorf("no ratelimit-policy metadata: %v", got.header)
	}
	want(t, "second", say(t, cc, "/test.Echo/Say"), codes.OK)
	want(t, "third", say(t, cc, "/test.Echo/Say"), codes.OK)
	got = say(t, cc, "/test.Echo/Say")
	want(t, "the daily quota spent", got, codes.ResourceExhausted)
	if d := retryInfo(got.st); d != 24*time.Hour {
		t.Errorf("RetryInfo %v, want the day", d)
	}
}

// TestSkip: WithSkip exempts calls by their context and method: they
// proceed without a decision or metadata, and observers see them skipped.
func TestSkip(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var o observed
	var asked atomic.Int32
	skip := grpclimit.WithSkip(func(ctx context.Context, fullMethod string) bool {
		asked.Add(1)
		_, admin := ctx.Value(userKey{}).(string)
		return fullMethod == "/test.Admin/Reset" || admin && fullMethod == "/test.Echo/Shout"
	})
	cc := serve(t, &echo{}, grpc.ChainUnaryInterceptor(authenticate, grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1), skip, o.option())))
	for i := 0; i < 3; i++ {
		want(t, "skipped method", say(t, cc, "/test.Admin/Reset"), codes.OK, "x-ratelimit-limit", "")
		want(t, "skipped by the context", say(t, cc, "/test.Echo/Shout", "user", "root"), codes.OK, "x-ratelimit-limit", "")
	}
	want(t, "limited", say(t, cc, "/test.Echo/Shout"), codes.OK, "x-ratelimit-limit", "1", "x-ratelimit-remaining", "0")
	want(t, "limited again", say(t, cc, "/test.Echo/Shout"), codes.ResourceExhausted)
	if n := asked.Load(); n != 8 {
		t.Errorf("asked %d times, want 8", n)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var outcomes []redlimit.Outcome
	for _, d := range o.d {
		outcomes = append(outcomes, d.Outcome)
	}
	if want := []redlimit.Outcome{redlimit.OutcomeSkipped, redlimit.OutcomeSkipped, redlimit.OutcomeSkipped, redlimit.OutcomeSkipped,
		redlimit.OutcomeSkipped, redlimit.OutcomeSkipped, redlimit.OutcomeAllowed, redlimit.OutcomeDenied}; !slices.Equal(outcomes, want) {
		t.Errorf("outcomes %v, want %v", outcomes, want)
	}
}

// TestLimits: WithLimits picks a call's limits by its context (plan
// tiers), each tier with its own state; nil is the interceptor's limit. A
// failing pick, invalid limits and limits below the cost (HTTP's 400) end
// the call InvalidArgument, never let through, and observers get the
// error.
func TestLimits(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t, core.WithLogger(slog.New(slog.DiscardHandler)))
	errUnknownPlan := errors.New("unknown plan")
	tiers := grpclimit.WithLimits(func(ctx context.Context, fullMethod string) ([]core.Limit, error) {
		user, _ := ctx.Value(userKey{}).(string)
		switch user {
		case "":
			return nil, nil // the interceptor's limit
		case "free":
			return []core.Limit{core.PerMinute(4)}, nil
		case "pro":
			return []core.Limit{core.PerMinute(100), {Algorithm: core.FixedWindow, Rate: 1000, Period: 24 * time.Hour}}, nil
		case "tiny":
			return []core.Limit{core.PerMinute(1)}, nil // below the cost of 2
		case "broken":
			return []core.Limit{{Rate: 0, Period: time.Minute}}, nil
		}
		return nil, errUnknownPlan
	})
	perUser := grpclimit.WithKey(func(ctx context.Context, _ string) (string, error) {
		user, _ := ctx.Value(userKey{}).(string)
		return "user:" + user, nil
	})
	var o observed
	cc := serve(t, &echo{}, grpc.ChainUnaryInterceptor(authenticate, grpclimit.UnaryServerInterceptor(lim, core.PerMinute(10),
		perUser, tiers, grpclimit.With(redlimit.WithCost(2)), o.option())))
	want(t, "no plan", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-limit", "10", "x-ratelimit-remaining", "8")
	want(t, "free", say(t, cc, "/test.Echo/Say", "user", "free"), codes.OK, "x-ratelimit-limit", "4", "x-ratelimit-remaining", "2")
	want(t, "free again", say(t, cc, "/test.Echo/Say", "user", "free"), codes.OK, "x-ratelimit-remaining", "0")
	want(t, "free, spent", say(t, cc, "/test.Echo/Say", "user", "free"), codes.ResourceExhausted, "retry-after", "30")
	want(t, "pro", say(t, cc, "/test.Echo/Say", "user", "pro"), codes.OK, "x-ratelimit-limit", "100", "x-ratelimit-remaining", "98")
	for _, c := range []struct{ user, message string }{
		{"tiny", "request costs more than its rate limit allows"},
		{"broken", "request's rate limits are invalid"},
		{"unknown", "request's rate limits could not be chosen"},
	} {
		got := say(t, cc, "/test.Echo/Say", "user", c.user)
		want(t, c.user, got, codes.InvalidArgument, "x-ratelimit-limit", "")
		if got.st.Message() != c.message {
			t.Errorf("%s: %q, want %q", c.user, got.st.Message(), c.message)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	errs := o.d[len(o.d)-3:]
	if !errors.Is(errs[0].Err, core.ErrInvalidCost) || !errors.Is(errs[1].Err, core.ErrInvalidLimit) || !errors.Is(errs[2].Err, errUnknownPlan) {
		t.Errorf("observed errors %v, %v, %v", errs[0].Err, errs[1].Err, errs[2].Err)
	}
	for _, d := range errs {
		if d.Outcome != redlimit.OutcomeInvalid {
			t.Errorf("outcome %v, want invalid", d.Outcome)
		}
	}
}

// TestObserver: WithObserver sees every decision with the call's context
// and method, beside redlimit.WithObserver's observers (nil request), in
// the order given.
func TestObserver(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	type seen struct {
		who, user, method string
		outcome           redlimit.Outcome
	}
	var mu sync.Mutex
	var got []seen
	observer := func(ctx context.Context, fullMethod string, d redlimit.Decision) {
		user, _ := ctx.Value(userKey{}).(string)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{"grpc", user, fullMethod, d.Outcome})
		if d.Policy != "1/m" || d.Duration <= 0 {
			t.Errorf("decision %+v", d)
		}
	}
	httpObserver := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{"http", fmt.Sprint(r == nil), "", d.Outcome})
	})
	cc := serve(t, &echo{}, grpc.ChainUnaryInterceptor(authenticate, grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1),
		grpclimit.WithObserver(observer), grpclimit.With(httpObserver))))
	want(t, "say", say(t, cc, "/test.Echo/Say", "user", "alice"), codes.OK)
	want(t, "shout", say(t, cc, "/test.Echo/Shout", "user", "alice"), codes.ResourceExhausted)
	count(t, cc, 1)
	mu.Lock()
	defer mu.Unlock()
	if want := []seen{
		{"grpc", "alice", "/test.Echo/Say", redlimit.OutcomeAllowed}, {"http", "true", "", redlimit.OutcomeAllowed},
		{"grpc", "alice", "/test.Echo/Shout", redlimit.OutcomeDenied}, {"http", "true", "", redlimit.OutcomeDenied},
	}; !slices.Equal(got, want) {
		t.Errorf("observed %v, want %v", got, want)
	}

	// Streams too.
	var streams atomic.Int32
	cc = serve(t, &echo{}, grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim, core.PerMinute(5),
		grpclimit.WithObserver(func(_ context.Context, fullMethod string, d redlimit.Decision) {
			if fullMethod == "/test.Echo/Count" && d.Outcome == redlimit.OutcomeAllowed {
				streams.Add(1)
			}
		}))))
	if r, n := count(t, cc, 2); r.code != codes.OK || n != 2 {
		t.Fatalf("count: %v, %d", r.code, n)
	}
	if streams.Load() != 1 {
		t.Errorf("observed %d streams", streams.Load())
	}
}

// TestCallCost: WithResponseCost settles a call at the cost its function
// returns for the handler's reply and error: tokens a reply reports, a
// stream's error.
func TestCallCost(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t, core.WithLogger(slog.New(slog.DiscardHandler)))
	e := &echo{handle: func(_ context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if in.GetValue() == "fail" {
			return nil, status.Error(codes.Internal, "failed")
		}
		return wrapperspb.String("40"), nil // tokens used
	}}
	tokens := grpclimit.WithResponseCost(func(_ context.Context, fullMethod string, reply any, err error) int {
		if err != nil {
			return 0 // failures are free
		}
		if v, ok := reply.(*wrapperspb.StringValue); ok {
			n, _ := strconv.Atoi(v.GetValue())
			return n
		}
		return 1
	})
	budget := core.Limit{Algorithm: core.SlidingLog, Rate: 100, Period: time.Hour}
	cc := serve(t, e, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, budget, tokens)),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim, budget, tokens, grpclimit.With(redlimit.WithName("streams")))))
	want(t, "first", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-remaining", "99")
	want(t, "after 40 tokens", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-remaining", "59")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cc.Invoke(ctx, "/test.Echo/Say", wrapperspb.String("fail"), new(wrapperspb.StringValue)); status.Code(err) != codes.Internal {
		t.Fatal(err)
	}
	want(t, "after 80 tokens, the failure free", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-remaining", "19")
	want(t, "after 120 tokens, in debt", say(t, cc, "/test.Echo/Say"), codes.ResourceExhausted)

	if r, _ := count(t, cc, 1); r.code != codes.OK || r.header.Get("x-ratelimit-remaining")[0] != "99" {
		t.Fatalf("stream: %v %v", r.code, r.header)
	}
	if r, _ := count(t, cc, 1); r.code != codes.OK || r.header.Get("x-ratelimit-remaining")[0] != "98" {
		t.Fatalf("second stream, settled at 1: %v %v", r.code, r.header)
	}
}

// TestRules: limits per method and per service on top of the
// interceptor's limit, which is the catch-all decided with them.
func TestRules(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	rules := redlimit.Rules{"/test.Echo/Shout": "1/m", "/test.Admin/*": "2/h"}
	var o observed
	cc := serve(t, &echo{}, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(5), grpclimit.WithRules(rules), o.option())))
	want(t, "shout", say(t, cc, "/test.Echo/Shout"), codes.OK, "x-ratelimit-limit", "1", "x-ratelimit-remaining", "0")
	want(t, "shout again", say(t, cc, "/test.Echo/Shout"), codes.ResourceExhausted, "retry-after", "60")
	want(t, "say: the catch-all alone", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-limit", "5", "x-ratelimit-remaining", "3")
	want(t, "admin", say(t, cc, "/test.Admin/Reset"), codes.OK, "x-ratelimit-limit", "2", "x-ratelimit-remaining", "1")
	want(t, "admin again", say(t, cc, "/test.Admin/Reset"), codes.OK, "x-ratelimit-limit", "2", "x-ratelimit-remaining", "0")
	got := say(t, cc, "/test.Admin/Reset")
	want(t, "admin, the service's limit spent", got, codes.ResourceExhausted, "x-ratelimit-limit", "2", "retry-after", "1800")
	o.mu.Lock()
	defer o.mu.Unlock()
	var policies []string
	for _, d := range o.d {
		policies = append(policies, d.Policy)
	}
	if w := []string{"/test.Echo/Shout", "/test.Echo/Shout", "*", "/test.Admin/*", "/test.Admin/*", "/test.Admin/*"}; !slices.Equal(policies, w) {
		t.Errorf("policies %q, want %q", policies, w)
	}
}

// TestConfigErrors: what cannot be enforced is an error at start-up: the
// interceptors panic with it, NewLimiter returns it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	for _, tt := range []struct {
		limit core.Limit
		opts  []grpclimit.Option
		says  string
	}{
		{core.Limit{}, nil, "must be positive"},
		{core.Limit{}, []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{"/a.B/C": "1/s"})}, "the interceptor's limit"},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{"GET /a.B/C": "1/s"})}, `rule "GET /a.B/C": a pattern is "/package.Service/Method"`},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{"/a.B": "1/s"})}, `rule "/a.B": a pattern is`},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{"/a.B/C/D": "1/s"})}, `rule "/a.B/C/D": a pattern is`},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{"/a.B/{m}": "1/s"})}, `rule "/a.B/{m}": a pattern is`},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{"*": "1/s"})}, `rule "*": the interceptor's limit is the catch-all`},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{})}, "no rules"},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{"/a.B/C": "0/s"})}, `rule "/a.B/C"`},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{"/a.B/C": "1/s"}), grpclimit.With(redlimit.WithAlso(core.PerHour(5)))}, "not for rules"},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.With(redlimit.WithCost(2))}, "cost 2"},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.With(redlimit.WithKey(keyfunc.IP()))}, "redlimit.WithKey(keyfunc.Func) reads HTTP requests and would find no key in any call (every call would end InvalidArgument): key calls with grpclimit.WithKey, or grpclimit.WithIPKey"},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithIPKey(), grpclimit.With(redlimit.WithKey(keyfunc.IP()))}, "redlimit.WithKey"},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.With(redlimit.WithSkip(func(*http.Request) bool { return true }))}, "redlimit.WithSkip reads HTTP requests and would skip no call: use grpclimit.WithSkip"},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.With(redlimit.WithRequestLimits(func(*http.Request) ([]core.Limit, error) { return nil, nil }))}, "redlimit.WithRequestLimits reads HTTP requests and would pick no call's limits: use grpclimit.WithLimits"},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithRules(redlimit.Rules{"/a.B/C": "1/s"}), grpclimit.WithLimits(func(context.Context, string) ([]core.Limit, error) { return nil, nil })}, "WithLimits is not for WithRules"},
		{core.PerSecond(1), []grpclimit.Option{grpclimit.WithKey(nil)}, "WithKey(nil)"},
	} {
		_, err := grpclimit.NewLimiter(lim, tt.limit, tt.opts...)
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("NewLimiter(%v): %v; want an error saying %q", tt.limit, err, tt.says)
		}
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), tt.says) {
					t.Errorf("UnaryServerInterceptor(%v) panicked with %v; want %q", tt.limit, r, tt.says)
				}
			}()
			grpclimit.UnaryServerInterceptor(lim, tt.limit, tt.opts...)
		}()
	}
	if _, err := grpclimit.NewLimiter(lim, core.PerSecond(1), grpclimit.WithRules(redlimit.Rules{"/a.B/C": "1/s"})); err != nil {
		t.Errorf("NewLimiter with a good rule: %v", err)
	}
	// What a later option of the call replaces is not refused.
	for _, opts := range [][]grpclimit.Option{
		{grpclimit.With(redlimit.WithKey(keyfunc.IP())), grpclimit.WithIPKey()},
		{grpclimit.With(redlimit.WithSkip(func(*http.Request) bool { return true })), grpclimit.WithSkip(func(context.Context, string) bool { return false })},
		{grpclimit.With(redlimit.WithRequestLimits(func(*http.Request) ([]core.Limit, error) { return nil, nil })), grpclimit.WithLimits(nil)},
	} {
		if _, err := grpclimit.NewLimiter(lim, core.PerSecond(1), opts...); err != nil {
			t.Errorf("NewLimiter with an HTTP option replaced: %v", err)
		}
	}
	for _, spec := range []string{"2 concurrent", "2 concurrent, cost=1"} { // a rule's settings hide nothing
		_, err := grpclimit.NewLimiter(lim, core.PerSecond(1), grpclimit.WithRules(redlimit.Rules{"/a.B/*": spec}))
		if err == nil || !strings.Contains(err.Error(), "Concurrency") {
			t.Errorf("NewLimiter with a Concurrency rule %q: %v", spec, err)
		}
	}
}

// recoverUnary and recoverStream turn a handler's panic into Internal, as
// a recovery interceptor does, so that the server survives it.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return handler(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return handler(srv, ss)
}

// gate holds handlers until released.
type gate struct {
	started chan string
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan string, 8), release: make(chan struct{})} }

func (g *gate) wait(what string) {
	g.started <- what
	select {
	case <-g.release:
	case <-time.After(15 * time.Second):
	}
}

// TestInFlightUnary: a Concurrency limit holds a slot per call until its
// handler returns; the call past it ends ResourceExhausted, RetryInfo at
// most the lease; a handler's panic frees its slot.
func TestInFlightUnary(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	g := newGate()
	e := &echo{handle: func(_ context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if method == "Shout" {
			panic("shouting")
		}
		g.wait(method)
		return in, nil
	}}
	limit := core.Limit{Algorithm: core.Concurrency, Rate: 1, Period: 30 * time.Second}
	cc := serve(t, e, grpc.ChainUnaryInterceptor(recoverUnary, grpclimit.UnaryServerInterceptor(lim, limit)))
	done := make(chan result, 1)
	go func() { done <- say(t, cc, "/test.Echo/Say") }()
	<-g.started
	got := say(t, cc, "/test.Echo/Say")
	want(t, "a second in flight", got, codes.ResourceExhausted, "x-ratelimit-limit", "1", "x-ratelimit-remaining", "0")
	if d := retryInfo(got.st); d <= 0 || d > 30*time.Second {
		t.Errorf("RetryInfo %v, want at most the 30 s lease", d)
	}
	g.release <- struct{}{}
	want(t, "the first done", <-done, codes.OK)
	want(t, "a panicking handler", say(t, cc, "/test.Echo/Shout"), codes.Internal)
	go func() { done <- say(t, cc, "/test.Echo/Say") }()
	<-g.started // both slots were freed: admitted
	close(g.release)
	want(t, "the next done", <-done, codes.OK)
}

// TestInFlightStream: a stream holds its slot until its handler returns,
// however long it streams; a panic frees it too.
func TestInFlightStream(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	g := newGate()
	var panics atomic.Bool
	e := &echo{count: func(context.Context) {
		if panics.Load() {
			panic("counting")
		}
		g.wait("count")
	}}
	limit := core.Limit{Algorithm: core.Concurrency, Rate: 1, Period: 30 * time.Second}
	cc := serve(t, e, grpc.ChainStreamInterceptor(recoverStream, grpclimit.StreamServerInterceptor(lim, limit)))
	type streamed struct {
		r result
		n int
	}
	done := make(chan streamed, 1)
	go func() { r, n := count(t, cc, 3); done <- streamed{r, n} }()
	<-g.started
	got, _ := count(t, cc, 3)
	want(t, "a second stream in flight", got, codes.ResourceExhausted)
	g.release <- struct{}{}
	if s := <-done; s.r.code != codes.OK || s.n != 3 {
		t.Fatalf("the first stream: %v, %d messages", s.r.code, s.n)
	}
	panics.Store(true)
	got, _ = count(t, cc, 3)
	want(t, "a panicking stream", got, codes.Internal)
	panics.Store(false)
	go func() { r, n := count(t, cc, 2); done <- streamed{r, n} }()
	<-g.started // both slots were freed: admitted
	close(g.release)
	if s := <-done; s.r.code != codes.OK || s.n != 2 {
		t.Fatalf("the next stream: %v, %d messages", s.r.code, s.n)
	}
}

// TestResponseCost: WithResponseCost gets the HTTP status of the call's
// code: refunding successes counts only failed calls.
func TestResponseCost(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var mu sync.Mutex
	var statuses []int
	onlyFailures := redlimit.WithResponseCost(func(_ *http.Request, status int, _ http.Header) int {
		mu.Lock()
		defer mu.Unlock()
		statuses = append(statuses, status)
		if status < 400 {
			return 0
		}
		return 1
	})
	e := &echo{handle: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if v := metadata.ValueFromIncomingContext(ctx, "password"); len(v) == 1 && v[0] == "right" {
			return in, nil
		}
		return nil, status.Error(codes.Unauthenticated, "wrong password")
	}}
	limit := core.Limit{Algorithm: core.SlidingLog, Rate: 2, Period: time.Hour}
	cc := serve(t, e, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, limit, grpclimit.With(onlyFailures))))
	for i := 0; i < 4; i++ {
		want(t, "a good login", say(t, cc, "/test.Echo/Say", "password", "right"), codes.OK, "x-ratelimit-remaining", "1")
	}
	want(t, "a failed login", say(t, cc, "/test.Echo/Say", "password", "wrong"), codes.Unauthenticated)
	want(t, "another", say(t, cc, "/test.Echo/Say", "password", "wrong"), codes.Unauthenticated)
	want(t, "a third failure within the hour", say(t, cc, "/test.Echo/Say", "password", "wrong"), codes.ResourceExhausted)
	want(t, "even a good login now", say(t, cc, "/test.Echo/Say", "password", "right"), codes.ResourceExhausted)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(statuses, []int{200, 200, 200, 200, 401, 401}) {
		t.Errorf("statuses %v, want four 200 and two 401", statuses)
	}
}

// TestRealRedis: the same answers on a real redis-server.
func TestRealRedis(t *testing.T) {
	t.Parallel()
	lim := core.New(redistest.Standalone(t).Client(t), core.WithTimeout(10*time.Second), core.WithClock(func() time.Time { return t0 }))
	cc := serve(t, &echo{}, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(2),
		grpclimit.WithRules(redlimit.Rules{"/test.Echo/Shout": "1/m sliding_log"}))))
	want(t, "say", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-remaining", "1")
	want(t, "shout", say(t, cc, "/test.Echo/Shout"), codes.OK, "x-ratelimit-remaining", "0")
	got := say(t, cc, "/test.Echo/Shout")
	// Denied by both, the sliding log's longer wait binds.
	want(t, "shout again", got, codes.ResourceExhausted, "retry-after", "60", "x-ratelimit-limit", "1")
	if d := retryInfo(got.st); d != time.Minute {
		t.Errorf("RetryInfo %v", d)
	}
}

// rateLimiter is go-grpc-middleware v2's ratelimit.Limiter, as its
// interceptors take it.
type rateLimiter interface {
	Limit(ctx context.Context) error
}

var _ rateLimiter = (*grpclimit.Limiter)(nil)

// middlewareUnary is go-grpc-middleware v2's
// ratelimit.UnaryServerInterceptor, in a few lines: every error of Limit
// becomes ResourceExhausted with a message of its own.
func middlewareUnary(l rateLimiter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.Limit(ctx); err != nil {
			return nil, status.Errorf(codes.ResourceExhausted, "%s is rejected by grpc_ratelimit middleware, please retry later. %s", info.FullMethod, err)
		}
		return handler(ctx, req)
	}
}

// TestLimiter: a Limiter decides in go-grpc-middleware's interceptor, with
// the rules by method, and the rate-limit metadata reaches the client.
func TestLimiter(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	l, err := grpclimit.NewLimiter(lim, core.PerMinute(3), grpclimit.WithRules(redlimit.Rules{"/test.Echo/Shout": "1/m"}))
	if err != nil {
		t.Fatal(err)
	}
	cc := serve(t, &echo{}, grpc.UnaryInterceptor(middlewareUnary(l)))
	want(t, "shout", say(t, cc, "/test.Echo/Shout"), codes.OK, "x-ratelimit-limit", "1", "x-ratelimit-remaining", "0")
	got := say(t, cc, "/test.Echo/Shout")
	want(t, "shout again", got, codes.ResourceExhausted, "retry-after", "60")
	if !strings.Contains(got.st.Message(), "rate limit exceeded") {
		t.Errorf("message %q", got.st.Message())
	}
	want(t, "say", say(t, cc, "/test.Echo/Say"), codes.OK, "x-ratelimit-limit", "3", "x-ratelimit-remaining", "1")

	// Outside a server call there is no peer, so no key; the error is the
	// status.
	err = l.Limit(context.Background())
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument {
		t.Errorf("Limit outside a call: %v", err)
	}
}

// TestDecisionsFrom: a handler finds every chained interceptor's
// Decision of its call in its context (redlimit.DecisionsFrom), in the
// order they decided, unary and streaming alike.
func TestDecisionsFrom(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	decisions := func(ctx context.Context) string {
		var s []string
		for _, d := range redlimit.DecisionsFrom(ctx) {
			s = append(s, d.Policy+":"+string(d.Outcome))
		}
		return strings.Join(s, " ")
	}
	var streamed atomic.Value
	e := &echo{
		handle: func(ctx context.Context, _ string, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return wrapperspb.String(decisions(ctx)), nil
		},
		count: func(ctx context.Context) { streamed.Store(decisions(ctx)) },
	}
	named := func(name string) grpclimit.Option { return grpclimit.With(redlimit.WithName(name)) }
	cc := serve(t, e,
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(5), named("outer")),
			grpclimit.UnaryServerInterceptor(lim, core.PerMinute(5), named("inner"))),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, core.PerMinute(5), named("streams"))))
	if got := say(t, cc, "/test.Echo/Say"); got.code != codes.OK || got.reply != "outer:allowed inner:allowed" {
		t.Fatalf("the unary handler found %q (%v), want \"outer:allowed inner:allowed\"", got.reply, got.code)
	}
	if got, n := count(t, cc, 1); got.code != codes.OK || n != 1 || streamed.Load() != "streams:allowed" {
		t.Fatalf("the stream handler found %q (%v), want \"streams:allowed\"", streamed.Load(), got.code)
	}
}
