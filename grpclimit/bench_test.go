package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// BenchmarkUnaryInterceptor: the interceptor alone, called as grpc-go
// calls it, on a real redis-server: go test -run X -bench . -benchmem
// (from grpclimit/). The interceptor's cost is "limited" minus "bare"; a
// decision is one round trip.
func BenchmarkUnaryInterceptor(b *testing.B) {
	lim := core.New(redistest.Standalone(b).Client(b))
	limit := core.Limit{Rate: 1_000_000_000, Period: time.Second} // never denies
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 40000}})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(":authority", "localhost", "content-type", "application/grpc", "user-agent", "grpc-go/1.84.0"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, transportStream{})
	info := &grpc.UnaryServerInfo{FullMethod: "/test.Echo/Say"}
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	for _, c := range []struct {
		name string
		icpt grpc.UnaryServerInterceptor
	}{
		{"bare", func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		}},
		{"limited", grpclimit.UnaryServerInterceptor(lim, limit, grpclimit.With(redlimit.WithName("bench")))},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.icpt(ctx, nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// transportStream stands in for grpc-go's stream of a call, where
// grpc.SetHeader puts the metadata.
type transportStream struct{}

func (transportStream) Method() string                  { return "/test.Echo/Say" }
func (transportStream) SetHeader(metadata.MD) error     { return nil }
func (transportStream) SendHeader(metadata.MD) error    { return nil }
func (transportStream) SetTrailer(md metadata.MD) error { return nil }
