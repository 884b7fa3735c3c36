package grpclimit_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpclimit"
)

// fromMetadata reads an integer of the call's incoming metadata, or def.
func fromMetadata(ctx context.Context, key string, def int) int {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) == 1 {
		if n, err := strconv.Atoi(v[0]); err == nil {
			return n
		}
	}
	return def
}

// tokenBudget is a budget of 1000 tokens an hour whose estimate is the
// call's "estimate" metadata and whose cost its "use" metadata (the
// estimate when it has none); reqs counts the estimates that saw a
// request.
func tokenBudget(reqs *atomic.Int64) grpclimit.Budget {
	return grpclimit.Budget{
		Limits: []core.Limit{{Algorithm: core.FixedWindow, Rate: 1000, Period: time.Hour, Unit: "tokens"}},
		Estimate: func(ctx context.Context, _ string, req any) int {
			if req != nil {
				reqs.Add(1)
			}
			return fromMetadata(ctx, "estimate", 0)
		},
	}
}

// TestBudgetUnary: a call the token limit denies is charged no request,
// and the settlement charges the tokens the call used, leaving the
// requests alone.
func TestBudgetUnary(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var reqs atomic.Int64
	b := tokenBudget(&reqs)
	b.Cost = func(ctx context.Context, _ string, reply any, err error) int {
		if reply == nil || err != nil {
			return 0
		}
		return fromMetadata(ctx, "use", fromMetadata(ctx, "estimate", 0))
	}
	limit := core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: time.Hour}
	cc := serve(t, &echo{}, grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, limit, grpclimit.WithBudget(b),
		grpclimit.With(redlimit.WithName("g"), redlimit.WithHeaders(redlimit.HeadersBoth)))))
	want(t, "estimate 600, used 900", say(t, cc, "/test.Echo/Say", "estimate", "600", "use", "900"), codes.OK,
		"ratelimit-policy", `"g";q=3;w=3600, "g-1h-tokens";q=1000;qu="tokens";w=3600`,
		"ratelimit", `"g";r=2;t=3600, "g-1h-tokens";r=400;t=3600`)
	got := say(t, cc, "/test.Echo/Say", "estimate", "200")
	want(t, "estimate 200 with 100 left", got, codes.ResourceExhausted,
		"x-ratelimit-limit", "1000", "x-ratelimit-remaining", "100", "retry-after", "3600",
		"ratelimit", `"g";r=2;t=3600, "g-1h-tokens";r=100;t=3600`)
	if d := retryInfo(got.st); d != time.Hour {
		t.Errorf("RetryInfo %v, want the hour until the window's tokens are back", d)
	}
	want(t, "estimate 100: the denied call was charged no request", say(t, cc, "/test.Echo/Say", "estimate", "100"), codes.OK,
		"ratelimit", `"g";r=1;t=3600, "g-1h-tokens";r=0;t=3600`)
	if n := reqs.Load(); n != 3 {
		t.Errorf("%d estimates saw the call's request, want 3", n)
	}
}

// countSent is a stream interceptor after grpclimit's that reports 10
// tokens to the call's Usage for every message the handler sends, and
// counts them in sent.
func countSent(sent *atomic.Int64) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &sentStream{ServerStream: ss, sent: sent})
	}
}

type sentStream struct {
	grpc.ServerStream
	sent *atomic.Int64
}

func (s *sentStream) SendMsg(m any) error {
	if err := s.ServerStream.SendMsg(m); err != nil {
		return err
	}
	redlimit.UsageFrom(s.Context()).Add("tokens", 10)
	s.sent.Add(1)
	time.Sleep(time.Millisecond) // as a model producing tokens would
	return nil
}

// TestBudgetStream: a server stream reserves its estimate (its Estimate
// sees no request) and is settled when it ends at what it reported to its
// Usage; a client that leaves mid-stream is charged what was sent.
func TestBudgetStream(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var reqs, sent atomic.Int64
	b := tokenBudget(&reqs)
	b.Limits[0].Rate = 100000
	opts := []grpclimit.Option{grpclimit.WithBudget(b), grpclimit.With(redlimit.WithName("s"), redlimit.WithHeaders(redlimit.HeadersDraft))}
	limit := core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: time.Hour}
	cc := serve(t, &echo{},
		grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, limit, opts...)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, limit, opts...), countSent(&sent)))
	res, n := count(t, cc, 20, "estimate", "50")
	want(t, "a stream of 20", res, codes.OK, "ratelimit", `"s";r=99;t=3600, "s-1h-tokens";r=99950;t=3600`)
	if n != 20 {
		t.Fatalf("%d messages, want 20", n)
	}
	// settled at 200 when the stream ended; the unary call reserves none
	want(t, "then a call", say(t, cc, "/test.Echo/Say"), codes.OK, "ratelimit", `"s";r=98;t=3600, "s-1h-tokens";r=99800;t=3600`)
	if n := reqs.Load(); n != 1 {
		t.Errorf("%d estimates saw a request, want 1 (the unary call's; a stream's has none)", n)
	}

	// A client that leaves after 3 messages of a million.
	sent.Store(0)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "estimate", "50"))
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "Count", ServerStreams: true}, "/test.Echo/Count")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("1000000")); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	for range 3 {
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := sent.Load()
		got := say(t, cc, "/test.Echo/Say").header.Get("ratelimit")
		wantTokens := fmt.Sprintf(`"s-1h-tokens";r=%d;t=3600`, 99800-10*before)
		if len(got) == 1 && strings.HasSuffix(got[0], wantTokens) && sent.Load() == before {
			if before < 3 || before >= 1000000 {
				t.Fatalf("%d messages sent, want at least the 3 read and not all", before)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the client left: ratelimit %q, want it to end %q (%d sent)", got, wantTokens, before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBudgetHTTPOnly: redlimit.WithBudget's functions read HTTP requests:
// refused.
func TestBudgetHTTPOnly(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	_, err := grpclimit.NewLimiter(lim, core.PerMinute(1), grpclimit.With(redlimit.WithBudget(redlimit.Budget{
		Limits: []core.Limit{{Rate: 10, Period: time.Minute, Unit: "tokens"}}})))
	if err == nil || !strings.Contains(err.Error(), "grpclimit.WithBudget") {
		t.Fatalf("redlimit.WithBudget on an interceptor: %v, want refused, pointing to grpclimit.WithBudget", err)
	}
}

// TestBudgetHowCallsEnd: however a call's handler ends, the call is
// charged what it reported to its Usage: a unary call the client
// cancels, and a unary or stream handler that panics (behind a recovery
// interceptor); one that reported nothing, its estimate.
func TestBudgetHowCallsEnd(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	var reqs atomic.Int64
	b := tokenBudget(&reqs) // no Cost: what the handler reported
	started := make(chan struct{}, 1)
	report := func(ctx context.Context) {
		if n := fromMetadata(ctx, "report", -1); n >= 0 {
			redlimit.UsageFrom(ctx).Add("tokens", n)
		}
		switch v := metadata.ValueFromIncomingContext(ctx, "end"); {
		case len(v) == 1 && v[0] == "panic":
			panic("the handler's panic")
		case len(v) == 1 && v[0] == "cancel":
			started <- struct{}{}
			<-ctx.Done() // the client leaves
		}
	}
	e := &echo{handle: func(ctx context.Context, _ string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		report(ctx)
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		return in, nil
	}, count: report}
	opts := []grpclimit.Option{grpclimit.WithBudget(b), grpclimit.With(redlimit.WithName("e"), redlimit.WithHeaders(redlimit.HeadersDraft))}
	limit := core.Limit{Algorithm: core.FixedWindow, Rate: 100000, Period: time.Hour}
	cc := serve(t, e,
		grpc.ChainUnaryInterceptor(recoverUnary, grpclimit.UnaryServerInterceptor(lim, limit, opts...)),
		grpc.ChainStreamInterceptor(recoverStream, grpclimit.StreamServerInterceptor(lim, limit, opts...)))
	// tokens waits until the tokens left are left, as a call reserving
	// and reporting nothing sees them: a settlement comes soon after its
	// handler ends, which a client that cancelled does not wait for.
	tokens := func(what string, left int) {
		t.Helper()
		wantTokens := fmt.Sprintf(`"e-1h-tokens";r=%d;t=3600`, left)
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := say(t, cc, "/test.Echo/Say")
			if got.code != codes.OK {
				t.Fatalf("%s: a call reserving nothing ended %v", what, got.code)
			}
			if v := got.header.Get("ratelimit"); len(v) == 1 && strings.HasSuffix(v[0], wantTokens) {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: ratelimit %q, want it to end %q", what, v, wantTokens)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// A unary call the client cancels after its handler reported 300 of
	// an estimate of 100.
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "estimate", "100", "report", "300", "end", "cancel"))
	failed := make(chan error, 1)
	go func() {
		failed <- cc.Invoke(ctx, "/test.Echo/Say", wrapperspb.String("hi"), new(wrapperspb.StringValue))
	}()
	<-started
	cancel()
	if err := <-failed; status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled call: %v", err)
	}
	tokens("a cancelled unary call that reported 300", 700)

	want(t, "a unary handler that panics after reporting 200",
		say(t, cc, "/test.Echo/Say", "estimate", "100", "report", "200", "end", "panic"), codes.Internal)
	tokens("a unary handler that panicked", 500)

	got, _ := count(t, cc, 5, "estimate", "100", "report", "150", "end", "panic")
	want(t, "a stream handler that panics after reporting 150", got, codes.Internal)
	tokens("a stream handler that panicked", 350)

	got, _ = count(t, cc, 5, "estimate", "100", "end", "panic")
	want(t, "a stream handler that panics having reported nothing", got, codes.Internal)
	tokens("a stream handler that panicked having reported nothing: its estimate", 250)
}

// TestZeroLimiter: a nil or zero Limiter, which cannot decide, is refused
// when an interceptor or a Limiter is built, saying to make one with
// core.New, rather than failing every call open.
func TestZeroLimiter(t *testing.T) {
	t.Parallel()
	for _, lim := range []*core.Limiter{nil, {}} {
		if _, err := grpclimit.NewLimiter(lim, core.PerMinute(1)); err == nil || !strings.Contains(err.Error(), "core.New") {
			t.Errorf("NewLimiter(%p): %v; want refused, saying core.New", lim, err)
		}
		for name, build := range map[string]func(){
			"UnaryServerInterceptor":  func() { grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1)) },
			"StreamServerInterceptor": func() { grpclimit.StreamServerInterceptor(lim, core.PerMinute(1)) },
			"rules": func() {
				grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1), grpclimit.WithRules(redlimit.Rules{"/a.B/*": "1/s"}))
			},
		} {
			func() {
				defer func() {
					if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "core.New") {
						t.Errorf("%s(%p): recovered %v; want a panic saying core.New", name, lim, r)
					}
				}()
				build()
			}()
		}
	}
}
