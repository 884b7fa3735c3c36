package grpclimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
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
