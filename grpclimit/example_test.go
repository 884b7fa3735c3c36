package grpclimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/keyfunc"
)

func ExampleUnaryServerInterceptor() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}))

	// Every call: 20 a second per client address. /test.Echo/Shout: 1 a
	// minute more, decided with it.
	every := core.PerSecond(20)
	rules := grpclimit.WithRules(redlimit.Rules{"/test.Echo/Shout": "1/m"})
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, every, rules)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, every, rules)),
	)
	(&echo{}).register(srv) // your services
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	for i := 0; i < 2; i++ {
		var header metadata.MD
		err := cc.Invoke(context.Background(), "/test.Echo/Shout", wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&header))
		st := status.Convert(err)
		fmt.Println(st.Code(), header.Get("x-ratelimit-limit"), header.Get("x-ratelimit-remaining"), header.Get("retry-after"))
		for _, detail := range st.Details() {
			if info, ok := detail.(*errdetails.RetryInfo); ok {
				fmt.Println("retry in", info.GetRetryDelay().AsDuration().Round(time.Second))
			}
		}
	}
	// Output:
	// OK [1] [0] []
	// ResourceExhausted [1] [0] [60]
	// retry in 1m0s
}

func ExampleWithKey() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}), core.WithLogger(slog.New(slog.DiscardHandler)))

	// Per user and method: the user is what the authentication
	// interceptor before this one put in the context.
	perUser := grpclimit.WithKey(func(ctx context.Context, fullMethod string) (string, error) {
		user, ok := ctx.Value(userKey{}).(string)
		if !ok {
			return "", keyfunc.ErrNoKey // answered InvalidArgument
		}
		return "user:" + user + "|" + fullMethod, nil
	})
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authenticate, grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1), perUser)))
	(&echo{}).register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	for _, call := range []struct{ user, method string }{
		{"alice", "/test.Echo/Say"}, {"alice", "/test.Echo/Say"}, {"alice", "/test.Echo/Shout"}, {"bob", "/test.Echo/Say"}, {"", "/test.Echo/Say"},
	} {
		ctx := context.Background()
		if call.user != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "user", call.user)
		}
		err := cc.Invoke(ctx, call.method, wrapperspb.String("hi"), new(wrapperspb.StringValue))
		fmt.Printf("%-5s %-16s %v\n", call.user, call.method, status.Code(err))
	}
	// Output:
	// alice /test.Echo/Say   OK
	// alice /test.Echo/Say   ResourceExhausted
	// alice /test.Echo/Shout OK
	// bob   /test.Echo/Say   OK
	//       /test.Echo/Say   InvalidArgument
}

// serveExample starts srv with the echo service on a free port and returns
// a client connection to it, and a function that stops both.
func serveExample(srv *grpc.Server) (*grpc.ClientConn, func()) {
	(&echo{}).register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	return cc, func() { cc.Close(); srv.Stop() }
}

// exampleLimiter returns a Limiter on a fresh miniredis that logs nothing,
// and a function that closes it.
func exampleLimiter() (*core.Limiter, func()) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	return core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}), core.WithLogger(slog.New(slog.DiscardHandler))), m.Close
}

// call calls method as user ("" for none) and prints what came back.
func call(cc *grpc.ClientConn, user, method, value string) {
	ctx := context.Background()
	if user != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "user", user)
	}
	var header metadata.MD
	err := cc.Invoke(ctx, method, wrapperspb.String(value), new(wrapperspb.StringValue), grpc.Header(&header))
	fmt.Printf("%-5s %-17s %-17s remaining %v\n", user, method, status.Code(err), header.Get("x-ratelimit-remaining"))
}

func ExampleWithSkip() {
	lim, done := exampleLimiter()
	defer done()

	// Health checks and the admin service are not limited.
	skip := grpclimit.WithSkip(func(_ context.Context, fullMethod string) bool {
		return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/") || strings.HasPrefix(fullMethod, "/test.Admin/")
	})
	cc, stop := serveExample(grpc.NewServer(grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1), skip))))
	defer stop()
	for _, method := range []string{"/test.Echo/Say", "/test.Echo/Say", "/test.Admin/Reset", "/test.Admin/Reset"} {
		call(cc, "", method, "hi")
	}
	// Output:
	//       /test.Echo/Say    OK                remaining [0]
	//       /test.Echo/Say    ResourceExhausted remaining [0]
	//       /test.Admin/Reset OK                remaining []
	//       /test.Admin/Reset OK                remaining []
}

func ExampleWithLimits() {
	lim, done := exampleLimiter()
	defer done()

	// Plan tiers: each customer's limits follow its plan; the
	// authentication interceptor before this one put the customer in the
	// context. A customer of no known plan ends InvalidArgument.
	plans := map[string][]core.Limit{
		"free": {core.PerMinute(2)},
		"pro":  {core.PerMinute(100), {Algorithm: core.FixedWindow, Rate: 10000, Period: 24 * time.Hour}},
	}
	tiers := grpclimit.WithLimits(func(ctx context.Context, _ string) ([]core.Limit, error) {
		user, ok := ctx.Value(userKey{}).(string)
		if !ok {
			return nil, nil // the interceptor's limit
		}
		limits, ok := plans[planOf(user)]
		if !ok {
			return nil, fmt.Errorf("%s has no plan", user)
		}
		return limits, nil
	})
	perUser := grpclimit.WithKey(func(ctx context.Context, _ string) (string, error) {
		user, _ := ctx.Value(userKey{}).(string)
		return "user:" + user, nil
	})
	cc, stop := serveExample(grpc.NewServer(grpc.ChainUnaryInterceptor(authenticate,
		grpclimit.UnaryServerInterceptor(lim, core.PerMinute(10), perUser, tiers))))
	defer stop()
	for _, user := range []string{"", "ann", "ann", "ann", "bea", "cid"} {
		call(cc, user, "/test.Echo/Say", "hi")
	}
	// Output:
	//       /test.Echo/Say    OK                remaining [9]
	// ann   /test.Echo/Say    OK                remaining [1]
	// ann   /test.Echo/Say    OK                remaining [0]
	// ann   /test.Echo/Say    ResourceExhausted remaining [0]
	// bea   /test.Echo/Say    OK                remaining [99]
	// cid   /test.Echo/Say    InvalidArgument   remaining []
}

// planOf stands in for a look-up of a customer's plan.
func planOf(user string) string {
	return map[string]string{"ann": "free", "bea": "pro"}[user]
}

func ExampleWithObserver() {
	lim, done := exampleLimiter()
	defer done()

	// Log every denial with the call's method and user; the decisions of
	// calls reach promlimit's and otellimit's Metrics.Observer() too,
	// through grpclimit.With.
	logDenials := grpclimit.WithObserver(func(ctx context.Context, fullMethod string, d redlimit.Decision) {
		if !d.Allowed() {
			user, _ := ctx.Value(userKey{}).(string)
			fmt.Printf("denied: %s by %s under %q (%s), retry in %v\n", fullMethod, user, d.Policy, d.Outcome, d.Result.RetryAfter.Round(time.Second))
		}
	})
	cc, stop := serveExample(grpc.NewServer(grpc.ChainUnaryInterceptor(authenticate,
		grpclimit.UnaryServerInterceptor(lim, core.PerMinute(1), logDenials))))
	defer stop()
	call(cc, "ann", "/test.Echo/Say", "hi")
	call(cc, "ann", "/test.Echo/Shout", "hi")
	// Output:
	// ann   /test.Echo/Say    OK                remaining [0]
	// denied: /test.Echo/Shout by ann under "1/m" (denied), retry in 1m0s
	// ann   /test.Echo/Shout  ResourceExhausted remaining [0]
}

func ExampleWithResponseCost() {
	lim, done := exampleLimiter()
	defer done()

	// A budget of 100 tokens an hour: each call is admitted while tokens
	// remain and charged, after its handler, the tokens its reply says it
	// used; failed calls are free.
	tokens := grpclimit.WithResponseCost(func(_ context.Context, _ string, reply any, err error) int {
		if err != nil {
			return 0
		}
		used, _ := strconv.Atoi(reply.(*wrapperspb.StringValue).GetValue())
		return used
	})
	budget := core.Limit{Algorithm: core.SlidingLog, Rate: 100, Period: time.Hour, Unit: "tokens"}
	cc, stop := serveExample(grpc.NewServer(grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, budget, tokens))))
	defer stop()
	for _, used := range []string{"60", "30", "20", "5"} {
		call(cc, "", "/test.Echo/Say", used) // the echo service replies with the value: the tokens used
	}
	// Output:
	//       /test.Echo/Say    OK                remaining [99]
	//       /test.Echo/Say    OK                remaining [39]
	//       /test.Echo/Say    OK                remaining [9]
	//       /test.Echo/Say    ResourceExhausted remaining [0]
}

// tokensUsed stands for what a model's reply says it used: here the echo
// service's reply, a number.
func tokensUsed(reply any) int {
	used, _ := strconv.Atoi(reply.(*wrapperspb.StringValue).GetValue())
	return used
}

// Requests and tokens per API key for a gRPC service: a unary call is
// charged what its reply says it used, a server stream what its handler
// reports to the call's Usage as it sends (so a client that leaves
// mid-stream is charged what was sent).
func ExampleWithBudget() {
	lim, done := exampleLimiter()
	defer done()
	tokens, err := core.ParseLimits("40000/m unit=tokens")
	if err != nil {
		panic(err)
	}
	budget := grpclimit.WithBudget(grpclimit.Budget{
		Limits: tokens,
		Estimate: func(ctx context.Context, fullMethod string, req any) int {
			return 1000 // req is nil for a stream
		},
		Cost: func(ctx context.Context, fullMethod string, reply any, err error) int {
			if reply == nil { // a stream, or a failed call
				if used, ok := redlimit.UsageFrom(ctx).Used("tokens"); ok {
					return used
				}
				return 0
			}
			return tokensUsed(reply)
		},
	})
	key := grpclimit.WithKey(func(ctx context.Context, _ string) (string, error) {
		return strings.Join(metadata.ValueFromIncomingContext(ctx, "user"), ""), nil
	})
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, core.PerMinute(60), key, budget)),
		grpc.StreamInterceptor(grpclimit.StreamServerInterceptor(lim, core.PerMinute(60), key, budget)),
	)
	// In a stream handler, as each message goes out:
	//	redlimit.UsageFrom(ss.Context()).Add("tokens", n)
	cc, stop := serveExample(srv)
	defer stop()
	for _, used := range []string{"20000", "15000", "9000", "10"} { // the echo replies with the tokens used
		call(cc, "ann", "/test.Echo/Say", used)
	}
	// 44 000 tokens used of 40 000: the key is in debt, the fourth call waits.
	// Output:
	// ann   /test.Echo/Say    OK                remaining [59]
	// ann   /test.Echo/Say    OK                remaining [58]
	// ann   /test.Echo/Say    OK                remaining [57]
	// ann   /test.Echo/Say    ResourceExhausted remaining [0]
}
