package grpclimit_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/core"
)

// The test service, written by hand so that no protoc is needed: its
// messages are wrapperspb.StringValue.
//
//	service test.Echo {
//	  rpc Say(StringValue) returns (StringValue);            // "/test.Echo/Say"
//	  rpc Shout(StringValue) returns (StringValue);          // "/test.Echo/Shout"
//	  rpc Count(StringValue) returns (stream StringValue);   // "/test.Echo/Count"
//	}
//	service test.Admin { rpc Reset(StringValue) returns (StringValue); }

// echo is the service's implementation; a test may replace its handler.
type echo struct {
	// handle answers Say, Shout and Reset; nil echoes the request.
	handle func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	// count, if set, is called before Count sends anything.
	count func(ctx context.Context)
}

func (e *echo) unary(method string) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: method, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			if e.handle != nil {
				return e.handle(ctx, method, req.(*wrapperspb.StringValue))
			}
			return req, nil
		}
		if icpt == nil {
			return h(ctx, in)
		}
		service := "/test.Echo/"
		if method == "Reset" {
			service = "/test.Admin/"
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: service + method}, h)
	}}
}

// countStream sends the numbers 1 to n, n being the request's value.
func (e *echo) countStream(srv any, ss grpc.ServerStream) error {
	in := new(wrapperspb.StringValue)
	if err := ss.RecvMsg(in); err != nil {
		return err
	}
	if e.count != nil {
		e.count(ss.Context())
	}
	n, _ := strconv.Atoi(in.GetValue())
	for i := 1; i <= n; i++ {
		if err := ss.SendMsg(wrapperspb.String(strconv.Itoa(i))); err != nil {
			return err
		}
	}
	return nil
}

func (e *echo) register(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Echo",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{e.unary("Say"), e.unary("Shout")},
		Streams:     []grpc.StreamDesc{{StreamName: "Count", Handler: e.countStream, ServerStreams: true}},
	}, e)
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Admin",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{e.unary("Reset")},
	}, e)
}

// serve starts a server with opts and the echo service on a free port of
// 127.0.0.1, and returns a client connection to it; both end with the test.
func serve(t testing.TB, e *echo, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	e.register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// t0 is the clock of the tests' Limiters: it stands still.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// embedded returns a Limiter on a fresh miniredis, with a clock that
// stands still and a generous timeout (for -race on busy cores).
func embedded(t testing.TB, opts ...core.Option) (*core.Limiter, *miniredis.Miniredis) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	opts = append([]core.Option{core.WithClock(func() time.Time { return t0 }), core.WithTimeout(10 * time.Second)}, opts...)
	return core.New(rdb, opts...), m
}

// result is what a client saw of one call.
type result struct {
	code   codes.Code
	st     *status.Status
	header metadata.MD
	reply  string
}

// say calls /test.Echo/Say (or another unary method) with the outgoing
// metadata md (name, value, ...).
func say(t testing.TB, cc *grpc.ClientConn, method string, md ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var header metadata.MD
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String("hi"), out, grpc.Header(&header))
	st := status.Convert(err)
	return result{code: st.Code(), st: st, header: header, reply: out.GetValue()}
}

// count opens /test.Echo/Count for n numbers and reads them all.
func count(t testing.TB, cc *grpc.ClientConn, n int, md ...string) (result, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	desc := &grpc.StreamDesc{StreamName: "Count", ServerStreams: true}
	cs, err := cc.NewStream(ctx, desc, "/test.Echo/Count")
	if err != nil {
		st := status.Convert(err)
		return result{code: st.Code(), st: st}, 0
	}
	if err := cs.SendMsg(wrapperspb.String(strconv.Itoa(n))); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		if err = cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			break
		}
		got++
	}
	if err == io.EOF { // the stream ended with OK
		err = nil
	}
	header, _ := cs.Header()
	st := status.Convert(err)
	return result{code: st.Code(), st: st, header: header}, got
}
